"""The policy table: which checks a config turns on for each phase, in what order, and for
which request kinds."""

import dataclasses
from typing import Any

import pytest
from msgspec.structs import replace

from tests.builders import container, pod, review, volcano_job
from volcano_guard.webhook.config import config_from_dict
from volcano_guard.webhook.evaluation import POLICIES, KindChecks, enabled_checks, evaluate
from volcano_guard.webhook.policies import pod_groups
from volcano_guard.webhook.policies.base import PolicyContext
from volcano_guard.webhook.policies.pod_groups import UNFINISHED_PODS
from volcano_guard.webhook.review import AdmissionRequest, from_document
from volcano_guard.webhook.workloads import POD

EVERYTHING_ON = {
    "policies": {
        "resourceRequests": {"defaults": {"cpu": "1"}},
        "nodeName": {
            "action": "rewrite",
            "bindingGuard": {"mode": "enforce", "allowedBinders": []},
        },
    }
}


def test_enabled_checks_follow_policy_order_with_the_configured_modes():
    config = config_from_dict(
        {
            "policies": {
                "resourceRequests": {"mode": "warn"},
                "nodeName": {"action": "rewrite"},
                "podGroups": {"annotatePodGeneration": True},
            }
        }
    )
    validate = enabled_checks("validate", config).checks
    assert [(c.policy, c.mode) for c in validate] == [
        ("resourceRequests", "warn"),
        ("nodeName", "enforce"),
        ("bindingGuard", "audit"),
        ("podGroupIdGuard", "enforce"),
        ("deleteGuard", "enforce"),
        ("queues", "enforce"),
        ("queueResources", "enforce"),
    ]
    assert [c.check for c in validate] == [p.validate for p in POLICIES if p.validate]
    assert [c.policy for c in enabled_checks("mutate", config).checks] == [
        "resourceRequests",
        "nodeName",
        "podGroups",
        "podGroupGeneration",
        "sidecarInjection",
    ]


def test_policies_turned_off_are_not_among_the_checks():
    config = config_from_dict(
        {
            "policies": {
                "resourceRequests": {"mode": "off"},
                "nodeName": {"mode": "off", "bindingGuard": {"mode": "off"}},
                "podGroups": {"stampGenerationId": False, "deleteGuard": {"mode": "off"}},
                "queues": {"mode": "off"},
                "sidecarInjection": {"mode": "off"},
            }
        }
    )
    for phase in ("validate", "mutate"):
        checks = enabled_checks(phase, config)
        assert checks.checks == () and checks.for_kind(*POD) == KindChecks()


def test_each_kind_gets_the_checks_of_the_policies_naming_it_in_policy_order():
    checks = enabled_checks("validate", config_from_dict({}))
    assert [c.policy for c in checks.for_kind(*POD).checks] == ["resourceRequests", "nodeName"]
    assert [c.policy for c in checks.for_kind("", "Binding").checks] == ["bindingGuard"]
    assert [c.policy for c in checks.for_kind("scheduling.volcano.sh", "PodGroup").checks] == [
        "podGroupIdGuard",
        "deleteGuard",
    ]
    assert [c.policy for c in checks.for_kind("batch.volcano.sh", "Job").checks] == [
        "resourceRequests"
    ]
    assert checks.for_kind("", "ConfigMap") == KindChecks()


def test_a_live_list_is_read_only_for_the_kinds_its_policy_names():
    checks = enabled_checks("validate", config_from_dict({}))
    assert checks.for_kind("scheduling.volcano.sh", "PodGroup").lookups == (UNFINISHED_PODS,)
    assert checks.for_kind(*POD).lookups == ()
    assert checks.for_kind("", "ConfigMap").lookups == ()
    unnamed = dataclasses.replace(pod_groups.DELETE_POLICY, kinds=None)
    anything = enabled_checks("validate", config_from_dict({}), policies=(unnamed,))
    assert anything.for_kind("", "ConfigMap").lookups == (UNFINISHED_PODS,)


def test_a_policy_without_kinds_is_checked_for_every_kind():
    anything = dataclasses.replace(POLICIES[1], name="anyKind", kinds=None)
    checks = enabled_checks("validate", config_from_dict({}), policies=(POLICIES[0], anything))
    assert [c.policy for c in checks.for_kind(*POD).checks] == ["resourceRequests", "anyKind"]
    assert [c.policy for c in checks.for_kind("", "ConfigMap").checks] == ["anyKind"]


def test_evaluate_with_given_checks_runs_only_those():
    config = config_from_dict({})
    request = from_document(review(pod(container("trainer", requests={"cpu": "1"}))))
    context = PolicyContext(config)
    everything = evaluate("validate", request, context)
    assert not everything.decision.allowed
    node_only = enabled_checks(
        "validate", config, policies=[p for p in POLICIES if p.name == "nodeName"]
    )
    assert evaluate("validate", request, context, node_only).decision.allowed


def _requests_each_policy_acts_on() -> list[AdmissionRequest]:
    """Requests of every kind a policy names, each one that policy has something to say about."""
    bound = pod(container()) | {
        "metadata": {
            "name": "p",
            "namespace": "team-a",
            "labels": {"volcano-guard.io/inject": "true"},
            "annotations": {"scheduling.k8s.io/group-name": "pg"},
        }
    }
    bound["spec"]["nodeName"] = "node-1"
    podgroup: dict[str, Any] = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "pg", "namespace": "team-a"},
    }
    stamped = podgroup | {
        "metadata": podgroup["metadata"] | {"annotations": {"volcano-guard.io/generation-id": "x"}}
    }
    binding = review(
        {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": "p", "namespace": "team-a"},
            "target": {"kind": "Node", "name": "node-1"},
        }
    )
    binding["request"]["subResource"] = "binding"
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "team-a"},
        "spec": {"template": {"spec": pod(container())["spec"]}},
    }
    return [
        from_document(body)
        for body in (
            review(bound),
            binding,
            review(podgroup),
            review(podgroup, "DELETE", old=podgroup),
            review(stamped, "UPDATE", old=podgroup),
            review(volcano_job({"worker": [container()]})),
            review(deployment),
            review(
                {
                    "apiVersion": "scheduling.volcano.sh/v1beta1",
                    "kind": "Queue",
                    "metadata": {"name": "q"},
                    "spec": {"parent": "root"},
                }
            ),
        )
    ]


@pytest.mark.parametrize("phase", ["validate", "mutate"])
def test_a_policy_has_nothing_to_say_about_kinds_it_does_not_name(phase):
    """The checks skipped for a kind must be ones that would have answered None to it."""
    config = config_from_dict(EVERYTHING_ON)
    context = PolicyContext(config)
    requests = _requests_each_policy_acts_on()
    for policy in POLICIES:
        check = getattr(policy, phase)
        if check is None or policy.kinds is None:
            continue
        named = [r for r in requests if (r.kind.group, r.kind.kind) in policy.kinds]
        assert any(check(r, context) is not None for r in named), policy.name
        for request in requests:
            kind = (request.kind.group, request.kind.kind)
            if kind not in policy.kinds:
                assert check(request, context) is None, (policy.name, kind)
            # The same object under a kind no policy names: no policy may act on it either.
            renamed = replace(request, kind=replace(request.kind, kind="ConfigMap"))
            assert check(renamed, context) is None, (policy.name, "ConfigMap")
