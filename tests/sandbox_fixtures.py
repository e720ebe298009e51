"""Shared fixtures for the sandbox tests: a sandbox on its own thread and real clients."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from kubernetes import client

from volcano_guard_sandbox.apiserver.runner import SandboxThread

NAMESPACE = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}


def queue(name: str = "q1", **spec) -> dict:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {"weight": 1, **spec},
    }


def pod(name: str = "p1", namespace: str = "team-a", **labels) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


@pytest.fixture
def sandbox():
    with SandboxThread(event_window=50) as running:
        running.seed([NAMESPACE])
        yield running


@pytest.fixture
def api(sandbox):
    with client.ApiClient(client.Configuration(host=sandbox.url)) as api_client:
        yield api_client


@pytest.fixture
def core(api):
    return client.CoreV1Api(api)


@pytest.fixture
def custom(api):
    return client.CustomObjectsApi(api)


KUBECTL = shutil.which("kubectl")


@pytest.fixture
def kubectl(sandbox):
    if KUBECTL is None:
        pytest.skip("kubectl is not installed (.ci/run installs it; install it to run these)")

    def run(*args: str, stdin: str | None = None, check: bool = True):
        result = subprocess.run(
            [KUBECTL, "--server", sandbox.url, *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr}")
        return result

    return run
