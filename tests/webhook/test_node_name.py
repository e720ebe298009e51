"""Policy nodeName and the binding guard, called as the server calls them."""

import copy
from typing import Any

import pytest

from tests.builders import container, pod, review
from volcano_guard.base.informer import empty_snapshot, static_snapshot
from volcano_guard.base.jsonpatch import apply_patch
from volcano_guard.base.node_selectors import is_managed, selector_set
from volcano_guard.webhook.config import config_from_dict
from volcano_guard.webhook.evaluation import evaluate
from volcano_guard.webhook.policies import node_name as node_name_policy
from volcano_guard.webhook.policies.base import PolicyContext
from volcano_guard.webhook.policies.node_name.decision import pin_to_node
from volcano_guard.webhook.review import from_document

NODES = static_snapshot(
    {
        "gpu-1": {"volcano.sh/role": "train", "kubernetes.io/hostname": "gpu-1"},
        "web-1": {"role": "web"},
    }
)


def context(nodes=NODES, fail_closed=True, **node_name):
    data = {"failClosed": fail_closed, "policies": {"nodeName": node_name}}
    snapshots = {} if nodes is None else {node_name_policy.NODES: nodes}
    return PolicyContext(config_from_dict(data), snapshots)


def bound(node="gpu-1", **extra):
    obj = pod(container(requests={"cpu": "1", "memory": "1Gi"}), scheduler="default-scheduler")
    obj["spec"]["nodeName"] = node
    obj["metadata"].update(extra)
    return obj


def run(phase, obj, ctx, user="alice", groups=("system:authenticated",), namespace=None):
    body = review(obj)
    body["request"]["userInfo"] = {"username": user, "groups": list(groups)}
    if namespace:
        body["request"]["namespace"] = namespace
    return evaluate(phase, from_document(body), ctx)


@pytest.mark.parametrize(
    ("labels", "selectors", "managed"),
    [
        ({}, (), True),
        ({"volcano.sh/role": "train"}, ("volcano.sh/role:train",), True),
        ({"volcano.sh/role": "serve"}, ("volcano.sh/role:train", "volcano.sh/role:serve"), True),
        ({"volcano.sh/role": "serve"}, ("volcano.sh/role:train",), False),
        ({}, ("volcano.sh/role:train",), False),
        ({"a": ""}, ("a:",), True),
    ],
)
def test_managed_nodes_follow_volcanos_node_selector_rule(labels, selectors, managed):
    assert is_managed(labels, selector_set(selectors)) is managed


def test_denies_node_name_on_a_managed_node_naming_pod_node_and_fix():
    decision = run("validate", bound(), context()).decision
    assert not decision.allowed
    assert 'Pod "team-a/train-0" sets spec.nodeName "gpu-1"' in decision.message
    assert "kubernetes.io/hostname" in decision.message
    assert 'schedulerName "volcano"' in decision.message


def test_allows_an_unmanaged_node_when_selectors_are_set():
    ctx = context(managedNodeSelectors=["volcano.sh/role:train"])
    assert run("validate", bound("web-1"), ctx).decision.allowed
    assert not run("validate", bound("gpu-1"), ctx).decision.allowed


def test_pods_without_node_name_are_not_handled():
    obj = pod(container(requests={"cpu": "1", "memory": "1Gi"}))
    results = run("validate", obj, context()).results
    assert all(r.policy != "nodeName" for r in results)


@pytest.mark.parametrize(
    ("unknown_nodes", "nodes", "fail_closed", "allowed"),
    [
        ("deny", NODES, True, False),
        ("allow", NODES, True, True),
        ("allow", empty_snapshot(), True, False),  # not synced: failClosed decides
        ("allow", empty_snapshot(), False, True),
        ("deny", None, True, False),
        ("deny", None, False, True),
    ],
)
def test_unknown_nodes_and_an_unsynced_cache(unknown_nodes, nodes, fail_closed, allowed):
    ctx = context(nodes=nodes, fail_closed=fail_closed, unknownNodes=unknown_nodes)
    assert run("validate", bound("ghost"), ctx).decision.allowed is allowed


MIRROR = {"kubernetes.io/config.mirror": "x"}
DAEMONSET_OWNER = {
    "apiVersion": "apps/v1",
    "kind": "DaemonSet",
    "name": "ds",
    "uid": "u",
    "controller": True,
}
DAEMONSET_CONTROLLER = "system:serviceaccount:kube-system:daemon-set-controller"
NODE = {"user": "system:node:gpu-1", "groups": ("system:nodes", "system:authenticated")}


@pytest.mark.parametrize(
    ("obj", "kwargs", "ctx"),
    [
        (bound(annotations=MIRROR), NODE, context()),
        (bound(), {"namespace": "kube-system"}, context()),
        (bound(), {"user": "admin"}, context(exemptUsers=["admin"])),
        (bound(), {"groups": ("ops",)}, context(exemptGroups=["ops"])),
        (
            bound(),
            {"user": "system:serviceaccount:infra:agent"},
            context(exemptUsers=["system:serviceaccount:infra:agent"]),
        ),
        (bound(ownerReferences=[DAEMONSET_OWNER]), {"user": DAEMONSET_CONTROLLER}, context()),
        (
            bound(ownerReferences=[DAEMONSET_OWNER]),
            {"user": "system:kube-controller-manager"},
            context(daemonSetControllers=["system:kube-controller-manager"]),
        ),
    ],
)
def test_exemptions(obj, kwargs, ctx):
    assert run("validate", obj, ctx, **kwargs).decision.allowed


@pytest.mark.parametrize(
    ("obj", "kwargs"),
    [
        (bound(annotations=MIRROR), {}),  # a user writing the mirror annotation
        (
            bound(annotations=MIRROR),
            {"user": "system:node:web-1", "groups": ("system:nodes",)},
        ),  # another node
        (bound(annotations=MIRROR), {"user": "system:node:gpu-1"}),  # not in system:nodes
        (bound(), NODE),  # a node, but not a mirror pod
        (bound(ownerReferences=[DAEMONSET_OWNER]), {}),  # a user naming a DaemonSet owner
        (
            bound(ownerReferences=[{**DAEMONSET_OWNER, "apiVersion": "evil.io/v1"}]),
            {"user": DAEMONSET_CONTROLLER},
        ),  # a made-up API group
        (
            bound(ownerReferences=[{**DAEMONSET_OWNER, "controller": False}]),
            {"user": DAEMONSET_CONTROLLER},
        ),
        (bound(), {"user": DAEMONSET_CONTROLLER}),  # the controller, but no DaemonSet owner
    ],
)
def test_fields_a_client_writes_exempt_no_one(obj, kwargs):
    decision = run("validate", obj, context(), **kwargs).decision
    assert not decision.allowed
    assert 'sets spec.nodeName "gpu-1"' in decision.message


def test_daemonset_pods_are_denied_when_daemonsets_are_not_allowed():
    obj = bound(ownerReferences=[DAEMONSET_OWNER])
    ctx = context(allowDaemonSets=False)
    assert not run("validate", obj, ctx, user=DAEMONSET_CONTROLLER).decision.allowed


def test_warn_and_audit_modes_allow():
    assert run("validate", bound(), context(mode="warn")).decision.warnings
    assert run("validate", bound(), context(mode="audit")).decision.audit_annotations


# --- rewrite ---------------------------------------------------------------------------------

PIN = {"key": "metadata.name", "operator": "In", "values": ["gpu-1"]}
AFFINITIES: list[dict[str, Any] | None] = [
    None,
    {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}},
    {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 1,
                    "preference": {
                        "matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]
                    },
                }
            ]
        }
    },
    {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]},
                    {
                        "matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}],
                        "matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": ["other"]}
                        ],
                    },
                ]
            }
        }
    },
    {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}},
]


@pytest.mark.parametrize("affinity", AFFINITIES)
def test_rewrite_pins_the_node_in_every_term_for_every_affinity_shape(affinity):
    obj = bound()
    if affinity is not None:
        obj["spec"]["affinity"] = copy.deepcopy(affinity)
    result = run("mutate", obj, context(action="rewrite"))
    assert result.decision.allowed
    patched = apply_patch(obj, list(result.decision.patch))
    spec = patched["spec"]
    assert "nodeName" not in spec
    assert spec["schedulerName"] == "volcano"
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert terms and all(term["matchFields"] == [PIN] for term in terms)
    old_terms = ((affinity or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution", {}
    ).get("nodeSelectorTerms") or []
    for old, new in zip(old_terms, terms, strict=False):
        assert new.get("matchExpressions") == old.get("matchExpressions")
    for key, value in (affinity or {}).items():  # other affinities are kept as they were
        if key != "nodeAffinity":
            assert spec["affinity"][key] == value
    preferred = ((affinity or {}).get("nodeAffinity") or {}).get(
        "preferredDuringSchedulingIgnoredDuringExecution"
    )
    if preferred is not None:
        assert (
            spec["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
            == preferred
        )
    assert run("validate", patched, context(action="rewrite")).decision.allowed


def test_rewrite_leaves_unmanaged_and_exempt_pods_alone():
    ctx = context(action="rewrite", managedNodeSelectors=["volcano.sh/role:train"])
    assert run("mutate", bound("web-1"), ctx).decision.patch == ()
    assert run("mutate", bound(), ctx, namespace="kube-system").decision.patch == ()


def test_pin_to_node_does_not_modify_its_input():
    affinity = copy.deepcopy(AFFINITIES[3])
    pin_to_node(affinity, "gpu-1")
    assert affinity == AFFINITIES[3]


# --- binding guard ---------------------------------------------------------------------------


def binding_review(node, user, subresource=True):
    request = {
        "uid": "b1",
        "operation": "CREATE",
        "namespace": "team-a",
        "name": "train-0",
        "kind": {"group": "", "version": "v1", "kind": "Binding"},
        "resource": {
            "group": "",
            "version": "v1",
            "resource": "pods" if subresource else "bindings",
        },
        "userInfo": {"username": user},
        "object": {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": "train-0", "namespace": "team-a"},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        },
    }
    if subresource:
        request["subResource"] = "binding"
    return from_document(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    )


VOLCANO = "system:serviceaccount:volcano-system:volcano-scheduler"
KUBE_SCHEDULER = "system:kube-scheduler"


@pytest.mark.parametrize("subresource", [True, False])
def test_binding_guard_refuses_other_binders_onto_managed_nodes(subresource):
    ctx = context(bindingGuard={"mode": "enforce"})
    denied = evaluate("validate", binding_review("gpu-1", KUBE_SCHEDULER, subresource), ctx)
    assert not denied.decision.allowed
    assert "system:kube-scheduler may not bind pod" in denied.decision.message
    allowed = evaluate("validate", binding_review("gpu-1", VOLCANO, subresource), ctx)
    assert allowed.decision.allowed


def test_binding_guard_allows_unmanaged_nodes_and_defaults_to_audit():
    ctx = context(bindingGuard={"mode": "enforce"}, managedNodeSelectors=["volcano.sh/role:train"])
    assert evaluate("validate", binding_review("web-1", KUBE_SCHEDULER), ctx).decision.allowed
    audited = evaluate("validate", binding_review("gpu-1", KUBE_SCHEDULER), context())
    assert audited.decision.allowed
    assert dict(audited.decision.audit_annotations)["bindingGuard"].startswith(KUBE_SCHEDULER)
