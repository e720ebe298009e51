"""On a cluster that serves MutatingAdmissionPolicies (the sandbox playing Kubernetes 1.36), the
guard's pod checks and pod mutations run inside the API server: a pod create calls no webhook,
and with the webhook process stopped every pod gets the verdict and the stored object it gets
with the webhook running. kubectl is the client; the registrations and policies are what
`volcano-guard manifests` prints for the config (volcano_guard_sandbox.guarded_sandbox)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.volcano_fixtures import CONTROL_PLANE, VOLCANO_NAMESPACE, control_plane_pod
from volcano_guard_sandbox.apiserver.versions import KubernetesVersion
from volcano_guard_sandbox.guarded_sandbox import (
    GuardedSandbox,
    guarded_sandbox,
    kubectl_path,
    shipped_config,
    with_policy_changes,
)

# Two guarded sandboxes, each a webhook process and ~60 kubectl runs: the slow suite.
pytestmark = pytest.mark.slow

KUBERNETES_1_36 = KubernetesVersion(36)
RUNNING, STOPPED = "while-running", "while-stopped"  # the namespaces each pass creates in
SEED = [
    *(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        for name in (RUNNING, STOPPED, VOLCANO_NAMESPACE)
    ),
    {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "node-1"},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}},
    },
]
REQUESTS = {"cpu": "1", "memory": "1Gi"}
# Every pod mutation that can move into the API server turned on (the shipped config has only
# sidecar injection): default requests and the nodeName rewrite.
MUTATIONS: dict[str, Any] = {
    "resourceRequests": {"defaults": {"cpu": "100m", "memory": "128Mi"}},
    "nodeName": {"action": "rewrite"},
}


def pod(name: str, *, requests: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "worker", "image": "busybox"}
    if requests is not None:
        container["resources"] = {"requests": requests}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"schedulerName": "volcano", "containers": [container], **spec},
    }


def labelled(obj: dict[str, Any], **labels: str) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    obj["metadata"]["labels"] = {**obj["metadata"].get("labels", {}), **labels}
    return obj


def annotated(obj: dict[str, Any], **annotations: str) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    obj["metadata"]["annotations"] = {**obj["metadata"].get("annotations", {}), **annotations}
    return obj


def named(obj: dict[str, Any], name: str) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    obj["metadata"]["name"] = name
    return obj


INJECT = {"volcano-guard.io/inject": "true"}


def corpus() -> list[dict[str, Any]]:
    """Pods each policy has something to say about, and pods none has."""
    plain = pod("web", requests=REQUESTS)
    plain["spec"]["schedulerName"] = "default-scheduler"
    control_plane = []
    for workload in CONTROL_PLANE:
        obj = control_plane_pod(*workload)
        obj["metadata"]["name"] = obj["metadata"].pop("generateName") + "x1"
        del obj["metadata"]["namespace"]
        control_plane.append(obj)
    return [
        pod("good", requests=REQUESTS),
        pod("no-requests"),
        pod("negative", requests={"cpu": "-1", "memory": "1Gi"}),
        pod("half", requests={"cpu": "1"}),
        pod("pinned", requests=REQUESTS, nodeName="node-1"),
        pod("pinned-elsewhere", requests=REQUESTS, nodeName="node-2"),
        annotated(
            pod("mnist-worker-0", requests=REQUESTS), **{"scheduling.k8s.io/group-name": "mnist"}
        ),
        plain,
        labelled(named(plain, "injected"), **INJECT),
        labelled(pod("volcano-injected", requests=REQUESTS), **INJECT),
        annotated(
            labelled(pod("injected-env", requests=REQUESTS), **INJECT),
            **{"volcano-guard.io/proxy-mode": "env", "volcano-guard.io/flush-interval": "0.5"},
        ),
        labelled(pod("host-network", requests=REQUESTS, hostNetwork=True), **INJECT),
        *control_plane,
    ]


def outcome(cluster: GuardedSandbox, obj: dict[str, Any], namespace: str) -> dict[str, Any]:
    """What kubectl says of creating obj in namespace, and the pod as stored, with what differs
    between two namespaces and two creates taken out."""
    created = cluster.kubectl(
        "create", "-n", namespace, "-f", "-", stdin=json.dumps(obj), check=False
    )
    result: dict[str, Any] = {
        "created": created.returncode == 0,
        "said": created.stderr.replace(namespace, "NAMESPACE"),
    }
    if created.returncode == 0:
        stored = cluster.get("pod", obj["metadata"]["name"], "-n", namespace)
        metadata = stored["metadata"]
        for key in ("uid", "resourceVersion", "creationTimestamp", "managedFields", "namespace"):
            metadata.pop(key, None)
        result["stored"] = stored
    return result


def pod_admissions(cluster: GuardedSandbox) -> float:
    """The webhook's admission requests for pods, all decisions (its /metrics)."""
    families = text_string_to_metric_families(cluster.webhook_metrics())
    return sum(
        sample.value
        for family in families
        if family.name == "volcano_guard_admission_requests"
        for sample in family.samples
        if sample.name.endswith("_total") and sample.labels.get("kind") == "Pod"
    )


@pytest.fixture(scope="module")
def tools() -> None:
    if kubectl_path() is None:
        pytest.skip("kubectl is not installed (.ci/run installs it)")


@pytest.mark.parametrize("changes", [{}, MUTATIONS], ids=["shipped", "every-pod-mutation"])
def test_no_pod_verdict_or_mutation_depends_on_the_webhook_running(tools, tmp_path, changes):
    config = with_policy_changes(shipped_config(), changes)
    with guarded_sandbox(tmp_path, SEED, config, KUBERNETES_1_36) as cluster:
        before = pod_admissions(cluster)
        running = [outcome(cluster, obj, RUNNING) for obj in corpus()]
        assert pod_admissions(cluster) == before, "a pod create reached the webhook"
        cluster.stop_webhook()
        stopped = [outcome(cluster, obj, STOPPED) for obj in corpus()]
    for obj, with_webhook, without in zip(corpus(), running, stopped, strict=True):
        assert without == with_webhook, obj["metadata"]["name"]
    # The corpus has pods refused and pods mutated, so equality says something.
    verdicts = {obj["metadata"]["name"]: o for obj, o in zip(corpus(), running, strict=True)}
    assert not verdicts["no-requests"]["created"] or changes
    assert not verdicts["host-network"]["created"]
    sidecars = verdicts["volcano-injected"]["stored"]["spec"].get("initContainers", [])
    assert [c["name"] for c in sidecars] == ["volcano-guard-sidecar"]
    if changes:
        filled = verdicts["no-requests"]["stored"]["spec"]["containers"][0]["resources"]
        assert filled["requests"] == {"cpu": "100m", "memory": "128Mi"}
        assert "nodeName" not in verdicts["pinned"]["stored"]["spec"]
