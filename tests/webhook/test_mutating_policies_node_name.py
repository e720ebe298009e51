"""The nodeName rewrite as a MutatingAdmissionPolicy: over generated pods and Volcano's own
control-plane pods pinned to a node, the sandbox's 1.36 plugin running the policy's mutation
leaves the object the webhook's /mutate leaves, under every config (mutating_differential)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.webhook.mutating_differential import (
    ALICE,
    Refused,
    compile_errors,
    policy_side,
    uncosted,
    webhook_side,
)
from tests.webhook.test_admission_policies import (
    INSTALLER_WORKLOADS,
    NODE_NAMES,
    SELECTORS,
    installer_pods,
    pinned_pod,
    published_states,
    users,
)
from tests.webhook.test_admission_policies import pods as admission_pods
from volcano_guard.webhook.config import Config, config_from_dict
from volcano_guard.webhook.node_states import NodeRange, configmap
from volcano_guard.webhook.policies.node_name import POLICY
from volcano_guard.webhook.policies.node_name.decision import REQUIRED

HOSTILE_SCHEDULER = "vol'cano\\\n\" + 'x'"
REWRITE = {"action": "rewrite"}
CONFIGS: dict[str, dict[str, Any]] = {
    # Every node a pod names is refused: no params.
    "rewrite": {"policies": {"nodeName": REWRITE}},
    "rewrite, selectors": {"policies": {"nodeName": {**REWRITE, **SELECTORS}}},
    "rewrite, selectors, unknown nodes allowed": {
        "policies": {"nodeName": {**REWRITE, **SELECTORS, "unknownNodes": "allow"}}
    },
    "rewrite, exemptions, hostile scheduler": {
        "volcanoSchedulerNames": [HOSTILE_SCHEDULER, "volcano"],
        "policies": {
            "nodeName": {
                **REWRITE,
                "exemptUsers": ["ops"],
                "exemptGroups": ["admins"],
                "exemptNamespaces": ["kube-system", "it's"],
                "allowDaemonSets": False,
            }
        },
    },
}


def config_of(name: str) -> Config:
    return config_from_dict(CONFIGS[name])


def assert_same_object(
    config: Config,
    pod: dict[str, Any],
    user: tuple[str, tuple[str, ...]] = ALICE,
) -> dict[str, Any] | Refused:
    webhook = webhook_side(POLICY, config, pod, user)
    in_server = policy_side(POLICY.mutate_in_server(config), config, pod, user)
    assert in_server == webhook, (pod, user)
    return in_server


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_the_rewrite_compiles_as_1_36_writes_it_and_every_call_is_costed(name):
    (mutation,) = POLICY.mutate_in_server(config_of(name))
    assert mutation.name == "node-name-rewrite"
    assert compile_errors(config_of(name), [mutation]) == []
    assert uncosted([mutation]) == []


@pytest.mark.parametrize("changes", [{"action": "deny"}, {"mode": "warn"}, {"mode": "audit"}])
def test_only_an_enforced_rewrite_runs_in_the_server(changes):
    """A policy in the API server cannot warn that it would patch: warn and audit stay on the
    webhook, and deny has nothing to patch."""
    config = config_from_dict({"policies": {"nodeName": {**REWRITE, **changes}}})
    assert POLICY.mutate_in_server(config) == ()


requirement = st.fixed_dictionaries(
    {
        "key": st.sampled_from(["zone", "kubernetes.io/hostname"]),
        "operator": st.sampled_from(["In", "Exists"]),
    }
)
terms = st.lists(
    st.fixed_dictionaries(
        {},
        optional={
            "matchExpressions": st.lists(requirement, max_size=2),
            "matchFields": st.lists(
                st.just({"key": "metadata.name", "operator": "In", "values": ["x"]}), max_size=1
            ),
        },
    ),
    max_size=3,
)
node_affinities = st.fixed_dictionaries(
    {},
    optional={
        REQUIRED: st.fixed_dictionaries({}, optional={"nodeSelectorTerms": terms}),
        "preferredDuringSchedulingIgnoredDuringExecution": st.just(
            [
                {
                    "weight": 1,
                    "preference": {"matchExpressions": [{"key": "z", "operator": "Exists"}]},
                }
            ]
        ),
    },
)
affinities = st.fixed_dictionaries(
    {},
    optional={
        "nodeAffinity": node_affinities,
        "podAntiAffinity": st.just({"requiredDuringSchedulingIgnoredDuringExecution": []}),
    },
)


@st.composite
def pods(draw: Any) -> dict[str, Any]:
    """test_admission_policies' pods (mirror and DaemonSet claims, schedulers, containers),
    in more namespaces, pinned to more nodes, with affinities."""
    pod = copy.deepcopy(draw(admission_pods()))
    pod["metadata"]["namespace"] = draw(st.sampled_from(["team-a", "kube-system", "it's"]))
    pod["spec"].pop("nodeName", None)
    node = draw(st.sampled_from([None, "", *NODE_NAMES, "ghost", "zzz"]))
    if node is not None:
        pod["spec"]["nodeName"] = node
    if draw(st.booleans()):
        pod["spec"]["affinity"] = draw(affinities)
    return pod


@pytest.mark.parametrize("name", sorted(CONFIGS))
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pod=pods(), user=users)
def test_generated_pods_end_as_the_webhook_leaves_them(name, pod, user):
    assert_same_object(config_of(name), pod, user)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CONFIGS))
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pod=pods(), user=users)
def test_many_generated_pods_end_as_the_webhook_leaves_them(name, pod, user):
    assert_same_object(config_of(name), pod, user)


@pytest.mark.parametrize("workload", INSTALLER_WORKLOADS)
def test_volcanos_control_plane_pods_pinned_to_a_node_end_as_the_webhook_leaves_them(workload):
    """Volcano's own pods (its installer's templates, some with affinities and tolerations),
    created with a nodeName as a script that bypasses the scheduler would."""
    for name in CONFIGS:
        for node in ("gpu-1", "web-1"):
            pod = copy.deepcopy(installer_pods()[workload])
            pod["spec"]["nodeName"] = node
            assert_same_object(config_of(name), pod)


def test_a_rewritten_pod_is_pinned_to_its_node_by_affinity_for_the_first_volcano_scheduler():
    pod = pinned_pod("gpu-1")
    pod["spec"]["affinity"] = {
        "nodeAffinity": {
            REQUIRED: {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "Exists"}]},
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["x"]}]},
                ]
            }
        }
    }
    config = config_of("rewrite, exemptions, hostile scheduler")
    rewritten = assert_same_object(config, pod)
    assert isinstance(rewritten, dict)
    pin = {"key": "metadata.name", "operator": "In", "values": ["gpu-1"]}
    assert "nodeName" not in rewritten["spec"]
    assert rewritten["spec"]["schedulerName"] == HOSTILE_SCHEDULER
    assert rewritten["spec"]["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": "zone", "operator": "Exists"}], "matchFields": [pin]},
        {"matchFields": [pin]},
    ]


def test_with_selectors_only_managed_and_unknown_nodes_are_rewritten():
    config = config_of("rewrite, selectors")
    mutations = POLICY.mutate_in_server(config)
    for node, rewritten in (("gpu-1", True), ("ghost", True), ("web-1", False)):
        pod = pinned_pod(node)
        patched = policy_side(mutations, config, pod)
        assert isinstance(patched, dict)
        assert ("nodeName" not in patched["spec"]) == rewritten, node


def test_before_any_state_is_published_nothing_is_rewritten_in_the_server():
    """As the in-server check allows then (parameterNotFoundAction Allow): the pod is left to
    the webhook's validation."""
    config = config_of("rewrite, selectors")
    pod = pinned_pod("gpu-1")
    assert policy_side(POLICY.mutate_in_server(config), config, pod, params=[]) == pod


def test_a_node_in_a_range_still_being_published_is_rewritten_as_the_check_refuses_it():
    """Rewritten exactly where the in-server check would refuse: while the guard writes the
    states, a name in the pending range is refused there, so it is rewritten, as the webhook
    rewrites what it would deny while its node cache is not synced (failClosed)."""
    config = config_of("rewrite, selectors")
    pending = configmap(
        NodeRange("", "", {"web-1": "unmanaged"}, pending=True, name="volcano-guard-node-states-0"),
        "volcano-guard",
    )
    patched = policy_side(
        POLICY.mutate_in_server(config), config, pinned_pod("web-1"), params=[pending]
    )
    assert isinstance(patched, dict) and "nodeName" not in patched["spec"]


def test_the_states_spread_over_several_params_rewrite_once():
    config = config_of("rewrite, selectors")
    states = published_states(config)
    assert len(states) > 1
    patched = policy_side(POLICY.mutate_in_server(config), config, pinned_pod("zzz"), params=states)
    assert isinstance(patched, dict)
    assert patched["spec"]["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"] == [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["zzz"]}]}
    ]
