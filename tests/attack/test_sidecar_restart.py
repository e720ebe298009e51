"""Attack case 5 of issue 45: a sidecar restart locks its app out.

Anyone who can make an injected sidecar restart (its container is killed, OOM-killed, or fails
its liveness probe) used to cut the app off until the app restarted too: the new process made a
new CA and a new token, and the app's client, holding the kubeconfig written before, failed
verification (client-go holds the CA it read; the `kubernetes` package re-reads the CA file but
keeps the token, so it got 401). Here the same loaded `kubernetes` client keeps working across
SIGKILLs and SIGTERMs of the sidecar process, whose volume (the pod's emptyDir) survives as in
a container restart.
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest
from kubernetes import client, config

from tests.processes import start_cli, wait_for_log
from volcano_guard_sandbox.apiserver.runner import SandboxThread
from volcano_guard_sandbox.processes import free_port

pytestmark = pytest.mark.slow
NAMESPACE = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}


def start_sidecar(upstream: str, port: int, kubeconfig: Path) -> subprocess.Popen[str]:
    """The sidecar as injected: a fixed loopback port, the kubeconfig in the shared volume."""
    proc = start_cli(
        "sidecar",
        "--upstream",
        upstream,
        "--listen",
        f"127.0.0.1:{port}",
        "--metrics-listen",
        "127.0.0.1:0",
        "--write-kubeconfig",
        str(kubeconfig),
    )
    wait_for_log(proc, r"sidecar proxy on https://")
    return proc


def stop(proc: subprocess.Popen[str], signum: int) -> None:
    proc.send_signal(signum)
    proc.wait(25)


def namespaces(core: client.CoreV1Api) -> list[str]:
    listed = core.list_namespace(_request_timeout=10)
    return [str(item.metadata.name) for item in listed.items if item.metadata]


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_an_app_holding_the_kubeconfig_keeps_working_after_the_sidecar_restarts(
    tmp_path: Path, signum: int
) -> None:
    kubeconfig = tmp_path / "shared" / "kubeconfig"
    port = free_port()
    with SandboxThread() as sandbox:
        sandbox.seed([NAMESPACE])
        proc = start_sidecar(sandbox.url, port, kubeconfig)
        try:
            api = config.new_client_from_config(config_file=str(kubeconfig))
            core = client.CoreV1Api(api)
            assert namespaces(core) == ["team-a"]
            for restart in range(2):
                stop(proc, signum)
                proc = start_sidecar(sandbox.url, port, kubeconfig)
                assert namespaces(core) == ["team-a"], f"after restart {restart + 1}"
                name = f"after-{restart}"
                made = core.create_namespaced_config_map(
                    "team-a", client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name))
                )
                assert made.metadata is not None and made.metadata.name == name
        finally:
            proc.kill()
            proc.wait(10)
