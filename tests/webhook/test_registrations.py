"""The webhook registrations (`volcano-guard manifests`): which webhooks the API server calls
for each request and what it meets while no guard replica answers, with matchConditions run by
a real CEL implementation; the registrations never leave out a request a policy acts on; no
cycle with Volcano's own pod webhooks; deploy/ holds the output for the shipped config."""

from __future__ import annotations

import copy
import subprocess
from typing import Any

import pytest
import yaml

from tests.admission_model import Request, called, during_outage
from tests.conftest import REPO
from tests.volcano_fixtures import (
    CONTROL_PLANE,
    VOLCANO_CONFIGURATIONS,
    VOLCANO_NAMESPACE,
    control_plane_pod,
)
from volcano_guard.cli import main
from volcano_guard.webhook.admission_policies import admission_policies, apis_at
from volcano_guard.webhook.config import config_from_dict, parse_config
from volcano_guard.webhook.manifests import admission_objects
from volcano_guard.webhook.registrations import webhook_configurations

SHIPPED_CONFIG = REPO / "deploy" / "base" / "config.yaml"
GROUP_NAME, GENERATION = "scheduling.k8s.io/group-name", "volcano-guard.io/podgroup-generation"
SCHEDULER = "system:serviceaccount:volcano-system:volcano-scheduler"
CONTROLLERS = "system:serviceaccount:volcano-system:volcano-controllers"


def shipped_config_text() -> str:
    return yaml.safe_load(SHIPPED_CONFIG.read_text())["data"]["config.yaml"]


def shipped(version: tuple[int, int] = (1, 30)) -> list[dict[str, Any]]:
    """What `manifests --kubernetes-version` prints for the shipped config (by default for
    1.30, as with no version): the webhook configurations, then the admission policies."""
    config = parse_config(shipped_config_text())
    return list(admission_objects(config, served=apis_at(version)).values())


def manifests(capsys, *args: str) -> list[dict[str, Any]]:
    assert main(["manifests", *args]) == 0
    return [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]


def test_manifests_prints_the_registrations_in_order_then_the_policies(tmp_path, capsys):
    config = tmp_path / "config.yaml"
    config.write_text(shipped_config_text())
    printed = manifests(capsys, "--config", str(config))
    kinds = {d["kind"]: d for d in printed}
    assert printed == shipped()
    # The checks the policies in the API server decide are sent to no webhook.
    assert [w["name"] for w in kinds["MutatingWebhookConfiguration"]["webhooks"]] == [
        "mutate.volcano-guard.io",
        "inject.volcano-guard.io",
    ]
    assert [w["name"] for w in kinds["ValidatingWebhookConfiguration"]["webhooks"]] == [
        "validate.volcano-guard.io",
        "bindings.volcano-guard.io",
    ]
    assert "ValidatingAdmissionPolicy" in kinds and "ValidatingAdmissionPolicyBinding" in kinds


def test_before_kubernetes_1_30_manifests_prints_no_policies_and_fails_closed(capsys):
    printed = manifests(capsys, "--kubernetes-version", "1.29")
    assert {d["kind"] for d in printed} == {
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    }
    assert printed == manifests(capsys, "--config", "/dev/null", "--kubernetes-version", "v1.29.4")
    validating = next(d for d in printed if d["kind"] == "ValidatingWebhookConfiguration")
    assert {w["failurePolicy"] for w in validating["webhooks"] if "open" in w["name"]} <= {"Ignore"}
    assert "validate-open.volcano-guard.io" not in {w["name"] for w in validating["webhooks"]}


def test_a_kubernetes_version_that_is_not_one_is_refused_in_one_line(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["manifests", "--kubernetes-version", "thirty"])
    assert exited.value.code == 2
    assert "'thirty' is not a Kubernetes version" in capsys.readouterr().err


def test_deploy_installs_no_admission_object_the_reconciler_owns_them():
    rendered = subprocess.run(
        ["kubectl", "kustomize", str(REPO / "deploy" / "base")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    # But the reconciler's own limits: the installer's, never the reconciler's to write.
    kinds = {
        d["kind"]
        for d in yaml.safe_load_all(rendered)
        if d and d["metadata"]["name"] != "volcano-guard-reconciler-limits"
    }
    assert not kinds & {
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }
    assert "Deployment" in kinds


# --- requests, as the API server sees them ---------------------------------------------------


def pod(
    name: str = "p",
    *,
    scheduler: str = "default-scheduler",
    node: str = "",
    annotations: dict | None = None,
    labels: dict | None = None,
    owner: str | None = None,
    requests: bool = True,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": "team-a"}
    if annotations:
        metadata["annotations"] = dict(annotations)
    if labels:
        metadata["labels"] = dict(labels)
    if owner:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": owner,
                "name": "o",
                "uid": "owner-uid",
                "controller": True,
            }
        ]
    container: dict[str, Any] = {"name": "c", "image": "x"}
    if requests:
        container["resources"] = {"requests": {"cpu": "1", "memory": "1Gi"}}
    spec: dict[str, Any] = {"schedulerName": scheduler, "containers": [container]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def create_pod(
    obj: dict[str, Any],
    namespace: str = "team-a",
    user: str = "alice",
    groups: tuple[str, ...] = ("system:authenticated",),
) -> Request:
    obj = copy.deepcopy(obj)
    obj["metadata"]["namespace"] = namespace
    return Request(
        "CREATE",
        "",
        "v1",
        "pods",
        "Pod",
        namespace,
        obj["metadata"].get("name", ""),
        object=obj,
        username=user,
        groups=groups,
        options={"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
    )


def update_pod(old: dict[str, Any], new: dict[str, Any], user: str = CONTROLLERS) -> Request:
    return Request(
        "UPDATE",
        "",
        "v1",
        "pods",
        "Pod",
        "team-a",
        new["metadata"]["name"],
        object=new,
        old_object=old,
        username=user,
        options={"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1"},
    )


def podgroup(annotations: dict | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {
            "name": "podgroup-rs",
            "namespace": "team-a",
            "uid": "pg-uid",
            "annotations": dict(annotations or {}),
        },
        "spec": {"minMember": 1},
    }


def podgroup_request(
    operation: str,
    obj: dict | None,
    old: dict | None = None,
    options: dict | None = None,
    user: str = CONTROLLERS,
) -> Request:
    return Request(
        operation,
        "scheduling.volcano.sh",
        "v1beta1",
        "podgroups",
        "PodGroup",
        "team-a",
        "podgroup-rs",
        object=obj,
        old_object=old,
        username=user,
        options=options,
    )


def binding(user: str) -> Request:
    obj = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "p", "namespace": "team-a"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "gpu-1"},
    }
    return Request(
        "CREATE",
        "",
        "v1",
        "pods",
        "Binding",
        "team-a",
        "p",
        object=obj,
        sub_resource="binding",
        username=user,
    )


def volcano_job() -> Request:
    obj = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "mnist", "namespace": "team-a"},
        "spec": {"schedulerName": "volcano", "tasks": []},
    }
    return Request(
        "CREATE", "batch.volcano.sh", "v1alpha1", "jobs", "Job", "team-a", "mnist", object=obj
    )


def config_map() -> Request:
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    return Request("CREATE", "", "v1", "configmaps", "ConfigMap", "team-a", "c", object=obj)


DELETE_OPTIONS = {"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1"}
GUARDED = "refused by validate.volcano-guard.io"
MUTATED = "refused by mutate.volcano-guard.io"
VALIDATE_OPEN, MUTATE_OPEN = "validate-open.volcano-guard.io", "mutate-open.volcano-guard.io"
PINNED = "refused by volcano-guard-node-name"  # the policy in the API server
JOINED = pod("w", scheduler="volcano", owner="ReplicaSet")
JOINED_PATCHED = copy.deepcopy(JOINED)
JOINED_PATCHED["metadata"]["annotations"] = {GROUP_NAME: "podgroup-rs"}

MIRROR = {"kubernetes.io/config.mirror": "x"}
NODE_USER, NODE_GROUPS = "system:node:gpu-1", ("system:nodes", "system:authenticated")
DAEMONSET_CONTROLLER = "system:serviceaccount:kube-system:daemon-set-controller"

# (what, request, webhooks called, what it meets while no guard replica answers)
TABLE = [
    ("a plain Deployment's pod", create_pod(pod(owner="ReplicaSet")), [], "admitted"),
    ("a ConfigMap", config_map(), [], "admitted"),
    ("a Volcano pod", create_pod(pod(scheduler="volcano")), [], "admitted"),
    (
        "a Volcano pod without requests",
        create_pod(pod(scheduler="volcano", requests=False)),
        [],
        "refused by volcano-guard-resource-requests",
    ),
    (
        "a Volcano Job's pod (names its PodGroup)",
        create_pod(pod(scheduler="volcano", annotations={GROUP_NAME: "mnist"})),
        [],
        "admitted",
    ),
    ("a pod naming a node", create_pod(pod(node="gpu-1")), [], PINNED),
    (
        "a mirror pod created by its node",
        create_pod(pod(node="gpu-1", annotations=MIRROR), user=NODE_USER, groups=NODE_GROUPS),
        [],
        "admitted",
    ),
    (
        "a pod with the mirror annotation created by a user",
        create_pod(pod(node="gpu-1", annotations=MIRROR)),
        [],
        PINNED,
    ),
    (
        "a DaemonSet pod created by the DaemonSet controller",
        create_pod(pod(node="gpu-1", owner="DaemonSet"), user=DAEMONSET_CONTROLLER),
        [],
        "admitted",
    ),
    (
        "a pod naming a DaemonSet owner created by a user",
        create_pod(pod(node="gpu-1", owner="DaemonSet")),
        [],
        PINNED,
    ),
    (
        "a pod naming a node in kube-system",
        create_pod(pod(node="gpu-1"), "kube-system"),
        [],
        "admitted",
    ),
    (
        "a pod labelled for injection",
        create_pod(pod(labels={"volcano-guard.io/inject": "true"})),
        ["inject.volcano-guard.io"],
        "admitted",
    ),
    (
        "the UPDATE naming a Deployment pod's PodGroup",
        update_pod(JOINED, JOINED_PATCHED),
        [],
        "admitted",
    ),
    ("a later pod UPDATE", update_pod(JOINED_PATCHED, JOINED_PATCHED), [], "admitted"),
    ("a Volcano Job", volcano_job(), [], "admitted"),
    (
        "a PodGroup CREATE",
        podgroup_request("CREATE", podgroup()),
        ["mutate.volcano-guard.io"],
        MUTATED,
    ),
    (
        "a PodGroup UPDATE keeping its id",
        podgroup_request(
            "UPDATE",
            podgroup({"volcano-guard.io/generation-id": "g"}),
            podgroup({"volcano-guard.io/generation-id": "g"}),
        ),
        [],
        "admitted",
    ),
    (
        "a PodGroup DELETE by name",
        podgroup_request("DELETE", None, podgroup(), DELETE_OPTIONS),
        ["validate.volcano-guard.io"],
        GUARDED,
    ),
    (
        "a PodGroup DELETE with a UID precondition (the garbage collector's)",
        podgroup_request(
            "DELETE", None, podgroup(), {**DELETE_OPTIONS, "preconditions": {"uid": "pg-uid"}}
        ),
        [],
        "admitted",
    ),
    ("pods/binding by Volcano's scheduler", binding(SCHEDULER), [], "admitted"),
    (
        "pods/binding by another scheduler",
        binding("system:kube-scheduler"),
        ["bindings.volcano-guard.io"],
        "admitted",
    ),
]


@pytest.mark.parametrize(
    ("what", "request_", "webhooks", "outage"), TABLE, ids=[row[0] for row in TABLE]
)
def test_which_webhooks_a_request_meets_and_what_an_outage_does_to_it(
    what, request_, webhooks, outage
):
    configurations = shipped()
    assert [w["name"] for w in called(configurations, request_)] == webhooks
    assert during_outage(configurations, request_) == outage


@pytest.mark.parametrize("workload", CONTROL_PLANE, ids=[w[1] for w in CONTROL_PLANE])
def test_volcanos_control_plane_pods_are_never_sent_to_the_guard(workload):
    request = create_pod(
        control_plane_pod(*workload),
        VOLCANO_NAMESPACE,
        user=f"system:serviceaccount:{VOLCANO_NAMESPACE}:replicaset-controller",
    )
    assert called(shipped(), request) == []
    assert during_outage(shipped(), request) == "admitted"


def guard_pods() -> list[Request]:
    """The CREATEs of the guard's own pods (its Deployment's and certs Job's), from
    `kubectl kustomize`, after the API server's defaulting."""
    rendered = subprocess.run(
        ["kubectl", "kustomize", str(REPO / "deploy" / "base")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    creates = []
    for document in yaml.safe_load_all(rendered):
        if document and document["kind"] in ("Deployment", "Job"):
            template = copy.deepcopy(document["spec"]["template"])
            template.setdefault("metadata", {})["name"] = document["metadata"]["name"]
            template["spec"].setdefault("schedulerName", "default-scheduler")
            creates.append(
                create_pod(
                    {"apiVersion": "v1", "kind": "Pod", **template},
                    document["metadata"]["namespace"],
                )
            )
    return creates


@pytest.mark.parametrize("volcano", list(VOLCANO_CONFIGURATIONS))
def test_no_cycle_with_volcanos_pod_webhooks_in_either_configuration(volcano):
    """Each side's pods must come back while the other side is down: the guard never gates
    Volcano's control plane, whatever Volcano gates."""
    volcano_webhooks = VOLCANO_CONFIGURATIONS[volcano]
    volcano_needs_guard = any(
        during_outage(shipped(), create_pod(control_plane_pod(*w), VOLCANO_NAMESPACE)) != "admitted"
        for w in CONTROL_PLANE
    )
    guard_needs_volcano = any(
        during_outage(volcano_webhooks, create) != "admitted" for create in guard_pods()
    )
    assert not (volcano_needs_guard and guard_needs_volcano)
    assert not volcano_needs_guard
    assert guard_needs_volcano is (volcano == "e2e setup")  # the model sees Volcano's gate


def test_injection_alone_fails_open_and_only_for_labelled_pods():
    mutating = shipped()[0]
    inject = next(w for w in mutating["webhooks"] if w["name"] == "inject.volcano-guard.io")
    assert inject["failurePolicy"] == "Ignore"
    assert inject["objectSelector"] == {"matchLabels": {"volcano-guard.io/inject": "true"}}


def test_policies_turned_off_drop_their_registrations():
    config = config_from_dict(
        {
            "policies": {
                "nodeName": {"mode": "off", "bindingGuard": {"mode": "off"}},
                "podGroups": {"stampGenerationId": False, "deleteGuard": {"mode": "off"}},
                "queues": {"mode": "off"},
                "sidecarInjection": {"mode": "off"},
            }
        }
    )
    mutating, validating = webhook_configurations(config)
    assert mutating["webhooks"] == []
    assert validating["webhooks"] == []  # resourceRequests: decided in the API server
    volcano_pod_on_a_node = create_pod(pod(node="gpu-1"))
    assert called([mutating, validating], volcano_pod_on_a_node) == []


def test_without_the_in_server_policies_every_check_fails_closed():
    config = config_from_dict(
        {
            "validatingAdmissionPolicies": False,
            "policies": {"podGroups": {"annotatePodGeneration": True}},
        }
    )
    mutating, validating = webhook_configurations(config)
    failure = {w["name"]: w["failurePolicy"] for c in (mutating, validating) for w in c["webhooks"]}
    assert failure == {
        "mutate.volcano-guard.io": "Fail",
        "mutate-open.volcano-guard.io": "Ignore",  # the pods' PodGroup generations only
        "inject.volcano-guard.io": "Ignore",
        "validate.volcano-guard.io": "Fail",
        "bindings.volcano-guard.io": "Ignore",
    }
    manifests = [mutating, validating]
    assert during_outage(manifests, create_pod(pod(scheduler="volcano"))) == GUARDED
    assert during_outage(manifests, create_pod(pod(node="gpu-1"))) == GUARDED


def test_with_managed_node_selectors_no_published_states_block_no_pod():
    """The in-server check reads node states the guard publishes; while there are none it is
    skipped (the API server collects params before matchConditions: refusing then would refuse
    every pod), so only a double failure, no states and no guard, lets a pinned pod in."""
    config = config_from_dict(
        {"policies": {"nodeName": {"managedNodeSelectors": ["volcano.sh/role:train"]}}}
    )
    manifests = [*webhook_configurations(config), *admission_policies(config)]
    assert [w["name"] for w in called(manifests, create_pod(pod(node="gpu-1")))] == [VALIDATE_OPEN]
    assert during_outage(manifests, create_pod(pod(scheduler="volcano"))) == "admitted"
    assert during_outage(manifests, create_pod(pod(node="gpu-1"))) == "admitted"
