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
from volcano_guard.webhook.admission_policies import apis_at
from volcano_guard.webhook.config import config_from_dict
from volcano_guard.webhook.manifests import BINDING, admission_objects
from volcano_guard_sandbox.apiserver.authn import load_token_file
from volcano_guard_sandbox.apiserver.resources import RESOURCES, find
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
PG = find("scheduling.volcano.sh", "v1beta1", "podgroups")
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
        [resource] = [r for r in RESOURCES if r.plural == plural and not r.off_by_default]
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


@pytest.mark.slow  # a webhook process with its caches and writes: about 7 s
def test_the_webhook_account_may_do_exactly_what_the_webhook_does(deployed, tmp_path, certs):
    account = account_of(deployed, "Deployment", "volcano-guard")
    config = tmp_path / "config.yaml"
    [config_map] = by_kind(deployed, "ConfigMap")
    config.write_text(config_map["data"]["config.yaml"])
    with as_account(tmp_path, account) as cluster:
        with webhook_process(config, cluster, certs) as (port, _):
            stored = cluster.sandbox.call(lambda sb: sb.store.get(PG, "team-a", "pg").object())
            answer = delete_review(port, certs.ca_file, stored)  # the guard lists the members
            assert answer["allowed"] is False and "member" in answer["status"]["message"]
        assert called(cluster.sandbox.stats()) == grants(deployed, account)


def delete_review(port: int, ca_file: Path, old: dict[str, Any]) -> dict[str, Any]:
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
        "oldObject": old,
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


# kube-apiserver authorizes a server-side apply that creates an object as `create` of its name
# (patch.go, PatchResource); the sandbox counts the request by its verb, patch.
CREATED_BY_APPLY = {("", "configmaps", "create")} | {
    ("admissionregistration.k8s.io", resource, "create")
    for resource in (
        "mutatingwebhookconfigurations",
        "validatingwebhookconfigurations",
        "validatingadmissionpolicies",
        "validatingadmissionpolicybindings",
        "mutatingadmissionpolicies",
        "mutatingadmissionpolicybindings",
    )
}


def config_map(config: dict[str, Any], annotations: dict[str, str] | None = None) -> dict:
    metadata = {"name": "volcano-guard-config", "namespace": NAMESPACE}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {**metadata, "annotations": annotations or {}},
        "data": {"config.yaml": yaml.safe_dump(config)},
    }


def edit(cluster: Cluster, plural: str, name: str, patch: dict[str, Any]) -> None:
    """A merge patch by an administrator: drift for the reconciler to repair."""
    [resource] = [r for r in RESOURCES if r.plural == plural and not r.off_by_default]
    content_type = "application/merge-patch+json"
    cluster.sandbox.call(lambda sb: sb.store.patch(resource, "", name, content_type, patch))


def named(cluster: Cluster, plural: str, name: str) -> dict[str, Any]:
    [found] = [o for o in cluster.stored(plural) if o["metadata"]["name"] == name]
    return found


def replace_config(cluster: Cluster, config: dict[str, Any]) -> None:
    """As an administrator would, not as the account under test (its calls are counted)."""
    configmaps = next(r for r in RESOURCES if r.plural == "configmaps")
    cluster.sandbox.call(lambda sb: sb.store.delete(configmaps, NAMESPACE, "volcano-guard-config"))
    cluster.sandbox.seed([config_map(config)])


@pytest.mark.slow  # a reconciler process through every kind of write: about 20 s
def test_the_reconciler_account_may_do_exactly_what_the_reconciler_does(deployed, tmp_path):
    """As its Deployment runs it: install, node states, a deleted binding re-created, an edited
    one replaced, a bad config (an Event), a config needing fewer objects (deletes); then the
    uninstall's first step, and a pass two thirds of the CA's lifetime on (a CA rotation: every
    write to the Secrets)."""
    account = account_of(deployed, "Deployment", "volcano-guard-reconciler")
    assert account != account_of(deployed, "Deployment", "volcano-guard")
    [workload] = [
        d
        for d in by_kind(deployed, "Deployment")
        if d["metadata"]["name"] == "volcano-guard-reconciler"
    ]
    [container] = workload["spec"]["template"]["spec"]["containers"]
    args = list(container["args"])
    args[args.index("--metrics-listen") + 1] = f"127.0.0.1:{free_port()}"
    config = {"policies": {"nodeName": {"managedNodeSelectors": ["volcano.sh/role:train"]}}}
    env = {**os.environ, "POD_NAMESPACE": NAMESPACE, "POD_NAME": "reconciler-0"}
    with as_account(tmp_path, account, [config_map(config)]) as cluster:
        kubeconfig = ["--kubeconfig", str(cluster.kubeconfig)]
        reconciler = subprocess.Popen(
            [*CLI, *args, *kubeconfig],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        binding = next(r for r in RESOURCES if r.plural == "validatingadmissionpolicybindings")
        # This config turns every check on (the sandbox plays 1.32: no mutating policies).
        every_binding = sum(
            owned.kind == BINDING
            for owned in admission_objects(config_from_dict(config), served=apis_at((1, 32)))
        )
        try:
            wait_for(
                lambda: len(cluster.stored("validatingadmissionpolicybindings")) == every_binding,
                "the bindings",
                reconciler,
            )
            wait_for(
                lambda: any(
                    "volcano-guard.io/nodes-from" in json.dumps(c)
                    for c in cluster.stored("configmaps")
                ),
                "the node states",
                reconciler,
            )
            cluster.sandbox.call(lambda sb: sb.store.delete(binding, "", "volcano-guard-bindings"))
            wait_for(
                lambda: len(cluster.stored("validatingadmissionpolicybindings")) == every_binding,
                "the binding back",
                reconciler,
            )
            edit(
                cluster,
                "mutatingwebhookconfigurations",
                "volcano-guard",
                {"metadata": {"labels": {"app.kubernetes.io/name": "x"}}},
            )
            edit(
                cluster,
                "validatingadmissionpolicies",
                "volcano-guard-node-name",
                {"spec": {"failurePolicy": "Ignore"}},
            )
            edit(
                cluster,
                "validatingadmissionpolicybindings",
                "volcano-guard-node-name",
                {"spec": {"validationActions": ["Audit"]}},
            )
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
                lambda: "gpu-1" in json.dumps(cluster.stored("configmaps")),
                "the new node's state",
                reconciler,
            )
            wait_for(
                lambda: (
                    named(cluster, "validatingadmissionpolicybindings", "volcano-guard-node-name")[
                        "spec"
                    ]["validationActions"]
                    == ["Deny"]
                ),
                "the repairs",
                reconciler,
            )
            replace_config(cluster, {"policies": {"podGroups": {"deleteGuard": {"mode": "x"}}}})
            wait_for(lambda: bool(cluster.stored("events")), "an Event", reconciler)
            replace_config(cluster, {"validatingAdmissionPolicies": False})
            wait_for(
                lambda: not cluster.stored("validatingadmissionpolicybindings"),
                "the deletes",
                reconciler,
            )
        finally:
            reconciler.terminate()
            reconciler.wait(30)
        if LIBFAKETIME is None:
            pytest.skip("faketime is not installed (.ci/run installs it)")
        years_on = {"LD_PRELOAD": str(LIBFAKETIME), "FAKETIME": "+2500d"}  # the CA is due
        once = subprocess.run(
            [*CLI, "reconcile", "--once", *kubeconfig],
            env={**env, **years_on},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert once.returncode == 0, once.stderr
        assert "make-ca" in once.stderr
        uninstall = subprocess.run(
            [*CLI, "reconcile", "--uninstall", *kubeconfig],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert uninstall.returncode == 0, uninstall.stderr
        left = [p for p in ("secrets", "configmaps", "leases") for o in cluster.stored(p)]
        assert left == ["configmaps"], left  # the config, which the install made
        # The sandbox plays 1.32, which serves no MutatingAdmissionPolicy: those rights are
        # exercised by tests/reconciler/test_reconcile_versions.py at 1.34 and 1.36.
        unserved = {right for right in grants(deployed, account) if "mutatingadmission" in right[1]}
        done = called(cluster.sandbox.stats()) | CREATED_BY_APPLY
        assert done - unserved == grants(deployed, account) - unserved


@pytest.mark.slow  # an audit process through its reads and reports: about 7 s
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
