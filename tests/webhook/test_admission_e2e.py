"""The guard as a user meets it: its webhook configurations registered in the sandbox (the
rendered deploy/base, caBundle set by `volcano-guard certs inject`), the real webhook process
behind them, and kubectl as the client, over HTTPS with bearer tokens
(volcano_guard_sandbox.guarded_sandbox sets it up)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.volcano_fixtures import CONTROL_PLANE, VOLCANO_NAMESPACE, control_plane_pod
from volcano_guard_sandbox.guarded_sandbox import (
    OTHER_SCHEDULER,
    GuardedSandbox,
    guarded_sandbox,
    kubectl_path,
    shipped_config,
    with_policy_changes,
)

# A webhook process and dozens of kubectl runs per cluster: the slow suite (.ci/run runs it).
pytestmark = pytest.mark.slow
SEED = [
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}},
    {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "node-1"},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}},
    },
]
# What the tests change from the shipped config (deploy/base/config.yaml).
VARIANT: dict[str, Any] = {
    "resourceRequests": {"defaults": {"cpu": "100m", "memory": "128Mi"}},
    "nodeName": {"action": "rewrite", "bindingGuard": {"mode": "enforce"}},
}


@pytest.fixture(scope="module")
def tools() -> None:
    if kubectl_path() is None:
        pytest.skip("kubectl is not installed (.ci/run installs it)")


@pytest.fixture(scope="module")
def shipped(tools, tmp_path_factory) -> Iterator[GuardedSandbox]:
    with guarded_sandbox(tmp_path_factory.mktemp("shipped"), SEED) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def variant(tools, tmp_path_factory) -> Iterator[GuardedSandbox]:
    config = with_policy_changes(shipped_config(), VARIANT)
    with guarded_sandbox(tmp_path_factory.mktemp("variant"), SEED, config) as cluster:
        yield cluster


def volcano_pod(name: str, requests: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "worker", "image": "busybox"}
    if requests is not None:
        container["resources"] = {"requests": requests}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {"schedulerName": "volcano", "containers": [container], **spec},
    }


REQUESTS = {"cpu": "1", "memory": "1Gi"}


def refused_by_policy(policy: str) -> str:
    """How kubectl prints a ValidatingAdmissionPolicy's denial (the binding has its name)."""
    return f"ValidatingAdmissionPolicy '{policy}' with binding '{policy}' denied request: "


def test_a_volcano_pod_without_requests_is_refused_with_the_guards_message(shipped):
    result = shipped.create(volcano_pod("no-requests"), check=False)
    assert result.returncode != 0
    assert (
        refused_by_policy("volcano-guard-resource-requests")
        + 'Pod "team-a/no-requests": container "worker" has no cpu request'
    ) in result.stderr
    assert shipped.kubectl("get", "pod", "no-requests", "-n", "team-a", check=False).returncode != 0
    assert (
        "pod/with-requests created" in shipped.create(volcano_pod("with-requests", REQUESTS)).stdout
    )


def test_volcano_jobs_and_cronjobs_with_a_task_missing_memory_are_refused(shipped):
    task = {
        "name": "worker",
        "replicas": 2,
        "template": {
            "spec": {
                "containers": [
                    {"name": "tf", "image": "tf", "resources": {"requests": {"cpu": "1"}}}
                ]
            }
        },
    }
    job = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "mnist", "namespace": "team-a"},
        "spec": {"schedulerName": "volcano", "tasks": [task]},
    }
    cronjob = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "CronJob",
        "metadata": {"name": "nightly", "namespace": "team-a"},
        "spec": {"schedule": "0 2 * * *", "jobTemplate": {"spec": job["spec"]}},
    }
    for obj in (job, cronjob):
        result = shipped.create(obj, check=False)
        assert result.returncode != 0, obj["kind"]
        assert 'task "worker": container "tf" has no memory request' in result.stderr


def test_a_pod_bound_by_node_name_to_a_managed_node_is_refused(shipped):
    result = shipped.create(volcano_pod("pinned", REQUESTS, nodeName="node-1"), check=False)
    assert result.returncode != 0
    assert (
        refused_by_policy("volcano-guard-node-name")
        + 'Pod "team-a/pinned" sets spec.nodeName "node-1"'
    ) in result.stderr


MIRROR = {"kubernetes.io/config.mirror": "mirror-hash"}
DAEMONSET_OWNER = {
    "apiVersion": "apps/v1",
    "kind": "DaemonSet",
    "name": "agent",
    "uid": "6c8e8b0e-0000-4000-8000-000000000001",
    "controller": True,
}


@pytest.mark.parametrize(
    ("name", "metadata", "token"),
    [
        ("mirror", {"annotations": MIRROR}, "node-1"),
        ("daemon", {"ownerReferences": [DAEMONSET_OWNER]}, "daemonsets"),
    ],
)
def test_a_pod_pinned_to_a_node_is_exempt_only_when_its_creator_vouches(
    shipped, name, metadata, token
):
    pinned = volcano_pod(name, {"cpu": "64", "memory": "1Gi"}, nodeName="node-1")
    pinned["metadata"].update(metadata)
    forged = shipped.create(pinned, token="admin", check=False)  # a user writing the fields
    assert forged.returncode != 0
    assert 'sets spec.nodeName "node-1"' in forged.stderr
    assert f"pod/{name} created" in shipped.create(pinned, token=token).stdout


def test_a_stale_podgroup_delete_is_refused_and_a_uid_preconditioned_one_allowed(shipped):
    podgroup = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "pg-train", "namespace": "team-a"},
        "spec": {"minMember": 1},
    }
    shipped.create(podgroup)
    stamped = shipped.get("podgroup", "pg-train", "-n", "team-a")
    assert stamped["metadata"]["annotations"]["volcano-guard.io/generation-id"]
    member = volcano_pod("member", REQUESTS)
    member["metadata"]["annotations"] = {"scheduling.k8s.io/group-name": "pg-train"}
    shipped.create(member)
    refused = shipped.kubectl("delete", "podgroup", "pg-train", "-n", "team-a", check=False)
    assert refused.returncode != 0 and "UID precondition" in refused.stderr
    options = {
        "kind": "DeleteOptions",
        "apiVersion": "v1",
        "preconditions": {"uid": stamped["metadata"]["uid"]},
    }
    path = "/apis/scheduling.volcano.sh/v1beta1/namespaces/team-a/podgroups/pg-train"
    (shipped.directory / "delete.json").write_text(json.dumps(options))
    shipped.kubectl("delete", "--raw", path, "-f", str(shipped.directory / "delete.json"))
    assert (
        shipped.kubectl("get", "podgroup", "pg-train", "-n", "team-a", check=False).returncode != 0
    )


def test_a_collection_delete_takes_idle_podgroups_and_refuses_one_with_live_pods(shipped):
    """DeleteCollection admits each item with an empty name (as the namespace controller
    deletes); the guard judges each by its oldObject."""
    collection = "/apis/scheduling.volcano.sh/v1beta1/namespaces/team-a/podgroups"
    idle = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "pg-idle", "namespace": "team-a", "labels": {"set": "idle"}},
        "spec": {"minMember": 1},
    }
    shipped.create(idle)
    shipped.kubectl("delete", "--raw", f"{collection}?labelSelector=set%3Didle")
    assert shipped.kubectl("get", "podgroup", "pg-idle", "-n", "team-a", check=False).returncode
    busy = {**idle, "metadata": {**idle["metadata"], "name": "pg-busy", "labels": {"set": "busy"}}}
    shipped.create(busy)
    member = volcano_pod("busy-member", REQUESTS)
    member["metadata"]["annotations"] = {"scheduling.k8s.io/group-name": "pg-busy"}
    shipped.create(member)
    refused = shipped.kubectl(
        "delete", "--raw", f"{collection}?labelSelector=set%3Dbusy", check=False
    )
    assert refused.returncode != 0 and "still has live member pods" in refused.stderr
    assert "team-a/pg-busy" in refused.stderr


def owned_pod(name: str, owner: dict[str, Any]) -> dict[str, Any]:
    """A pod as the owner's controller makes it from its template."""
    pod = volcano_pod(name, REQUESTS)
    pod["metadata"]["labels"] = owner["spec"]["selector"]["matchLabels"]
    pod["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "apps/v1",
            "kind": owner["kind"],
            "name": owner["metadata"]["name"],
            "uid": owner["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    return pod


def grouped(cluster: GuardedSandbox, owner: dict[str, Any], pod_name: str) -> dict[str, Any]:
    """One incarnation: the owner's pod, then as Volcano's PodGroup controller takes it
    (createNormalPodPGIfNotExist): PodGroup `podgroup-<owner uid>`, and the pod annotated with
    it by a strategic merge patch. The stored PodGroup."""
    group = f"podgroup-{owner['metadata']['uid']}"
    cluster.create(owned_pod(pod_name, owner))
    cluster.create(
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {
                "name": group,
                "namespace": "team-a",
                "ownerReferences": owned_pod("x", owner)["metadata"]["ownerReferences"],
            },
            "spec": {"minMember": 1},
        }
    )
    cluster.kubectl(
        "patch",
        "pod",
        pod_name,
        "-n",
        "team-a",
        "--type=strategic",
        "-p",
        json.dumps({"metadata": {"annotations": {"scheduling.k8s.io/group-name": group}}}),
    )
    return cluster.get("podgroup", group, "-n", "team-a")


@pytest.mark.parametrize(
    ("kind", "pod_name"), [("StatefulSet", "web-0"), ("ReplicaSet", "web-7d4f9")]
)
def test_a_stale_replicas_zero_delete_after_scaling_back_up_is_refused(shipped, kind, pod_name):
    """Volcano's PodGroup controller deletes podgroup-<uid> by name, with no preconditions,
    whenever it handles its owner at replicas 0 (addStatefulSet, addReplicaSet; #5972): scaled
    1 -> 0 -> 1, a late or retried such delete would take the new pod's PodGroup."""
    name = f"web-{kind.lower()}"
    shipped.create(
        {
            "apiVersion": "apps/v1",
            "kind": kind,
            "metadata": {"name": name, "namespace": "team-a"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": volcano_pod("t", REQUESTS)["spec"],
                },
            },
        }
    )
    owner = shipped.get(kind.lower(), name, "-n", "team-a")
    first = grouped(shipped, owner, pod_name)

    def scale(replicas: int) -> None:
        shipped.kubectl(
            "patch",
            kind.lower(),
            name,
            "-n",
            "team-a",
            "--type=merge",
            "-p",
            json.dumps({"spec": {"replicas": replicas}}),
        )

    scale(0)  # its pod goes, and Volcano deletes the PodGroup: no live member, allowed
    shipped.kubectl("delete", "pod", pod_name, "-n", "team-a")
    shipped.kubectl("delete", "podgroup", first["metadata"]["name"], "-n", "team-a")
    scale(1)  # a new pod, and a new PodGroup of the same name
    second = grouped(shipped, owner, pod_name)
    assert second["metadata"]["uid"] != first["metadata"]["uid"]

    stale = shipped.kubectl(
        "delete", "podgroup", second["metadata"]["name"], "-n", "team-a", check=False
    )  # the replicas == 0 event, handled late
    assert stale.returncode != 0 and "still has live member pods" in stale.stderr, stale.stderr
    kept = shipped.get("podgroup", second["metadata"]["name"], "-n", "team-a")
    assert kept["metadata"]["uid"] == second["metadata"]["uid"]
    pod = shipped.get("pod", pod_name, "-n", "team-a")
    assert (
        pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == kept["metadata"]["name"]
    )


def test_a_labelled_pod_is_created_with_the_sidecar_in_it(shipped):
    pod = volcano_pod("controller", REQUESTS)
    pod["metadata"]["labels"] = {"volcano-guard.io/inject": "true"}
    shipped.create(pod)
    created = shipped.get("pod", "controller", "-n", "team-a")
    names = [
        c["name"] for c in created["spec"].get("initContainers", []) + created["spec"]["containers"]
    ]
    assert any("volcano-guard" in name for name in names), names


def test_defaults_filled_in_by_mutate_are_stored(variant):
    variant.create(volcano_pod("defaulted"))
    stored = variant.get("pod", "defaulted", "-n", "team-a")
    assert stored["spec"]["containers"][0]["resources"]["requests"] == {
        "cpu": "100m",
        "memory": "128Mi",
    }


def test_in_rewrite_mode_a_node_name_becomes_a_node_affinity(variant):
    variant.create(volcano_pod("rewritten", REQUESTS, nodeName="node-1"))
    stored = variant.get("pod", "rewritten", "-n", "team-a")
    assert "nodeName" not in stored["spec"]
    assert "node-1" in json.dumps(stored["spec"].get("affinity"))


def test_a_binding_by_another_schedulers_user_is_refused(variant):
    variant.create(volcano_pod("to-bind", REQUESTS))
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "to-bind", "namespace": "team-a"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "node-1"},
    }
    path = "/api/v1/namespaces/team-a/pods/to-bind/binding"
    (variant.directory / "binding.json").write_text(json.dumps(binding))
    refused = variant.kubectl(
        "create",
        "--raw",
        path,
        "-f",
        str(variant.directory / "binding.json"),
        token="other",
        check=False,
    )
    assert refused.returncode != 0 and OTHER_SCHEDULER in refused.stderr
    variant.kubectl(
        "create", "--raw", path, "-f", str(variant.directory / "binding.json"), token="volcano"
    )
    assert variant.get("pod", "to-bind", "-n", "team-a")["spec"]["nodeName"] == "node-1"


PLAIN = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "web-7d4f9-abcde", "namespace": "team-a", "labels": {"app": "web"}},
    "spec": {"containers": [{"name": "web", "image": "nginx"}]},
}
OUTAGE_SEED = [
    *SEED,
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": VOLCANO_NAMESPACE}},
]


def test_with_the_webhook_down_the_api_server_still_refuses_what_the_guard_would(tools, tmp_path):
    """deploy/ as shipped, the webhook process killed: nothing bad is admitted, and nothing
    but PodGroup writes waits for the guard."""
    with guarded_sandbox(tmp_path, OUTAGE_SEED) as cluster:
        cluster.stop_webhook()
        refused = cluster.create(volcano_pod("no-requests"), check=False)
        assert refused.returncode != 0
        assert refused_by_policy("volcano-guard-resource-requests") in refused.stderr
        negative = cluster.create(
            volcano_pod("negative", {"cpu": "-1", "memory": "1Gi"}), check=False
        )
        assert negative.returncode != 0
        assert (
            'The Pod "negative" is invalid: spec.containers[0].resources.requests[cpu]: '
            'Invalid value: "-1": must be greater than or equal to 0'
        ) in negative.stderr
        pinned = cluster.create(volcano_pod("pinned", REQUESTS, nodeName="node-1"), check=False)
        assert pinned.returncode != 0
        assert refused_by_policy("volcano-guard-node-name") in pinned.stderr
        # Admitted: a good Volcano pod, a Volcano Job's pod, a default-scheduler pod, Volcano's
        # control plane, a labelled pod (without its sidecar).
        job_pod = volcano_pod("mnist-worker-0", REQUESTS)
        job_pod["metadata"]["annotations"] = {"scheduling.k8s.io/group-name": "mnist"}
        for pod in (volcano_pod("good", REQUESTS), job_pod, PLAIN):
            assert " created" in cluster.create(pod).stdout
        for workload in CONTROL_PLANE:
            assert " created" in cluster.create(control_plane_pod(*workload)).stdout
        labelled = {
            **PLAIN,
            "metadata": {
                "name": "labelled",
                "namespace": "team-a",
                "labels": {"volcano-guard.io/inject": "true"},
            },
        }
        cluster.create(labelled)
        stored = cluster.get("pod", "labelled", "-n", "team-a")
        assert [c["name"] for c in stored["spec"]["containers"]] == ["web"]
        # PodGroups wait for the guard: their generation id may not be skipped.
        podgroup = {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": "mnist", "namespace": "team-a"},
            "spec": {"minMember": 1},
        }
        waiting = cluster.create(podgroup, check=False)
        assert waiting.returncode != 0 and "failed calling webhook" in waiting.stderr


def test_without_the_policies_the_validating_webhook_fails_closed(tools, tmp_path):
    config = {**shipped_config(), "validatingAdmissionPolicies": False}
    with guarded_sandbox(tmp_path, SEED, config) as cluster:
        cluster.stop_webhook()
        # A pod the guard acts on: the validating webhook fails closed.
        refused = cluster.create(volcano_pod("while-down", REQUESTS), check=False)
        assert refused.returncode != 0 and "failed calling webhook" in refused.stderr
        # A plain Deployment's pod: no registration sends it, so the outage does not stop it.
        assert "created" in cluster.create(PLAIN).stdout


def test_with_managed_node_selectors_the_published_states_hold_while_the_webhook_is_down(
    tools, tmp_path
):
    config = with_policy_changes(
        shipped_config(), {"nodeName": {"managedNodeSelectors": ["volcano.sh/role:train"]}}
    )
    seed = [
        *SEED,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "volcano-guard"}},
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "gpu-1", "labels": {"volcano.sh/role": "train"}},
        },
    ]
    with guarded_sandbox(tmp_path, seed, config) as cluster:

        def published() -> dict[str, str]:
            listed = cluster.get(
                "configmaps", "-n", "volcano-guard", "-l", "volcano-guard.io/params=node-states"
            )
            return {n: s for item in listed["items"] for n, s in item.get("data", {}).items()}

        deadline = time.monotonic() + 30
        while published() != {"gpu-1": "managed", "node-1": "unmanaged"}:
            assert time.monotonic() < deadline, published()
            time.sleep(0.2)
        cluster.stop_webhook()
        managed = cluster.create(volcano_pod("on-gpu", REQUESTS, nodeName="gpu-1"), check=False)
        assert managed.returncode != 0
        assert (
            refused_by_policy("volcano-guard-node-name") + 'Pod "team-a/on-gpu" sets '
            'spec.nodeName "gpu-1": the node is managed'
        ) in managed.stderr
        ghost = cluster.create(volcano_pod("on-ghost", REQUESTS, nodeName="ghost"), check=False)
        assert ghost.returncode != 0 and "the node is not known to volcano-guard" in ghost.stderr
        assert (
            " created" in cluster.create(volcano_pod("on-cpu", REQUESTS, nodeName="node-1")).stdout
        )
