"""Day two, as docs/install.md says, in the sandbox with kubectl: the guard installed with
`kubectl apply -k`, its reconciler and webhook run as their Deployments say (the harness plays
the kubelet), then the config changed in one step, a binding deleted, a bad config applied.
Each is held to what the issue asks: enforced within a bounded time, with the webhook up and
stopped, and nothing refused for the change itself."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO
from volcano_guard_sandbox.installed import RECONCILER, WEBHOOK, installed_sandbox, wait_until

NODES = [
    {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "gpu-1", "labels": {"role": "train"}},
    },
    {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "cpu-1"}},
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}},
]
GUARD_NAMESPACE = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "volcano-guard"}}
REQUESTS = {"cpu": "1", "memory": "1Gi"}
BOUND = 20.0  # seconds: a reconciler pass (2 s), the kubelet's projection, the webhook's re-read


def pinned(name: str, node: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {
            "schedulerName": "volcano",
            "nodeName": node,
            "containers": [{"name": "c", "image": "busybox", "resources": {"requests": REQUESTS}}],
        },
    }


def reconciled(cluster, reconciler) -> None:
    """Wait for the reconciler's first pass: the registrations and the serving certificate."""
    wait_until(
        lambda: (
            cluster.has("validatingwebhookconfiguration", "volcano-guard")
            and cluster.has("-n", "volcano-guard", "secret", "volcano-guard-tls")
        ),
        "the reconciler's registrations and certificate",
        pod=reconciler,
    )


@contextlib.contextmanager
def allowed_by_both(cluster):
    """Pods every config here admits (Volcano's, with requests, no node), created one after
    another while the block runs; yields the refusals, to be none."""
    from kubernetes import client as k8s
    from kubernetes import config as kubeconfig

    api = k8s.CoreV1Api(kubeconfig.new_client_from_config(str(cluster.kubeconfig)))
    refused: list[str] = []
    created = []
    stop = threading.Event()

    def create() -> None:
        for number in itertools.count():
            if stop.is_set():
                return
            body = pinned(f"both-{number}", "")
            del body["spec"]["nodeName"]
            try:
                api.create_namespaced_pod("team-a", body)
                created.append(number)
            except k8s.exceptions.ApiException as exc:
                refused.append(f"{exc.status}: {exc.body}")

    thread = threading.Thread(target=create)
    thread.start()
    try:
        yield refused
        time.sleep(2)  # past the swap, in every process
    finally:
        stop.set()
        thread.join(30)
    assert len(created) >= 20, created


def helm_render(path: Path, config: dict, **values: Any) -> Path:
    """What `helm upgrade --install` would apply (the chart's templates and CRDs, Helm v4's own
    engine), written to path."""
    helm = pytest.importorskip("helm_python", reason="helm-python-sdk is not installed")
    chart = helm.Chart.load(str(REPO / "charts" / "volcano-guard"))
    manifests = chart.render(
        {"config": config, **values}, name="volcano-guard", namespace="volcano-guard"
    )
    texts = [text for name, text in manifests.items() if name.endswith(".yaml")]
    hooks = [d for t in texts for d in yaml.safe_load_all(t) if d]
    objects = [d for d in hooks if "helm.sh/hook" not in (d["metadata"].get("annotations") or {})]
    path.write_text(yaml.safe_dump_all(objects))
    return path


class Install:
    """The guard as one of its two installs: kustomize (deploy/ copied, its config edited) or
    Helm (the chart rendered with `config` values); change() is the one step."""

    def __init__(self, how: str, tmp_path: Path) -> None:
        self.how, self.tmp_path = how, tmp_path
        shutil.copytree(REPO / "deploy", tmp_path / "deploy")
        self.base = tmp_path / "deploy" / "base"
        configmap = yaml.safe_load((self.base / "config.yaml").read_text())
        self.config = yaml.safe_load(configmap["data"]["config.yaml"]) or {}

    @property
    def target(self) -> Path:
        if self.how == "kustomize":
            set_config(self.base, lambda config: config.update(self.config))
            return self.base
        return helm_render(self.tmp_path / "rendered.yaml", self.config)

    def next_release(self, tag: str) -> Path:
        """The install of the next release: the same, its image at `tag` (what an upgrade
        changes in every Deployment's pod template)."""
        if self.how == "helm":
            image = {"image": {"tag": tag}}
            return helm_render(self.tmp_path / "next-release.yaml", self.config, **image)
        overlay = self.tmp_path / "deploy" / "next-release"
        overlay.mkdir()
        kustomization = {
            "resources": ["../base"],
            "images": [{"name": "volcano-guard", "newTag": tag}],
        }
        (overlay / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
        return overlay


@pytest.fixture
def checkout(tmp_path) -> Path:
    """deploy/ copied, so the test edits its config as an operator edits theirs."""
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed (.ci/run installs it)")
    shutil.copytree(REPO / "deploy", tmp_path / "deploy")
    return tmp_path / "deploy" / "base"


def set_config(base: Path, change) -> None:
    configmap = yaml.safe_load((base / "config.yaml").read_text())
    config = yaml.safe_load(configmap["data"]["config.yaml"]) or {}
    change(config)
    configmap["data"]["config.yaml"] = yaml.safe_dump(config)
    (base / "config.yaml").write_text(yaml.safe_dump(configmap))


@pytest.mark.slow  # two processes and a kubelet's part: about 25 s each
@pytest.mark.parametrize("how", ["kustomize", "helm"])
def test_a_config_change_is_one_step_and_holds_with_the_webhook_up_and_stopped(
    how, checkout, tmp_path
):
    install = Install(how, tmp_path / how)
    seed = NODES + [GUARD_NAMESPACE] * (how == "helm")  # helm's --create-namespace
    with installed_sandbox(tmp_path / "cluster", install.target, seed) as cluster:
        reconciler = cluster.start(RECONCILER)
        reconciled(cluster, reconciler)
        webhook = cluster.start(WEBHOOK)
        wait_until(webhook.listed, "the webhook in its endpoints", pod=webhook)
        # The shipped config: every node is Volcano's, so pinning to any node is refused.
        assert cluster.create(pinned("p0", "cpu-1")).returncode != 0

        install.config["policies"]["nodeName"]["managedNodeSelectors"] = ["role:train"]
        with allowed_by_both(cluster) as refused:
            cluster.apply(install.target)  # the one step: apply -k, or helm upgrade
            took = wait_until(
                lambda: cluster.create(pinned("p1", "cpu-1")).returncode == 0,
                "a pod pinned to an unlabelled node to be admitted",
                timeout=BOUND,
                pod=webhook,
            )
        assert refused == [], refused
        assert cluster.create(pinned("p2", "gpu-1")).returncode != 0

        def published() -> dict[str, str]:
            listed = cluster.get(
                "configmaps", "-n", "volcano-guard", "-l", "volcano-guard.io/params=node-states"
            )
            return {n: s for item in listed["items"] for n, s in (item.get("data") or {}).items()}

        # What the in-server policies read without the webhook, from the same one step.
        wait_until(
            lambda: published() == {"gpu-1": "managed", "cpu-1": "unmanaged"},
            "the node states",
            timeout=BOUND,
            pod=reconciler,
        )
        cluster.stop(WEBHOOK)
        assert cluster.create(pinned("p3", "cpu-1")).returncode == 0
        refused = cluster.create(pinned("p4", "gpu-1"))
        assert refused.returncode != 0 and "volcano-guard-node-name" in refused.stderr
        print(f"the change took {took:.1f}s")


def drift_count(metrics: str, name: str) -> float:
    for line in metrics.splitlines():
        if line.startswith("volcano_guard_reconciler_drift_total{") and f'name="{name}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.mark.slow  # about 18 s
def test_deleted_objects_come_back_and_a_bad_config_changes_nothing(checkout, tmp_path):
    with installed_sandbox(tmp_path / "cluster", checkout, NODES) as cluster:
        reconciler = cluster.start(RECONCILER)
        binding = "volcano-guard-resource-requests"
        reconciled(cluster, reconciler)
        present = cluster.has
        cluster.kubectl("delete", "validatingadmissionpolicybinding", binding)
        took = wait_until(
            lambda: present("validatingadmissionpolicybinding", binding), "the binding", 10
        )
        assert drift_count(reconciler.metrics(), binding) == 1
        # Re-created registrations get their caBundles at once, not empty.
        cluster.kubectl(
            "delete", "mutatingwebhookconfiguration,validatingwebhookconfiguration", "volcano-guard"
        )
        wait_until(
            lambda: (
                present("validatingwebhookconfiguration", "volcano-guard")
                and present("mutatingwebhookconfiguration", "volcano-guard")
            ),
            "the registrations",
            10,
        )
        for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
            webhooks = cluster.get(kind, "volcano-guard")["webhooks"]
            assert all(w["clientConfig"]["caBundle"] for w in webhooks), kind
        before = cluster.get("validatingadmissionpolicybinding", binding)

        set_config(
            checkout, lambda config: config["policies"]["resourceRequests"].update(mode="enforced")
        )
        cluster.kubectl("apply", "-k", str(checkout))  # kubectl cannot tell; the guard can
        wait_until(
            lambda: "volcano_guard_reconciler_config_valid 0.0" in reconciler.metrics(),
            "the config to be refused",
            10,
        )
        log = reconciler.log.read_text().splitlines()
        [line] = [entry for entry in log if "ConfigMap" in entry and "enforced" in entry]
        assert "policies.resourceRequests.mode" in line and "last good config" in line
        events = cluster.get("events", "-n", "volcano-guard")["items"]
        assert "ConfigRejected" in {e["reason"] for e in events}
        after = cluster.get("validatingadmissionpolicybinding", binding)
        assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
        assert after["spec"]["validationActions"] == ["Deny"]
        print(f"a deleted binding was back after {took:.1f}s")


def uninstall_commands() -> list[str]:
    """The kustomize lines of install.md's "Uninstall", continuation lines joined."""
    guide = (REPO / "docs" / "install.md").read_text()
    section = guide[guide.index("## 8. Uninstall") :]
    blocks = section.split("```sh\n")
    kustomize = blocks[2][: blocks[2].index("```")]
    return [line.split(" #")[0].strip() for line in kustomize.replace("\\\n", " ").splitlines()]


@pytest.mark.slow  # about 20 s
def test_the_documented_uninstall_removes_registrations_first_and_leaves_nothing(
    checkout, tmp_path
):
    with installed_sandbox(tmp_path / "cluster", checkout, NODES) as cluster:
        reconciler = cluster.start(RECONCILER)
        reconciled(cluster, reconciler)
        [pause, delete_owned, *delete_rest] = uninstall_commands()
        cluster.kubectl(*pause.split()[1:])
        time.sleep(5)  # the reconciler's pass under way ends; the docs' step leaves it running
        cluster.kubectl(*delete_owned.split()[1:])
        time.sleep(5)  # two passes of the running reconciler: nothing comes back
        owned = cluster.kubectl(
            "get",
            "mutatingwebhookconfiguration,validatingwebhookconfiguration,"
            "validatingadmissionpolicy,validatingadmissionpolicybinding",
            "-o",
            "name",
        ).stdout
        # Left: the reconciler's limits, the installer's (deploy/base deletes them last).
        assert set(owned.split()) == {
            f"validatingadmissionpolic{kind}.admissionregistration.k8s.io/"
            "volcano-guard-reconciler-limits"
            for kind in ("y", "ybinding")
        }
        cluster.stop(RECONCILER)
        for line in delete_rest:
            words = [w.replace("deploy/", f"{checkout.parent}/") for w in line.split()[1:]]
            result = cluster.kubectl(*words, check=False)
            assert result.returncode == 0, (line, result.stderr)
        kinds = (
            "deployments,services,configmaps,secrets,serviceaccounts,roles,rolebindings,"
            "clusterroles,clusterrolebindings,poddisruptionbudgets,leases,namespaces"
        )
        left = cluster.kubectl("get", kinds, "-A", "-o", "name").stdout
        left += cluster.kubectl(
            "get", "validatingadmissionpolicy,validatingadmissionpolicybinding", "-o", "name"
        ).stdout
        assert "volcano-guard" not in left, left


# The pieces of an install made before the reconciler that deploy/base no longer has: the certs
# Job and CronJob (here the Job alone: the sandbox plays no CronJob) with their account and
# grants, and the registrations applied from a generated file.
PREVIOUS_CERTS = """
apiVersion: v1
kind: ServiceAccount
metadata: {name: volcano-guard-certs}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: volcano-guard-certs}
rules:
  - {apiGroups: [""], resources: [secrets], verbs: [create]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: volcano-guard-certs}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: volcano-guard-certs}
subjects: [{kind: ServiceAccount, name: volcano-guard-certs}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: volcano-guard-certs}
rules:
  - apiGroups: [admissionregistration.k8s.io]
    resources: [mutatingwebhookconfigurations, validatingwebhookconfigurations]
    resourceNames: [volcano-guard]
    verbs: [get, patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: volcano-guard-certs}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: volcano-guard-certs}
subjects: [{kind: ServiceAccount, name: volcano-guard-certs, namespace: volcano-guard}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: volcano-guard-certs}
spec:
  template:
    spec:
      serviceAccountName: volcano-guard-certs
      restartPolicy: OnFailure
      containers:
        - name: certs
          image: volcano-guard:0.1.0
          command: [volcano-guard, certs, ensure]
"""


CERTS_JOB_ARGS = [
    *("--namespace", "volcano-guard", "--service", "volcano-guard"),
    *("--mutating", "volcano-guard", "--validating", "volcano-guard"),
]


def upgrade_commands() -> list[str]:
    """install.md's commands for an install made before the reconciler."""
    guide = (REPO / "docs" / "install.md").read_text()
    section = guide[guide.index("## 7. Upgrade") : guide.index("## 8. Uninstall")]
    start = section.index("```sh\n") + len("```sh\n")
    block = section[start : section.index("```", start)]
    commands = [line.strip() for line in block.replace("\\\n", " ").splitlines() if line.strip()]
    assert len(commands) == 4, commands
    return commands


@pytest.mark.slow  # about 30 s
def test_an_install_made_before_the_reconciler_upgrades_refusing_nothing(checkout, tmp_path):
    import sys

    previous = tmp_path / "previous"
    previous.mkdir()
    config = yaml.safe_load(
        yaml.safe_load((checkout / "config.yaml").read_text())["data"]["config.yaml"]
    )
    (previous / "config.yaml").write_text(yaml.safe_dump(config))
    cli = [sys.executable, "-m", "volcano_guard.cli"]
    printed = subprocess.run(
        [*cli, "manifests", "--config", str(previous / "config.yaml")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (previous / "webhooks.yaml").write_text(printed)
    (previous / "certs.yaml").write_text(PREVIOUS_CERTS)
    base = os.path.relpath(checkout, previous)
    (previous / "kustomization.yaml").write_text(
        "namespace: volcano-guard\n"
        f"resources: [{base}, webhooks.yaml, certs.yaml]\n"
        "patches:\n"
        "  - patch: |\n      $patch: delete\n      apiVersion: apps/v1\n      kind: Deployment\n"
        "      metadata: {name: volcano-guard-reconciler}\n"
    )
    with installed_sandbox(tmp_path / "cluster", previous, NODES) as cluster:
        ensure = subprocess.run(  # what the certs Job ran
            [*cli, "certs", "ensure", *CERTS_JOB_ARGS],
            env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert ensure.returncode == 0, ensure.stderr
        webhook = cluster.start(WEBHOOK)
        wait_until(webhook.listed, "the webhook in its endpoints", pod=webhook)
        bundle = cluster.get("validatingwebhookconfiguration", "volcano-guard")["webhooks"][0][
            "clientConfig"
        ]["caBundle"]
        ca = cluster.get("secret", "-n", "volcano-guard", "volcano-guard-ca")["data"]["ca.crt"]
        with allowed_by_both(cluster) as refused:
            for line in upgrade_commands():
                words = [w.replace("deploy/base", str(checkout)) for w in line.split()[1:]]
                if "rollout" in words:
                    reconciler = cluster.start(RECONCILER)
                    reconciled(cluster, reconciler)
                    continue
                cluster.kubectl(*words)
            time.sleep(4)  # two passes of the reconciler over what it took over
        assert refused == [], refused
        registration = cluster.get("validatingwebhookconfiguration", "volcano-guard")
        labels = registration["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "volcano-guard-reconciler"
        assert registration["webhooks"][0]["clientConfig"]["caBundle"] == bundle
        assert (
            cluster.get("secret", "-n", "volcano-guard", "volcano-guard-ca")["data"]["ca.crt"] == ca
        )
        assert not cluster.has("-n", "volcano-guard", "job", "volcano-guard-certs")
        assert not cluster.has("clusterrole", "volcano-guard-certs")
        unrequested = pinned("no-requests", "")
        del unrequested["spec"]["nodeName"]
        unrequested["spec"]["containers"][0]["resources"] = {}
        assert cluster.create(unrequested).returncode != 0  # still guarded


class Traffic:
    """What the API server's clients send while a test runs: Volcano pods with requests and
    PodGroups (both admitted), Volcano pods without requests (refused), one after another.
    Every call the guard failed to answer shows: a refusal of what it admits (its fail-closed
    webhook for PodGroups), or an audit annotation `failed-open...` (its fail-open ones)."""

    def __init__(self, cluster) -> None:
        from kubernetes import client as k8s
        from kubernetes import config as kubeconfig

        api_client = kubeconfig.new_client_from_config(str(cluster.kubeconfig))
        self.cluster, self.k8s = cluster, k8s
        self.core, self.custom = k8s.CoreV1Api(api_client), k8s.CustomObjectsApi(api_client)
        self.sent = 0
        self.wrong: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._send)

    def __enter__(self) -> Traffic:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def failed_open(self) -> list[str]:
        events = json.loads(self.cluster.kubectl("get", "--raw", "/sandbox/audit").stdout)["items"]
        return [
            f"{key}: {value}"
            for event in events
            for key, value in (event.get("annotations") or {}).items()
            if key.startswith("failed-open")
        ]

    def _send(self) -> None:
        for number in itertools.count():
            if self._stop.is_set():
                return
            self.sent += 1
            try:
                self._one(number)
            except self.k8s.exceptions.ApiException as exc:
                self.wrong.append(f"{number}: {exc.status}: {exc.body}")

    def _one(self, number: int) -> None:
        kind = number % 3
        if kind == 0:
            body: Any = pinned(f"good-{number}", "")  # the client takes a dict as a V1Pod
            del body["spec"]["nodeName"]
            self.core.create_namespaced_pod("team-a", body)
        elif kind == 1:
            group = {
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "kind": "PodGroup",
                "metadata": {"name": f"group-{number}"},
                "spec": {"minMember": 1},
            }
            self.custom.create_namespaced_custom_object(
                "scheduling.volcano.sh", "v1beta1", "team-a", "podgroups", group
            )
        else:
            body = pinned(f"bad-{number}", "")
            del body["spec"]["nodeName"], body["spec"]["containers"][0]["resources"]
            try:
                self.core.create_namespaced_pod("team-a", body)
            except self.k8s.exceptions.ApiException as exc:
                if exc.status == 403 and "resources.requests" in str(exc.body):
                    return
                raise
            self.wrong.append(f"{number}: a pod without requests was admitted")


@pytest.mark.slow  # four processes rolled over by four others: about 50 s each
@pytest.mark.parametrize("how", ["kustomize", "helm"])
def test_a_release_upgrade_rolls_two_replicas_of_each_refusing_nothing(how, checkout, tmp_path):
    install = Install(how, tmp_path / how)
    seed = NODES + [GUARD_NAMESPACE] * (how == "helm")  # helm's --create-namespace
    with installed_sandbox(tmp_path / "cluster", install.target, seed) as cluster:
        reconcilers = [cluster.start(RECONCILER) for _ in range(2)]
        reconciled(cluster, reconcilers[0])
        webhooks = [cluster.start(WEBHOOK) for _ in range(2)]
        for webhook in webhooks:
            wait_until(webhook.listed, "the webhook in its endpoints", pod=webhook)
        with Traffic(cluster) as traffic:
            time.sleep(2)
            cluster.apply(install.next_release("0.2.0"))
            for name in (WEBHOOK, RECONCILER):
                [container] = cluster.deployment(name)["spec"]["template"]["spec"]["containers"]
                assert container["image"] == "volcano-guard:0.2.0"
            webhook_exits = cluster.roll(WEBHOOK)
            reconciler_exits = cluster.roll(RECONCILER)
            time.sleep(2)
        assert (webhook_exits, reconciler_exits) == ([0, 0], [0, 0])
        assert traffic.wrong == [], traffic.wrong
        assert traffic.failed_open() == []
        assert traffic.sent >= 60, traffic.sent
        # The new reconcilers keep the objects: one of them leads and repairs.
        cluster.kubectl("delete", "validatingadmissionpolicybinding", "volcano-guard-node-name")
        wait_until(
            lambda: cluster.has("validatingadmissionpolicybinding", "volcano-guard-node-name"),
            "the binding back",
            timeout=BOUND,
        )
        print(f"{traffic.sent} writes through two rolls, none refused or failed open")
