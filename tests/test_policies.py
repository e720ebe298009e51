"""The policy table: which checks a config turns on for each phase, and in what order."""

from tests.builders import container, pod, review
from webhook.config import config_from_dict
from webhook.policies import POLICIES, enabled_checks, evaluate
from webhook.policies.base import PolicyContext
from webhook.review import parse


def test_enabled_checks_follow_policy_order_with_the_configured_modes():
    config = config_from_dict({"policies": {"resourceRequests": {"mode": "warn"},
                                            "nodeName": {"action": "rewrite"}}})
    validate = enabled_checks("validate", config)
    assert [(c.policy, c.mode) for c in validate] == [
        ("resourceRequests", "warn"), ("nodeName", "enforce"), ("bindingGuard", "audit"),
        ("deleteGuard", "enforce")]
    assert [c.check for c in validate] == [p.validate for p in POLICIES if p.validate]
    assert [c.policy for c in enabled_checks("mutate", config)] == [
        "resourceRequests", "nodeName", "podGroups", "podGroupGeneration", "sidecarInjection"]


def test_policies_turned_off_are_not_among_the_checks():
    config = config_from_dict({"policies": {
        "resourceRequests": {"mode": "off"}, "nodeName": {"mode": "off",
                                                         "bindingGuard": {"mode": "off"}},
        "podGroups": {"stampGenerationId": False, "deleteGuard": {"mode": "off"}},
        "sidecarInjection": {"mode": "off"}}})
    assert enabled_checks("validate", config) == ()
    assert enabled_checks("mutate", config) == ()


def test_evaluate_with_given_checks_runs_only_those():
    config = config_from_dict({})
    request = parse(review(pod(container("trainer", requests={"cpu": "1"}))))
    context = PolicyContext(config)
    everything = evaluate("validate", request, context)
    assert not everything.decision.allowed
    node_only = tuple(c for c in enabled_checks("validate", config) if c.policy == "nodeName")
    assert evaluate("validate", request, context, node_only).decision.allowed
