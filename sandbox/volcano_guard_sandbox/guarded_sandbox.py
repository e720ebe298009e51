"""A sandbox with the guard registered in it, as a GitOps user sets it up in a cluster: the
webhook configurations and admission policies `volcano-guard manifests` prints applied with
kubectl, caBundle set by `volcano-guard certs inject`, the webhook process behind them, and
kubectl pointed at the sandbox over HTTPS with bearer tokens. Where the config's in-server
policies read node states, a reconciler in GitOps mode publishes them, as in a cluster. The demo
and the end-to-end tests run on it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from volcano_guard.base.kubeconfig import write_kubeconfig
from volcano_guard.base.tls import server_context
from volcano_guard.certs.generate import generate
from volcano_guard.webhook.config import read_yaml
from volcano_guard_sandbox import REPO_ROOT
from volcano_guard_sandbox.apiserver.authn import load_token_file
from volcano_guard_sandbox.apiserver.endpoints import ServiceEndpoints
from volcano_guard_sandbox.apiserver.runner import SandboxThread
from volcano_guard_sandbox.apiserver.server import SandboxSettings
from volcano_guard_sandbox.apiserver.versions import DEFAULT, KubernetesVersion
from volcano_guard_sandbox.processes import free_port

DEPLOY_BASE = REPO_ROOT / "deploy" / "base"
SERVICE = NAMESPACE = "volcano-guard"  # deploy/base's Service and namespace
SCHEDULER = "system:serviceaccount:volcano-system:volcano-scheduler"
OTHER_SCHEDULER = "system:serviceaccount:kube-system:other-scheduler"
# The users kubectl can be: --token NAME. The first is the administrator the kubeconfig names.
TOKENS = f"""admin,kubernetes-admin,0,"system:masters"
volcano,{SCHEDULER},1,"system:serviceaccounts"
other,{OTHER_SCHEDULER},2,"system:serviceaccounts"
node-1,system:node:node-1,3,"system:nodes"
daemonsets,system:serviceaccount:kube-system:daemon-set-controller,4,"system:serviceaccounts"
"""


class GuardedSandboxError(RuntimeError):
    """The guarded sandbox could not be set up (kubectl missing, webhook not ready...)."""


def kubectl_path() -> str | None:
    return shutil.which("kubectl")


def shipped_config() -> dict[str, Any]:
    """The config deploy/base ships (its ConfigMap's config.yaml)."""
    configmap = yaml.safe_load((DEPLOY_BASE / "config.yaml").read_text(encoding="utf-8"))
    return dict(read_yaml(configmap["data"]["config.yaml"]))


def with_policy_changes(
    config: Mapping[str, Any], changes: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """config with each named policy's keys replaced by those in changes."""
    policies = dict(config.get("policies") or {})
    for policy, keys in changes.items():
        policies[policy] = {**(policies.get(policy) or {}), **keys}
    return {**config, "policies": policies}


ADMISSION_KINDS = (
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
)


def admission_only(manifests: str) -> str:
    """The webhook configurations and admission policies among manifests (the sandbox serves
    no Deployments or RBAC: the rest is for a real cluster)."""
    return yaml.safe_dump_all(
        [doc for doc in yaml.safe_load_all(manifests) if doc and doc.get("kind") in ADMISSION_KINDS]
    )


def run_kubectl(
    binary: str,
    kubeconfig: Path,
    token: str,
    args: Iterable[str],
    stdin: str | None = None,
    check: bool = True,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """kubectl with this kubeconfig as the user with this token; GuardedSandboxError naming
    the command when check and it fails."""
    args = list(args)
    result = subprocess.run(
        [binary, "--kubeconfig", str(kubeconfig), "--token", token, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )
    if check and result.returncode != 0:
        raise GuardedSandboxError(f"kubectl {' '.join(args)}: {result.stderr}")
    return result


@dataclass
class GuardedSandbox:
    directory: Path
    sandbox: SandboxThread
    webhook: subprocess.Popen[bytes]
    kubectl_binary: str
    metrics_port: int  # the webhook's /metrics, on loopback

    @property
    def kubeconfig(self) -> Path:
        return self.directory / "kubeconfig"

    def kubectl(
        self,
        *args: str,
        stdin: str | None = None,
        token: str = "admin",
        check: bool = True,
        cwd: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """kubectl against the sandbox as the user with this token (see TOKENS)."""
        return run_kubectl(self.kubectl_binary, self.kubeconfig, token, args, stdin, check, cwd)

    def create(
        self, obj: Mapping[str, Any], token: str = "admin", check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return self.kubectl("create", "-f", "-", stdin=json.dumps(obj), token=token, check=check)

    def get(self, *args: str) -> dict[str, Any]:
        return dict(json.loads(self.kubectl("get", *args, "-o", "json").stdout))

    def webhook_metrics(self) -> str:
        """The webhook's /metrics page (Prometheus text)."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as answer:
            return str(answer.read().decode("utf-8"))

    def stop_webhook(self) -> None:
        self.webhook.terminate()
        self.webhook.wait(30)


@contextmanager
def guarded_sandbox(
    directory: Path,
    seed: Iterable[Mapping[str, Any]],
    config: Mapping[str, Any] | None = None,
    kubernetes_version: KubernetesVersion = DEFAULT,
) -> Iterator[GuardedSandbox]:
    """The shipped deploy/base registrations, policies and config; or, given a config, that
    config and what `volcano-guard manifests --config --kubernetes-version` prints for it
    (the sandbox playing that version)."""
    kubectl = kubectl_path()
    if kubectl is None:
        raise GuardedSandboxError("kubectl is not installed")
    guard_certs = generate(SERVICE, NAMESPACE, directory / "guard", days=1)
    sandbox_certs = generate(
        "sandbox", "local", directory / "sandbox", days=1, extra_dns_names=("localhost",)
    )
    (directory / "tokens.csv").write_text(TOKENS, encoding="utf-8")
    config_file = directory / "config.yaml"
    config_text = yaml.safe_dump(dict(config or shipped_config()))
    config_file.write_text(config_text, encoding="utf-8")
    cli = [sys.executable, "-m", "volcano_guard.cli"]
    manifests = ["manifests", "--config", str(config_file)]
    version = ["--kubernetes-version", str(kubernetes_version)]
    registrations = _run([*cli, *manifests, *version]).stdout
    port, metrics = free_port(), free_port()
    settings = SandboxSettings(
        services=ServiceEndpoints({(NAMESPACE, SERVICE, 443): [("127.0.0.1", port)]}),
        tokens=load_token_file(directory / "tokens.csv"),
        kubernetes_version=kubernetes_version,
    )
    tls = server_context(sandbox_certs.cert_file, sandbox_certs.key_file)
    with SandboxThread(settings=settings, tls=tls) as sandbox:
        sandbox.seed([dict(obj) for obj in seed])
        sandbox.seed([config_map(config_text)])
        kubeconfig = directory / "kubeconfig"
        # localhost: the name the sandbox's certificate has
        write_kubeconfig(
            kubeconfig,
            sandbox.url.replace("127.0.0.1", "localhost"),
            token="admin",
            ca_file=sandbox_certs.ca_file,
        )
        log = directory / "webhook.log"
        with open(log, "wb") as output:
            webhook = subprocess.Popen(
                [
                    *cli,
                    "webhook",
                    "--listen",
                    f"127.0.0.1:{port}",
                    "--metrics-listen",
                    f"127.0.0.1:{metrics}",
                    "--tls-cert",
                    str(guard_certs.cert_file),
                    "--tls-key",
                    str(guard_certs.key_file),
                    "--kubeconfig",
                    str(kubeconfig),
                    "--config",
                    str(config_file),
                ],
                stdout=output,
                stderr=output,
            )
        reconciler = _start_reconciler(cli, kubeconfig, directory, config_text)
        try:
            _wait_ready(metrics, webhook, log)
            guarded = GuardedSandbox(directory, sandbox, webhook, kubectl, metrics)
            guarded.kubectl("apply", "-f", "-", stdin=registrations)
            _run(
                [
                    *cli,
                    "certs",
                    "inject",
                    "--ca",
                    str(guard_certs.ca_file),
                    "--mutating",
                    "volcano-guard",
                    "--validating",
                    "volcano-guard",
                    "--kubeconfig",
                    str(kubeconfig),
                ]
            )
            yield guarded
        finally:
            for process in (webhook, reconciler):
                if process is not None:
                    process.terminate()
                    process.wait(30)


def config_map(config_text: str) -> dict[str, Any]:
    """The config as deploy/base ships it: the ConfigMap the reconciler reads."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "volcano-guard-config", "namespace": NAMESPACE},
        "data": {"config.yaml": config_text},
    }


def _start_reconciler(
    cli: list[str], kubeconfig: Path, directory: Path, config_text: str
) -> subprocess.Popen[bytes] | None:
    """A reconciler that publishes node states and writes nothing else (GitOps mode; the
    certificates are this harness's), when the config's in-server policies read them."""
    from volcano_guard.webhook.config import parse_config
    from volcano_guard.webhook.node_states import publishes

    if not publishes(parse_config(config_text)):
        return None
    with open(directory / "reconciler.log", "wb") as output:
        return subprocess.Popen(
            [
                *cli,
                "reconcile",
                "--gitops",
                "--certificates=external",
                "--namespace",
                NAMESPACE,
                "--kubeconfig",
                str(kubeconfig),
                "--metrics-listen",
                f"127.0.0.1:{free_port()}",
            ],
            stdout=output,
            stderr=output,
        )


def _wait_ready(port: int, webhook: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if webhook.poll() is not None:
            raise GuardedSandboxError(f"the webhook exited: {log.read_text()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise GuardedSandboxError(f"the webhook never became ready: {log.read_text()}")


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(args, capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        raise GuardedSandboxError(f"{' '.join(args[:4])}...: {result.stderr.strip()}")
    return result
