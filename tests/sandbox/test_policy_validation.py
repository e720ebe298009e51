"""One ValidatingAdmissionPolicy evaluated against one request as validator.go `Validate` does:
match conditions, variables, validations with their messages and reasons, the failure policy,
audit annotations. The Kubernetes quantity library is in scope, as in the apiserver."""

from __future__ import annotations

import pytest

from tests.upstream import upstream_file
from volcano_guard_sandbox.apiserver import matching, policy_validation
from volcano_guard_sandbox.apiserver.policy_validation import (
    MAX_MESSAGE_BYTES,
    AuditAnnotation,
    PolicyDecision,
    PolicyInputs,
    validate,
)


def pod(cpu: str | None = "500m", name: str = "p", scheduler: str = "volcano") -> dict:
    resources = {"requests": {"cpu": cpu}} if cpu is not None else {}
    return {
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"schedulerName": scheduler, "containers": [{"name": "c", "resources": resources}]},
    }


REQUESTS_CPU = {
    "matchConditions": [
        {"name": "volcano", "expression": "object.spec.schedulerName == 'volcano'"}
    ],
    "variables": [
        {
            "name": "missing",
            "expression": "object.spec.containers.filter(c, !has(c.resources.requests) || "
            "!('cpu' in c.resources.requests))",
        }
    ],
    "validations": [
        {
            "expression": "size(variables.missing) == 0",
            "messageExpression": "'Pod \"' + object.metadata.name + '\": container \"' + "
            "variables.missing[0].name + '\" has no cpu request'",
            "reason": "Forbidden",
        },
        {
            "expression": "object.spec.containers.all(c, !has(c.resources.requests) || "
            "!('cpu' in c.resources.requests) || "
            "sign(quantity(c.resources.requests.cpu)) >= 0)",
            "message": "a cpu request is negative",
        },
    ],
}


def test_a_policy_that_finds_nothing_admits_with_one_decision_a_validation():
    result = validate(REQUESTS_CPU, PolicyInputs(object=pod()))
    assert result.decisions == (PolicyDecision("admit", "admit"),) * 2


def test_a_failed_validation_denies_with_its_message_expression_and_reason():
    result = validate(REQUESTS_CPU, PolicyInputs(object=pod(cpu=None)))
    assert result.decisions[0] == PolicyDecision(
        "deny", "deny", 'Pod "p": container "c" has no cpu request', "Forbidden"
    )


def test_without_a_reason_a_denial_is_invalid_and_uses_the_message():
    result = validate(REQUESTS_CPU, PolicyInputs(object=pod(cpu="-1")))
    assert result.decisions[1] == PolicyDecision(
        "deny", "deny", "a cpu request is negative", "Invalid"
    )


def test_a_false_match_condition_means_the_policy_does_not_apply():
    assert (
        validate(REQUESTS_CPU, PolicyInputs(object=pod(cpu=None, scheduler="default"))).decisions
        == ()
    )


@pytest.mark.parametrize(
    ("failure_policy", "action"), [("Fail", "deny"), ("Ignore", "admit"), (None, "deny")]
)
def test_an_expression_that_errors_decides_by_the_failure_policy(failure_policy, action):
    spec = {
        "validations": [
            {"expression": "quantity(object.spec.containers[0].resources.requests.cpu).isInteger()"}
        ]
    }
    if failure_policy:
        spec["failurePolicy"] = failure_policy
    (decision,) = validate(spec, PolicyInputs(object=pod(cpu="lots"))).decisions
    assert (decision.action, decision.evaluation) == (action, "error")
    assert "lots" in decision.message or "quantit" in decision.message


def test_a_match_condition_that_errors_is_one_decision_by_the_failure_policy():
    spec = {
        "matchConditions": [{"name": "x", "expression": "object.nope == 1"}],
        "validations": [{"expression": "true"}, {"expression": "true"}],
    }
    (decision,) = validate(spec, PolicyInputs(object=pod())).decisions
    assert (decision.action, decision.evaluation) == ("deny", "error")


@pytest.mark.parametrize(
    "message_expression",
    ["'two\\nlines'", "'" + "x" * (MAX_MESSAGE_BYTES + 1) + "'", "'   '", "1", "object.nope"],
)
def test_an_unusable_message_expression_falls_back_to_the_message(message_expression):
    spec = {
        "validations": [
            {
                "expression": "false",
                "message": " fallback ",
                "messageExpression": message_expression,
            }
        ]
    }
    (decision,) = validate(spec, PolicyInputs(object=pod())).decisions
    assert decision.message == "fallback"


def test_without_any_message_the_denial_names_the_expression():
    (decision,) = validate(
        {"validations": [{"expression": " 1 == 2 "}]}, PolicyInputs(object=pod())
    ).decisions
    assert decision.message == "failed expression: 1 == 2"


def test_variables_see_the_ones_before_them_and_a_failed_one_fails_its_readers():
    spec = {
        "variables": [
            {
                "name": "cpu",
                "expression": "quantity(object.spec.containers[0].resources.requests.cpu)",
            },
            {"name": "big", "expression": "variables.cpu.isGreaterThan(quantity('1'))"},
        ],
        "validations": [{"expression": "!variables.big", "message": "too big"}],
    }
    assert validate(spec, PolicyInputs(object=pod(cpu="2"))).decisions[0].message == "too big"
    assert validate(spec, PolicyInputs(object=pod(cpu="1"))).decisions[0].action == "admit"
    (failed,) = validate(spec, PolicyInputs(object=pod(cpu="bad"))).decisions
    assert failed.evaluation == "error"


def test_audit_annotations_publish_strings_and_skip_null():
    spec = {
        "auditAnnotations": [
            {"key": "cpu", "valueExpression": "object.spec.containers[0].resources.requests.cpu"},
            {"key": "none", "valueExpression": "null"},
            {"key": "number", "valueExpression": "1"},
        ]
    }
    result = validate(spec, PolicyInputs(object=pod()))
    assert result.audit_annotations[:2] == (
        AuditAnnotation("cpu", "publish", "500m"),
        AuditAnnotation("none", "exclude"),
    )
    assert result.audit_annotations[2].action == "error"


def test_the_transcribed_rules_are_still_the_apiservers():
    """The parts of validator.go this module transcribes, as the 1.32 source says them."""
    source = upstream_file(
        "kubernetes-apiserver", "v0.32.9", "pkg/admission/plugin/policy/validating/validator.go"
    )
    for fact in (
        "decision.Reason = metav1.StatusReasonInvalid",
        'message = fmt.Sprintf("failed expression: %v", strings.TrimSpace(validation.Expression))',
        'strings.ContainsAny(message, "\\n")',
        "if f == v1.Ignore {\n\t\treturn ActionAdmit",
        "case celtypes.NullType:\n\t\t\t\tauditAnnotationResult.Action = "
        "AuditAnnotationActionExclude",
    ):
        assert fact in source, fact


def test_more_than_64_match_conditions_are_refused_as_1_30_refuses_them():
    """admissionregistration/v1 types.go: "There are a maximum of 64 match conditions
    allowed", for a policy and for each webhook (field.TooMany)."""
    types = upstream_file("kubernetes-api", "v0.30.14", "admissionregistration/v1/types.go")
    assert types.count("There are a maximum of 64 match conditions allowed.") == 3
    conditions = [{"name": f"c{i}", "expression": "true"} for i in range(65)]
    assert policy_validation.compile_errors({"matchConditions": conditions}) == [
        "spec.matchConditions: Too many: 65: must have at most 64 items"
    ]
    assert policy_validation.compile_errors({"matchConditions": conditions[:64]}) == []
    hook = {"webhooks": [{"matchConditions": conditions}]}
    assert matching.configuration_errors(hook) == [
        "webhooks[0].matchConditions: Too many: 65: must have at most 64 items"
    ]
