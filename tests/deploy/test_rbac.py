"""Each ServiceAccount in deploy/ may do exactly what its process does: deploy/ is rendered, and
each process is run as the Deployment or Job runs it, against its own sandbox with that account's
token; the sandbox counts every (verb, resource) it was asked for."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from tests.conftest import HOSTNAME
from tests.deploy.test_deploy import by_kind, render
from tests.processes import LIBFAKETIME
from volcano_guard.base.kubeconfig import write_kubeconfig
from volcano_guard.base.tls import client_context
from volcano_guard_sandbox.apiserver.authn import load_token_file
from volcano_guard_sandbox.apiserver.resources import RESOURCES
from volcano_guard_sandbox.apiserver.runner import SandboxThread
from volcano_guard_sandbox.apiserver.server import SandboxSettings
from volcano_guard_sandbox.processes import free_port

NAMESPACE = "volcano-guard"
CLI = [sys.executable, "-m", "volcano_guard.cli"]
Grant = tuple[str, str, str]  # (API group, resource, verb)
GROUP_OF = {resource.plural: resource.group for resource in RESOURCES}
SEED: list[dict[str, Any]] = [
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}},
    {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "node-1"},
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}},
    },
    {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "pg", "namespace": "team-a"},
        "spec": {"minMember": 1},
    },
    {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "member",
            "namespace": "team-a",
            "annotations": {"scheduling.k8s.io/group-name": "pg"},
        },
        "spec": {"schedulerName": "volcano", "containers": [{"name": "c", "image": "x"}]},
    },
]


PODS = next(r for r in RESOURCES if r.plural == "pods")
OVERCOMMITTING = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "big", "namespace": "team-a"},
    "spec": {
        "nodeName": "node-1",
        "schedulerName": "volcano",
        "containers": [
            {"name": "c", "image": "x", "resources": {"requests": {"cpu": "8", "memory": "1Gi"}}}
        ],
    },
}


@pytest.fixture(scope="module")
def deployed() -> list[dict[str, Any]]:
    return render("deploy/base") + render("deploy/audit")


def grants(docs: list[dict[str, Any]], account: str) -> set[Grant]:
    """Every (group, resource, verb) the account's bound Roles and ClusterRoles allow."""
    roles = {
        (d["kind"], d["metadata"]["name"]): d for d in docs if d["kind"] in ("Role", "ClusterRole")
    }
    allowed: set[Grant] = set()
    for binding in docs:
        if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding") or not any(
            s["kind"] == "ServiceAccount" and s["name"] == account for s in binding["subjects"]
        ):
            continue
        role = roles[(binding["roleRef"]["kind"], binding["roleRef"]["name"])]
        for rule in role["rules"]:
            allowed |= {
                (group, resource, verb)
                for group in rule["apiGroups"]
                for resource in rule["resources"]
                for verb in rule["verbs"]
            }
    return allowed


def pod_spec_of(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    [workload] = [d for d in by_kind(docs, kind) if d["metadata"]["name"] == name]
    spec = workload["spec"]
    return dict((spec["jobTemplate"]["spec"] if kind == "CronJob" else spec)["template"]["spec"])


def account_of(docs: list[dict[str, Any]], kind: str, name: str) -> str:
    return str(pod_spec_of(docs, kind, name)["serviceAccountName"])


def called(stats: dict[str, Any]) -> set[Grant]:
    out = set()
    for key in stats["requests"]:
        verb, resource = key.split(" ", 1)
        out.add((GROUP_OF[resource.split("/")[0]], resource, verb))
    return out


class Cluster:
    """A sandbox whose only user is the account under test, and a kubeconfig for it."""

    def __init__(self, sandbox: SandboxThread, kubeconfig: Path) -> None:
        self.sandbox, self.kubeconfig = sandbox, kubeconfig

    def stored(self, plural: str) -> list[dict[str, Any]]:
        [resource] = [r for r in RESOURCES if r.plural == plural]
        return self.sandbox.call(
            lambda sb: [s.object() for s in sb.store.list(resource, "", (), ())[0]]
        )


@contextmanager
def as_account(
    directory: Path, account: str, seed: list[dict[str, Any]] | None = None
) -> Iterator[Cluster]:
    tokens = directory / "tokens.csv"
    tokens.write_text(
        f"secret,system:serviceaccount:{NAMESPACE}:{account},1,"
        f'"system:serviceaccounts,system:serviceaccounts:{NAMESPACE}"\n'
    )
    settings = SandboxSettings(tokens=load_token_file(tokens))
    with SandboxThread(settings=settings) as sandbox:
        sandbox.seed(SEED + (seed or []))
        kubeconfig = directory / "kubeconfig"
        write_kubeconfig(kubeconfig, sandbox.url, token="secret")
        yield Cluster(sandbox, kubeconfig)


def wait_for(
    condition: Callable[[], bool], what: str, process: subprocess.Popen[bytes], timeout: float = 30
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        if process.poll() is not None:
            raise AssertionError(f"the process exited waiting for {what}")
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


@contextmanager
def webhook_process(
    config: Path, cluster: Cluster, certs: Any
) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """The webhook as its Deployment runs it, on the account's kubeconfig, until ready; yields
    its admission port and process."""
    port, metrics = free_port(), free_port()
    webhook = subprocess.Popen(
        [
            *CLI,
            "webhook",
            "--config",
            str(config),
            "--listen",
            f"127.0.0.1:{port}",
            "--metrics-listen",
            f"127.0.0.1:{metrics}",
            "--tls-cert",
            str(certs.cert_file),
            "--tls-key",
            str(certs.key_file),
            "--kubeconfig",
            str(cluster.kubeconfig),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: ready(metrics), "the webhook to be ready", webhook)
        yield port, webhook
    finally:
        webhook.terminate()
        webhook.wait(30)


def test_the_webhook_account_may_do_exactly_what_the_webhook_does(deployed, tmp_path, certs):
    account = account_of(deployed, "Deployment", "volcano-guard")
    config = tmp_path / "config.yaml"
    [config_map] = by_kind(deployed, "ConfigMap")
    config.write_text(config_map["data"]["config.yaml"])
    with as_account(tmp_path, account) as cluster:
        with webhook_process(config, cluster, certs) as (port, _):
            answer = delete_review(port, certs.ca_file)  # the delete guard lists the members
            assert answer["allowed"] is False and "member" in answer["status"]["message"]
        assert called(cluster.sandbox.stats()) == grants(deployed, account)


def test_with_managed_node_selectors_the_webhook_may_publish_node_states_and_no_more(
    deployed, tmp_path, certs
):
    """With managedNodeSelectors the in-server policies read node states the webhook publishes:
    `manifests` adds the Role for it, and the webhook uses exactly that much more."""
    account = account_of(deployed, "Deployment", "volcano-guard")
    [config_map] = by_kind(deployed, "ConfigMap")
    config = yaml.safe_load(config_map["data"]["config.yaml"])
    config["policies"]["nodeName"]["managedNodeSelectors"] = ["volcano.sh/role:train"]
    config_file = tmp_path / "config.yaml"
    config_file.write_text(yaml.safe_dump(config))
    printed = subprocess.run(
        [*CLI, "manifests", "--config", str(config_file)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    access = [d for d in yaml.safe_load_all(printed) if d and d["kind"].startswith("Role")]
    with as_account(tmp_path, account) as cluster:
        with webhook_process(config_file, cluster, certs) as (port, webhook):
            wait_for(lambda: bool(cluster.stored("configmaps")), "the node states", webhook)
            cluster.sandbox.seed(
                [
                    {
                        "apiVersion": "v1",
                        "kind": "Node",
                        "metadata": {"name": "gpu-1", "labels": {"volcano.sh/role": "train"}},
                    }
                ]
            )
            wait_for(
                lambda: "gpu-1" in cluster.stored("configmaps")[0]["data"],
                "the new node's state",
                webhook,
            )
            delete_review(port, certs.ca_file)
        [states] = cluster.stored("configmaps")
        assert states["data"] == {"gpu-1": "managed", "node-1": "unmanaged"}
        assert called(cluster.sandbox.stats()) == grants(deployed + access, account)


def delete_review(port: int, ca_file: Path) -> dict[str, Any]:
    request = {
        "uid": "u",
        "operation": "DELETE",
        "namespace": "team-a",
        "name": "pg",
        "kind": {"group": "scheduling.volcano.sh", "version": "v1beta1", "kind": "PodGroup"},
        "resource": {
            "group": "scheduling.volcano.sh",
            "version": "v1beta1",
            "resource": "podgroups",
        },
        "userInfo": {"username": "alice"},
        "oldObject": SEED[3],
    }
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}

    async def post() -> dict[str, Any]:
        connector = aiohttp.TCPConnector(ssl=client_context(ca_file))
        async with (
            aiohttp.ClientSession(connector=connector) as session,
            session.post(
                f"https://127.0.0.1:{port}/validate", json=body, server_hostname=HOSTNAME
            ) as answer,
        ):
            return dict((await answer.json())["response"])

    return asyncio.run(post())


def test_the_certificate_account_may_do_exactly_what_the_certificate_job_does(deployed, tmp_path):
    """The Job's command as it runs in the cluster: at install, again (nothing to do), and two
    thirds of the CA's lifetime later under faketime (a CA rotation: every write it has)."""
    account = account_of(deployed, "Job", "volcano-guard-certs")
    assert account != account_of(deployed, "Deployment", "volcano-guard")
    assert account == account_of(deployed, "CronJob", "volcano-guard-certs")
    [container] = pod_spec_of(deployed, "Job", "volcano-guard-certs")["containers"]
    assert container == pod_spec_of(deployed, "CronJob", "volcano-guard-certs")["containers"][0]
    if LIBFAKETIME is None:
        pytest.skip("faketime is not installed (.ci/run installs it)")
    args = [arg.replace("$(POD_NAMESPACE)", NAMESPACE) for arg in container["args"]]
    registrations = [d for d in deployed if d["kind"].endswith("WebhookConfiguration")]
    with as_account(tmp_path, account, registrations) as cluster:
        command = [
            sys.executable,
            "-m",
            "volcano_guard.cli",
            *container["command"][1:],
            *args,
            "--kubeconfig",
            str(cluster.kubeconfig),
        ]
        years_on = {"LD_PRELOAD": str(LIBFAKETIME), "FAKETIME": "+2500d"}  # the CA is due
        for clock in ({}, {}, years_on):
            result = subprocess.run(
                command, env={**os.environ, **clock}, capture_output=True, text=True, timeout=60
            )
            assert result.returncode == 0, result.stderr
        assert "make-ca" in result.stdout  # the rotation ran
        assert called(cluster.sandbox.stats()) == grants(deployed, account)


def test_the_audit_account_may_do_exactly_what_the_audit_does(deployed, tmp_path):
    account = account_of(deployed, "Deployment", "volcano-guard-audit")
    [workload] = [
        d for d in by_kind(deployed, "Deployment") if d["metadata"]["name"] == "volcano-guard-audit"
    ]
    [container] = workload["spec"]["template"]["spec"]["containers"]
    args = list(container["args"])
    metrics = free_port()
    args[args.index("--metrics-listen") + 1] = f"127.0.0.1:{metrics}"
    config = tmp_path / "config.yaml"
    config.write_text("{}\n")
    args[args.index("--config") + 1] = str(config)
    with as_account(tmp_path, account) as cluster:
        audit = subprocess.Popen(
            [*CLI, *args, "--kubeconfig", str(cluster.kubeconfig)],
            env={**os.environ, "POD_NAMESPACE": NAMESPACE, "POD_NAME": "audit-0"},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_for(lambda: bool(cluster.stored("policyreports")), "a PolicyReport", audit)
            # A finding goes away, a node's appears: both reports are updated; the lease is
            # renewed meanwhile.
            cluster.sandbox.call(lambda sb: sb.store.delete(PODS, "team-a", "member"))
            cluster.sandbox.seed([OVERCOMMITTING])
            wait_for(
                lambda: '"member"' not in json.dumps(cluster.stored("policyreports")),
                "the namespace's report to be updated",
                audit,
            )
            wait_for(
                lambda: '"node-1"' in json.dumps(cluster.stored("clusterpolicyreports")),
                "the nodes' report to be updated",
                audit,
            )
        finally:
            audit.terminate()
            audit.wait(30)
        assert called(cluster.sandbox.stats()) == grants(deployed, account)


def test_every_account_in_deploy_is_one_processs(deployed):
    accounts = [d["metadata"]["name"] for d in by_kind(deployed, "ServiceAccount")]
    used = [
        account_of(deployed, d["kind"], d["metadata"]["name"])
        for d in deployed
        if d["kind"] in ("Deployment", "Job", "CronJob")
    ]
    assert sorted(accounts) == sorted(set(used))
