"""The guard installed in the sandbox as docs/install.md says (`kubectl apply -k`), its pods
played as a kubelet would run them: each of the guard's Deployments runs as a local process with
its container's own command line, its ConfigMap and Secret volumes projected into directories
(kubelet.VolumeProjector) at the paths its arguments name, its ServiceAccount's token, and
POD_NAMESPACE/POD_NAME. So the rehearsals of install, config change, drift and uninstall run
what the manifests say, not a harness's idea of it.

It plays the Deployment controller, the endpoints controller and kube-proxy as far as a rolling
update needs them: each webhook replica serves on a port of its own, listed in the Service's
endpoints once its /readyz answers 200; roll() replaces a Deployment's replicas one at a time
as maxSurge 1 and maxUnavailable 0 do (what kube makes of 2 replicas and the 25% defaults), and
sends a leaving replica SIGTERM while the endpoints still list it, for PROPAGATION seconds (on a
real cluster the kubelet's SIGTERM and kube-proxy's update race; this is the order that loses).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from volcano_guard.base.kubeconfig import write_kubeconfig
from volcano_guard.base.tls import client_context, server_context
from volcano_guard.certs.generate import generate
from volcano_guard_sandbox.apiserver.authn import load_token_file
from volcano_guard_sandbox.apiserver.endpoints import ServiceEndpoints
from volcano_guard_sandbox.apiserver.runner import SandboxThread
from volcano_guard_sandbox.apiserver.server import SandboxSettings
from volcano_guard_sandbox.apiserver.versions import DEFAULT, KubernetesVersion
from volcano_guard_sandbox.guarded_sandbox import GuardedSandboxError, kubectl_path, run_kubectl
from volcano_guard_sandbox.kubelet import VolumeProjector
from volcano_guard_sandbox.processes import free_port

NAMESPACE = "volcano-guard"
WEBHOOK, RECONCILER = "volcano-guard", "volcano-guard-reconciler"
PROPAGATION = 1.0  # seconds from a pod's SIGTERM until the endpoints stop listing it
GRACE = 30.0  # terminationGracePeriodSeconds' default
SCHEDULER = "system:serviceaccount:volcano-system:volcano-scheduler"


def _tokens(namespace: str) -> str:
    """admin, each of the guard's accounts (token = account name), and Volcano's scheduler."""
    accounts = "\n".join(
        f'{name},system:serviceaccount:{namespace}:{name},{index},"system:serviceaccounts"'
        for index, name in enumerate((WEBHOOK, RECONCILER, "volcano-guard-audit"), start=1)
    )
    return (
        'admin,kubernetes-admin,0,"system:masters"\n'
        f'volcano,{SCHEDULER},9,"system:serviceaccounts"\n{accounts}\n'
    )


@dataclass
class Pod:
    """One replica of a Deployment, as a process; address is where it serves the Service."""

    process: subprocess.Popen[bytes]
    log: Path
    metrics_port: int
    volumes: ExitStack = field(default_factory=ExitStack)
    address: tuple[str, int] | None = None
    was_ready: bool = False  # the endpoints list it from its first ready answer ...
    unlisted_at: float | None = None  # ... until this monotonic time, once it is leaving

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(GRACE)
        self.volumes.close()

    def leave(self, propagation: float = PROPAGATION) -> None:
        """SIGTERM now; the endpoints stop listing it propagation seconds later."""
        self.unlisted_at = time.monotonic() + propagation
        self.process.terminate()

    def listed(self) -> bool:
        """Whether the Service's endpoints list it."""
        leaving = self.unlisted_at is not None and time.monotonic() >= self.unlisted_at
        return self.was_ready and not leaving

    def metrics(self) -> str:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as answer:
            return str(answer.read().decode())

    def ready(self) -> bool:
        try:
            url = f"http://127.0.0.1:{self.metrics_port}/readyz"
            with urllib.request.urlopen(url, timeout=1) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False


class EndpointsController(threading.Thread):
    """Keeps the webhook Service's endpoints to the replicas that list (Pod.listed), probing a
    new replica's /readyz until it first answers 200."""

    def __init__(self, update: Callable[[list[tuple[str, int]]], None]) -> None:
        super().__init__(name="endpoints", daemon=True)
        self._update = update
        self.replicas: tuple[Pod, ...] = ()  # swapped whole by the test's thread
        self._stopping = threading.Event()

    def run(self) -> None:
        while not self._stopping.wait(0.1):
            for pod in self.replicas:
                if not pod.was_ready and pod.unlisted_at is None:
                    pod.was_ready = pod.ready()
            self._update([pod.address for pod in self.replicas if pod.listed() and pod.address])

    def stop(self) -> None:
        self._stopping.set()
        self.join(5)


@dataclass
class InstalledSandbox:
    directory: Path
    sandbox: SandboxThread
    kubectl_binary: str
    namespace: str
    endpoints: EndpointsController
    pods: dict[str, list[Pod]] = field(default_factory=dict)

    @property
    def kubeconfig(self) -> Path:
        return self.directory / "kubeconfig"

    def kubectl(
        self, *args: str, stdin: str | None = None, token: str = "admin", check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return run_kubectl(self.kubectl_binary, self.kubeconfig, token, args, stdin, check)

    def has(self, *what: str) -> bool:
        """Whether `kubectl get what` finds it."""
        return self.kubectl("get", *what, check=False).returncode == 0

    def create(
        self, obj: Mapping[str, Any], check: bool = False
    ) -> subprocess.CompletedProcess[str]:
        return self.kubectl("create", "-f", "-", stdin=json.dumps(obj), check=check)

    def apply(self, install: Path) -> None:
        """kubectl apply of a kustomization directory or a rendered file."""
        self.kubectl("apply", "-k" if install.is_dir() else "-f", str(install))

    def get(self, *args: str) -> dict[str, Any]:
        return dict(json.loads(self.kubectl("get", *args, "-o", "json").stdout))

    def deployment(self, name: str) -> dict[str, Any]:
        return self.get("deployment", name, "-n", self.namespace)

    def start(self, name: str) -> Pod:
        """Run one more replica of Deployment `name` as the kubelet would."""
        spec = self.deployment(name)["spec"]["template"]["spec"]
        [container] = spec["containers"]
        replicas = self.pods.setdefault(name, [])
        pod_dir = self.directory / f"{name}-{sum(map(len, self.pods.values()))}"
        pod_dir.mkdir(parents=True)
        volumes = ExitStack()
        paths = self._mount(spec, container, pod_dir, volumes)
        args = [self._local(arg, paths) for arg in container.get("args", [])]
        metrics_port = free_port()
        args = _with_flag(args, "--metrics-listen", f"127.0.0.1:{metrics_port}")
        address = ("127.0.0.1", free_port()) if name == WEBHOOK else None
        if address:
            args = _with_flag(args, "--listen", f"{address[0]}:{address[1]}")
        kubeconfig = pod_dir / "kubeconfig"
        write_kubeconfig(
            kubeconfig,
            self.sandbox.url.replace("127.0.0.1", "localhost"),
            token=spec.get("serviceAccountName", "default"),  # the account's token is its name
            ca_file=self.directory / "sandbox" / "ca.crt",
        )
        env = {
            **os.environ,
            "POD_NAMESPACE": self.namespace,
            "POD_NAME": pod_dir.name,
            "KUBECONFIG": str(kubeconfig),
        }
        log = pod_dir / "log"
        with open(log, "wb") as output:
            command = [sys.executable, "-m", "volcano_guard.cli", *args]
            process = subprocess.Popen(command, stdout=output, stderr=output, env=env)
        pod = Pod(process, log, metrics_port, volumes, address)
        replicas.append(pod)
        self._publish()
        return pod

    def stop(self, name: str) -> None:
        """Stop every replica of `name`."""
        for pod in self.pods.pop(name, []):
            pod.stop()
        self._publish()

    def roll(self, name: str, propagation: float = PROPAGATION) -> list[int]:
        """A rolling update of `name` to its Deployment as it is now: a new replica, once the
        Service lists it, takes an old one's place (maxSurge 1, maxUnavailable 0); the exit
        statuses of the replaced."""
        leaving = list(self.pods.get(name, []))
        for old in leaving:
            new = self.start(name)
            wait_until(
                lambda pod=new: pod.listed() or (name != WEBHOOK and pod.ready()),
                f"a new {name} replica to be ready",
                pod=new,
            )
            old.leave(propagation)
        statuses = [old.process.wait(GRACE) for old in leaving]
        for old in leaving:
            old.volumes.close()
            self.pods[name].remove(old)
        self._publish()
        return statuses

    def _publish(self) -> None:
        self.endpoints.replicas = tuple(self.pods.get(WEBHOOK, ()))

    def _mount(
        self, spec: dict[str, Any], container: dict[str, Any], pod_dir: Path, volumes: ExitStack
    ) -> dict[str, Path]:
        """Project each ConfigMap or Secret volume; mountPath -> the local path it shows."""
        sources = {v["name"]: v for v in spec.get("volumes", [])}
        paths: dict[str, Path] = {}
        tls = client_context(self.directory / "sandbox" / "ca.crt")
        for mount in container.get("volumeMounts", []):
            volume = sources[mount["name"]]
            kind, name = (
                ("ConfigMap", volume["configMap"]["name"])
                if "configMap" in volume
                else ("Secret", volume["secret"]["secretName"])
            )
            local = pod_dir / "volumes" / mount["name"]
            projector = VolumeProjector(
                self.sandbox.url.replace("127.0.0.1", "localhost"),
                kind,
                self.namespace,
                name,
                local,
                token="admin",
                ssl_context=tls,
                interval=0.2,
            )
            volumes.enter_context(projector)
            sub = mount.get("subPath")
            paths[mount["mountPath"]] = local / sub if sub else local
        return paths

    @staticmethod
    def _local(arg: str, paths: Mapping[str, Path]) -> str:
        for mount, local in sorted(paths.items(), key=lambda item: -len(item[0])):
            if arg == mount or arg.startswith(mount.rstrip("/") + "/"):
                return str(local) + arg[len(mount) :]
        return arg


def _with_flag(args: list[str], flag: str, value: str) -> list[str]:
    """args with flag set to value, whether it was given as `flag value`, `flag=value` or not."""
    out: list[str] = []
    skip = False
    for index, arg in enumerate(args):
        if skip:
            skip = False
            continue
        if arg == flag and index + 1 < len(args):
            skip = True
            continue
        if arg.startswith(flag + "="):
            continue
        out.append(arg)
    return [*out, flag, value]


def wait_until(condition: Any, what: str, timeout: float = 30, pod: Pod | None = None) -> float:
    """Seconds until condition() is true; GuardedSandboxError naming what, with the pod's log."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if condition():
            return time.monotonic() - start
        if pod is not None and pod.process.poll() is not None:
            raise GuardedSandboxError(f"exited waiting for {what}: {pod.log.read_text()}")
        time.sleep(0.1)
    log = pod.log.read_text() if pod is not None else ""
    raise GuardedSandboxError(f"timed out after {timeout}s waiting for {what} {log}")


@contextmanager
def installed_sandbox(
    directory: Path,
    install: Path,
    seed: list[dict[str, Any]],
    namespace: str = NAMESPACE,
    kubernetes_version: KubernetesVersion = DEFAULT,
) -> Iterator[InstalledSandbox]:
    """The guard applied into a fresh sandbox (seeded first) with kubectl: `apply -k` of a
    kustomization directory, or `apply -f` of a rendered file (a Helm chart's); nothing
    running yet: start() each Deployment the test needs. The sandbox plays
    kubernetes_version."""
    kubectl = kubectl_path()
    if kubectl is None:
        raise GuardedSandboxError("kubectl is not installed")
    certs = generate(
        "sandbox", "local", directory / "sandbox", days=1, extra_dns_names=("localhost",)
    )
    (directory / "tokens.csv").write_text(_tokens(namespace), encoding="utf-8")
    service = ServiceEndpoints({(namespace, WEBHOOK, 443): []})
    tokens = load_token_file(directory / "tokens.csv")
    settings = SandboxSettings(
        services=service,
        tokens=tokens,
        audit_events=100_000,
        kubernetes_version=kubernetes_version,
    )
    endpoints = EndpointsController(lambda ready: service.set((namespace, WEBHOOK, 443), ready))
    with SandboxThread(
        settings=settings, tls=server_context(certs.cert_file, certs.key_file)
    ) as sandbox:
        sandbox.seed(seed)
        write_kubeconfig(
            directory / "kubeconfig",
            sandbox.url.replace("127.0.0.1", "localhost"),
            token="admin",
            ca_file=certs.ca_file,
        )
        installed = InstalledSandbox(directory, sandbox, kubectl, namespace, endpoints)
        installed.apply(install)
        endpoints.start()
        try:
            yield installed
        finally:  # the pods first: none may outlive the sandbox they were started against
            for replicas in installed.pods.values():
                for pod in replicas:
                    pod.stop()
            endpoints.stop()
