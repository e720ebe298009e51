"""Certificates that renew and rotate with nobody's help, under traffic, proven in the sandbox:
the guard registered from deploy/base, `certs ensure` run as its Job and CronJob run it, and
the webhook serving the TLS Secret through a kubelet-like volume that follows the Secret
tens of seconds late. Meanwhile kubectl creates pods through the guard without pause, and a
second client posts reviews to /validate on a new connection each time, trusting what the
webhook configuration's caBundle says at that moment, as the API server does. Over about
five minutes: serving-certificate renewals, a CA rotation, a re-run of the install step and a
run killed midway; not one request refused or failed. Long: in the slow suite."""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.builders import container, pod, review
from tests.conftest import SERVICE
from volcano_guard.base.kubeconfig import write_kubeconfig
from volcano_guard.base.tls import server_context
from volcano_guard.certs.generate import generate
from volcano_guard_sandbox.apiserver.authn import load_token_file
from volcano_guard_sandbox.apiserver.endpoints import ServiceEndpoints
from volcano_guard_sandbox.apiserver.runner import SandboxThread
from volcano_guard_sandbox.apiserver.server import SandboxSettings
from volcano_guard_sandbox.guarded_sandbox import (
    TOKENS,
    admission_only,
    kubectl_path,
    shipped_config,
)
from volcano_guard_sandbox.processes import free_port

CLI_MANIFESTS = [sys.executable, "-m", "volcano_guard.cli", "manifests"]

pytestmark = pytest.mark.slow
# deploy/base's namespace: its registrations call the Service there, and `certs ensure` refuses
# to give them a CA for any other.
NAMESPACE = "volcano-guard"
HOSTNAME = f"{SERVICE}.{NAMESPACE}.svc"
CLI = [sys.executable, "-m", "volcano_guard.cli"]
# Short lives, so that renewals (a third of the life left: every 40 s) and a CA rotation (at
# 200 s) happen within the test; the kubelet-like volume follows the Secret 15 s late.
ENSURE_FLAGS = [
    "--namespace",
    NAMESPACE,
    "--service",
    SERVICE,
    "--mutating",
    "volcano-guard",
    "--validating",
    "volcano-guard",
    "--ca-valid",
    "300s",
    "--cert-valid",
    "120s",
]
KUBELET_DELAY, CRON_EVERY, RUN_FOR = 15.0, 5.0, 270.0


class KubeletVolume(threading.Thread):
    """The TLS Secret as the kubelet projects it into a pod: the keys as files in a folder,
    swapped in at once through a `..data` symlink (AtomicWriter), `delay` seconds after the
    Secret changed."""

    def __init__(self, api: Any, folder: Path, delay: float) -> None:
        super().__init__(daemon=True)
        self.core, self.folder, self.delay = client.CoreV1Api(api), folder, delay
        self.stop, self.synced = threading.Event(), 0
        self._seen: dict[str, str] | None = None

    def current(self) -> dict[str, str] | None:
        try:
            secret: Any = self.core.read_namespaced_secret("volcano-guard-tls", NAMESPACE)
            return dict(secret.data)
        except ApiException:
            return None

    def project(self, data: dict[str, str]) -> None:
        stamp = self.folder / f"..{time.monotonic_ns()}"
        stamp.mkdir()
        for key, value in data.items():
            (stamp / key).write_bytes(base64.b64decode(value))
        link = self.folder / "..data_tmp"
        link.symlink_to(stamp.name)
        os.replace(link, self.folder / "..data")
        for key in data:
            if not (self.folder / key).is_symlink():
                (self.folder / key).symlink_to(f"..data/{key}")
        self.synced += 1

    def run(self) -> None:
        while not self.stop.is_set():
            data = self.current()
            if data and data != self._seen:
                self._seen = data
                if self.synced:  # the first projection is at the pod's start
                    self.stop.wait(self.delay)
                self.project(data)
            self.stop.wait(1.0)


@contextmanager
def guard(directory: Path) -> Iterator[tuple[SandboxThread, Path, Any, KubeletVolume, int]]:
    """The sandbox with deploy/base's registrations, `certs ensure` run as the install Job,
    the webhook serving the projected TLS Secret; yields (sandbox, kubeconfig, api, volume,
    webhook port)."""
    sandbox_certs = generate(
        "sandbox", "local", directory / "sandbox", days=1, extra_dns_names=("localhost",)
    )
    (directory / "tokens.csv").write_text(TOKENS)
    port, metrics = free_port(), free_port()
    settings = SandboxSettings(
        services=ServiceEndpoints({(NAMESPACE, SERVICE, 443): [("127.0.0.1", port)]}),
        tokens=load_token_file(directory / "tokens.csv"),
    )
    tls = server_context(sandbox_certs.cert_file, sandbox_certs.key_file)
    kubectl = kubectl_path()
    assert kubectl is not None
    with SandboxThread(settings=settings, tls=tls) as sandbox:
        sandbox.seed(
            [
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
                for name in (NAMESPACE, "team-a")
            ]
        )
        kubeconfig = directory / "kubeconfig"
        write_kubeconfig(
            kubeconfig,
            sandbox.url.replace("127.0.0.1", "localhost"),
            token="admin",
            ca_file=sandbox_certs.ca_file,
        )
        (directory / "config.yaml").write_text(yaml.safe_dump(shipped_config()))
        rendered = subprocess.run(
            [
                sys.executable,
                "-m",
                "volcano_guard.cli",
                "manifests",
                "--config",
                str(directory / "config.yaml"),
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        subprocess.run(
            [kubectl, "--kubeconfig", str(kubeconfig), "apply", "-f", "-"],
            input=admission_only(rendered),
            check=True,
            capture_output=True,
            text=True,
        )
        ensure(kubeconfig)  # the install Job
        configuration = client.Configuration(host=sandbox.url.replace("127.0.0.1", "localhost"))
        configuration.ssl_ca_cert = str(sandbox_certs.ca_file)
        configuration.api_key = {"authorization": "Bearer admin"}
        with client.ApiClient(configuration) as api:
            volume = KubeletVolume(api, directory / "tls", KUBELET_DELAY)
            volume.folder.mkdir()
            volume.start()
            while not volume.synced:
                time.sleep(0.1)
            webhook = subprocess.Popen(
                [
                    *CLI,
                    "webhook",
                    "--listen",
                    f"127.0.0.1:{port}",
                    "--metrics-listen",
                    f"127.0.0.1:{metrics}",
                    "--tls-cert",
                    str(volume.folder / "tls.crt"),
                    "--tls-key",
                    str(volume.folder / "tls.key"),
                    "--kubeconfig",
                    str(kubeconfig),
                    "--config",
                    str(write_config(directory)),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                wait_ready(metrics)
                yield sandbox, kubeconfig, api, volume, port
            finally:
                volume.stop.set()
                webhook.terminate()
                webhook.wait(30)


def write_config(directory: Path) -> Path:
    """The config deploy/base ships, as a file."""
    path = directory / "config.yaml"
    path.write_text(yaml.safe_dump(shipped_config()))
    return path


def wait_ready(metrics: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{metrics}/readyz", timeout=1)
            return
        except OSError:
            time.sleep(0.2)
    raise AssertionError("the webhook never became ready")


def ensure(kubeconfig: Path, kill_midway: bool = False) -> list[str]:
    """`certs ensure` as the Job and CronJob run it; its step lines. If asked, killed
    (SIGKILL) as soon as it says its second step: the first done, the second under way."""
    proc = subprocess.Popen(
        [*CLI, "certs", "ensure", *ENSURE_FLAGS, "--kubeconfig", str(kubeconfig)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    if kill_midway:
        said = [proc.stdout.readline(), proc.stdout.readline()]
        proc.kill()
        proc.wait(10)
        return [line.split(":")[0] for line in said if line]
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return [line.split(":")[0] for line in out.splitlines()[:-1]]


class Traffic(threading.Thread):
    """Pods created with kubectl without pause, and reviews posted to /validate on a new
    connection each, trusting the webhook configuration's caBundle of that moment."""

    def __init__(self, kubeconfig: Path, api: Any, port: int) -> None:
        super().__init__(daemon=True)
        self.kubeconfig, self.port = kubeconfig, port
        self.admission = client.AdmissionregistrationV1Api(api)
        self.stop = threading.Event()
        self.created = self.posted = 0
        self.failures: list[str] = []

    def run(self) -> None:
        poster = threading.Thread(target=self.post_reviews, daemon=True)
        poster.start()
        n = 0
        while not self.stop.is_set():
            n += 1
            body = pod(container("c", requests={"cpu": "1", "memory": "1Gi"}))
            body["metadata"] = {"name": f"p-{n}", "namespace": "team-a"}
            result = subprocess.run(
                [
                    kubectl_path() or "kubectl",
                    "--kubeconfig",
                    str(self.kubeconfig),
                    "create",
                    "-f",
                    "-",
                ],
                input=json.dumps(body),
                capture_output=True,
                text=True,
                timeout=60,
            )
            if result.returncode != 0:
                self.failures.append(f"kubectl create p-{n}: {result.stderr.strip()}")
            else:
                self.created += 1
        poster.join(30)

    def post_reviews(self) -> None:
        body = json.dumps(review(pod(container("c", requests={"cpu": "1", "memory": "1Gi"}))))
        while not self.stop.is_set():
            configuration: Any = self.admission.read_validating_webhook_configuration(
                "volcano-guard"
            )
            hook = configuration.webhooks[0]
            with tempfile.NamedTemporaryFile("wb", suffix=".crt") as bundle:
                bundle.write(base64.b64decode(hook.client_config.ca_bundle))
                bundle.flush()
                context = ssl.create_default_context(cafile=bundle.name)
            request = urllib.request.Request(
                f"https://{HOSTNAME}:{self.port}/validate",
                data=body.encode(),
                method="POST",
                headers={"Content-Type": "application/json"},
            )
            try:
                with urllib.request.urlopen(request, timeout=10, context=context) as answer:
                    if answer.status != 200:
                        self.failures.append(f"/validate: HTTP {answer.status}")
                self.posted += 1
            except OSError as exc:
                self.failures.append(f"/validate: {exc}")
            time.sleep(0.05)


def test_renewals_a_ca_rotation_a_rerun_and_a_killed_run_fail_no_request(tmp_path, monkeypatch):
    if kubectl_path() is None:
        pytest.skip("kubectl is not installed (.ci/run installs it)")
    with guard(tmp_path) as (_, kubeconfig, api, volume, port):
        monkeypatch.setattr("socket.getaddrinfo", _localhost_as(HOSTNAME))
        traffic = Traffic(kubeconfig, api, port)
        traffic.start()
        steps: list[str] = []
        killed = False
        started = time.monotonic()
        try:
            while time.monotonic() - started < RUN_FOR:
                time.sleep(CRON_EVERY)
                ca = client.CoreV1Api(api).read_namespaced_secret("volcano-guard-ca", NAMESPACE)
                rotating = _ca_due(ca)
                if rotating and not killed:  # the run that rotates is killed midway
                    steps += ensure(kubeconfig, kill_midway=True)
                    killed = True
                else:
                    steps += ensure(kubeconfig)
        finally:
            traffic.stop.set()
            traffic.join(60)
        assert ensure(kubeconfig) == []  # the install step re-run: nothing to do
    assert traffic.failures == [], traffic.failures[:5]
    assert steps.count("issue") >= 3 and "make-ca" in steps and killed, steps
    assert volume.synced >= 4 and traffic.created > 100 and traffic.posted > 200


def _ca_due(secret: Any) -> bool:
    from cryptography import x509

    ca = x509.load_pem_x509_certificates(base64.b64decode(secret.data["ca.crt"]))[0]
    left = ca.not_valid_after_utc.timestamp() - time.time()
    return left <= 300 / 3 + CRON_EVERY


def _localhost_as(name: str) -> Any:
    """getaddrinfo resolving the webhook's service name to loopback, for the /validate client
    (the sandbox maps it itself)."""
    import socket

    real = socket.getaddrinfo

    def resolve(host: Any, *args: Any, **kwargs: Any) -> Any:
        return real("127.0.0.1" if host == name else host, *args, **kwargs)

    return resolve
