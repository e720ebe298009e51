"""The sandbox runs ValidatingAdmissionPolicies as kube-apiserver 1.30 does: served as objects,
refused when written with an expression that does not compile, and applied to every write after
the mutating webhooks and before the validating ones, with their bindings' params and actions.
The expected messages and codes are those of k8s.io/apiserver pkg/admission/plugin/policy
(validating/dispatcher.go, generic/policy_dispatcher.go), whose v1.30 source is read below."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
import yaml

from tests.sandbox.admission_chain import PODS, Box, pod
from tests.upstream import upstream_file

GROUP = "/apis/admissionregistration.k8s.io/v1"
POLICIES, BINDINGS = (
    f"{GROUP}/validatingadmissionpolicies",
    f"{GROUP}/validatingadmissionpolicybindings",
)
CONFIGMAPS = "/api/v1/namespaces/team-a/configmaps"
POD_RULES = {
    "resourceRules": [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["pods"],
        }
    ]
}
NEEDS_TEAM = {
    "expression": "has(object.metadata.labels) && 'team' in object.metadata.labels",
    "message": "pods need a team label",
}


def policy(name: str = "need-team", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {"matchConstraints": POD_RULES, "validations": [NEEDS_TEAM], **spec},
    }


def binding(
    name: str = "need-team",
    policy_name: str = "need-team",
    actions: tuple[str, ...] = ("Deny",),
    **spec: Any,
) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": policy_name, "validationActions": list(actions), **spec},
    }


async def install(box: Box, *objects: dict[str, Any]) -> None:
    for obj in objects:
        path = POLICIES if obj["kind"] == "ValidatingAdmissionPolicy" else BINDINGS
        status, body, _ = await box.call("POST", path, obj)
        assert status == 201, body


async def test_deny_refuses_with_the_apiservers_message_reason_and_code(box):
    await install(box, policy(), binding())
    status, body, _ = await box.call("POST", PODS, pod("p1"))
    message = (
        "pods \"p1\" is forbidden: ValidatingAdmissionPolicy 'need-team' with binding "
        "'need-team' denied request: pods need a team label"
    )
    assert (status, body["code"], body["reason"], body["message"]) == (422, 422, "Invalid", message)
    assert body["details"]["causes"] == [{"message": message.split("forbidden: ", 1)[1]}]
    assert (await box.call("POST", PODS, pod("p2", team="a")))[0] == 201


def test_the_messages_and_codes_are_the_apiservers():
    dispatcher = upstream_file(
        "kubernetes-apiserver", "v0.30.14", "pkg/admission/plugin/policy/validating/dispatcher.go"
    )
    assert "\"ValidatingAdmissionPolicy '%s' with binding '%s' denied request: %s\"" in dispatcher
    assert (
        "\"Validation failed for ValidatingAdmissionPolicy '%s' with binding '%s': %s\""
        in dispatcher
    )
    assert 'key := "validation.policy.admission.k8s.io/validation_failure"' in dispatcher
    decisions = upstream_file(
        "kubernetes-apiserver",
        "v0.30.14",
        "pkg/admission/plugin/policy/validating/policy_decision.go",
    )
    for reason, code in (("Forbidden", "StatusForbidden"), ("Invalid", "StatusUnprocessable")):
        assert f"case metav1.StatusReason{reason}:\n\t\treturn http.{code}" in decisions
    collect = upstream_file(
        "kubernetes-apiserver",
        "v0.30.14",
        "pkg/admission/plugin/policy/generic/policy_dispatcher.go",
    )
    assert "no params found for policy binding with `Deny` parameterNotFoundAction" in collect


async def test_message_expression_and_reason_set_the_message_and_status(box):
    validation = {
        **NEEDS_TEAM,
        "reason": "Forbidden",
        "messageExpression": "'pod ' + object.metadata.name + ' has no team'",
    }
    await install(box, policy(validations=[validation]), binding())
    status, body, _ = await box.call("POST", PODS, pod("p1"))
    assert (status, body["reason"]) == (403, "Forbidden")
    assert body["message"].endswith("denied request: pod p1 has no team")


async def test_warn_admits_with_a_warning_and_audit_records_the_failure(box):
    await install(box, policy(), binding(actions=("Warn", "Audit")))
    status, _, warnings = await box.call("POST", PODS, pod("p1"))
    assert status == 201
    assert any(
        "Validation failed for ValidatingAdmissionPolicy 'need-team' with binding "
        "'need-team': pods need a team label" in warning
        for warning in warnings
    )
    failure = (await box.audit())[-1]["annotations"][
        "validation.policy.admission.k8s.io/validation_failure"
    ]
    assert json.loads(failure) == [
        {
            "message": "pods need a team label",
            "policy": "need-team",
            "binding": "need-team",
            "expressionIndex": 0,
            "validationActions": ["Warn", "Audit"],
        }
    ]


@pytest.mark.parametrize(
    ("constraints", "name", "labels", "applies"),
    [
        ({"namespaceSelector": {"matchLabels": {"tier": "gold"}}}, "p1", {}, True),
        ({"namespaceSelector": {"matchLabels": {"tier": "silver"}}}, "p1", {}, False),
        ({"objectSelector": {"matchLabels": {"checked": "yes"}}}, "p1", {"checked": "yes"}, True),
        ({"objectSelector": {"matchLabels": {"checked": "yes"}}}, "p1", {}, False),
        ({"excludeResourceRules": POD_RULES["resourceRules"]}, "p1", {}, False),
        (
            {"resourceRules": [{**POD_RULES["resourceRules"][0], "resourceNames": ["p2"]}]},
            "p1",
            {},
            False,
        ),
        (
            {"resourceRules": [{**POD_RULES["resourceRules"][0], "resourceNames": ["p1"]}]},
            "p1",
            {},
            True,
        ),
    ],
)
async def test_match_constraints_choose_the_requests(box, constraints, name, labels, applies):
    await install(box, policy(matchConstraints={**POD_RULES, **constraints}), binding())
    status, _, _ = await box.call("POST", PODS, pod(name, **labels))
    assert status == (422 if applies else 201)


async def test_a_bindings_match_resources_narrow_it(box):
    narrow = {"namespaceSelector": {"matchLabels": {"tier": "silver"}}}
    await install(box, policy(), binding(matchResources=narrow))
    assert (await box.call("POST", PODS, pod("p1")))[0] == 201


PARAMETRIZED = policy(
    paramKind={"apiVersion": "v1", "kind": "ConfigMap"},
    validations=[
        {
            "expression": "object.metadata.labels.team == params.data.team",
            "messageExpression": "'team must be ' + params.data.team",
        }
    ],
)


@pytest.mark.parametrize(
    ("ref", "status", "said"),
    [
        ({"name": "teams", "parameterNotFoundAction": "Deny"}, 422, "team must be a"),
        (
            {"selector": {"matchLabels": {"kind": "teams"}}, "parameterNotFoundAction": "Deny"},
            422,
            "team must be a",
        ),
        (
            {"name": "missing", "parameterNotFoundAction": "Deny"},
            422,
            "failed to configure binding: no params found for policy binding with `Deny` "
            "parameterNotFoundAction",
        ),
        ({"name": "missing", "parameterNotFoundAction": "Allow"}, 201, ""),
    ],
)
async def test_params_come_from_the_bindings_param_ref(box, ref, status, said):
    teams = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "teams", "labels": {"kind": "teams"}},
        "data": {"team": "a"},
    }
    assert (await box.call("POST", CONFIGMAPS, teams))[0] == 201
    await install(box, PARAMETRIZED, binding(paramRef=ref))
    answer, body, _ = await box.call("POST", PODS, pod("p1", team="c"))
    assert answer == status and said in body.get("message", "")
    found = ref.get("name") != "missing"  # a good pod passes, unless a missing param denies
    expected = 201 if found or ref["parameterNotFoundAction"] == "Allow" else 422
    assert (await box.call("POST", PODS, pod("p2", team="a")))[0] == expected


@pytest.mark.parametrize(("failure_policy", "status"), [("Fail", 422), ("Ignore", 201)])
async def test_an_expression_that_errors_follows_the_failure_policy(box, failure_policy, status):
    erroring = {"expression": "object.spec.nosuchfield == 'x'", "message": "m"}
    await install(box, policy(validations=[erroring], failurePolicy=failure_policy), binding())
    answer, body, _ = await box.call("POST", PODS, pod("p1"))
    assert answer == status
    if status == 422:
        # cel-go says "no such key: nosuchfield"; the C++ runtime words it its own way.
        assert (
            "denied request: expression 'object.spec.nosuchfield == 'x'' resulted in error: "
        ) in body["message"] and "nosuchfield" in body["message"]


@pytest.mark.parametrize(
    ("obj", "said"),
    [
        (
            policy(validations=[{"expression": "object.metadata.name.noSuchFunction()"}]),
            "spec.validations[0].expression: Invalid value: "
            '"object.metadata.name.noSuchFunction()": compilation failed',
        ),
        (
            policy(validations=[{"expression": "params.data.x == 'y'"}]),  # no paramKind: no params
            "spec.validations[0].expression: Invalid value",
        ),
        (binding(actions=("Deny", "Warn")), "must not contain both Deny and Warn"),
        (binding(actions=()), "spec.validationActions: Required value"),
        (binding(actions=("Block",)), 'spec.validationActions[0]: Unsupported value: "Block"'),
    ],
)
async def test_what_would_not_compile_or_apply_is_refused_when_written(box, obj, said):
    path = POLICIES if obj["kind"] == "ValidatingAdmissionPolicy" else BINDINGS
    status, body, _ = await box.call("POST", path, obj)
    assert (status, body["reason"]) == (422, "Invalid")
    assert said in body["message"]


async def test_policies_run_after_mutating_and_before_validating_webhooks(box, scripted):
    def answer(request: dict[str, Any]) -> dict[str, Any]:
        metadata = request["object"]["metadata"]
        if metadata["name"] != "labelled-by-webhook" or "team" in (metadata.get("labels") or {}):
            return {"allowed": True}
        patch = [{"op": "add", "path": "/metadata/labels/team", "value": "from-webhook"}]
        return {
            "allowed": True,
            "patchType": "JSONPatch",
            "patch": base64.b64encode(json.dumps(patch).encode()).decode(),
        }

    scripted.answer = answer
    await box.register("mutating", "labeller", box.hook("m.example.com", path="/mutate"))
    await box.register("validating", "checker", box.hook("v.example.com", path="/validate"))
    await install(box, policy(), binding())
    assert (await box.call("POST", PODS, pod("labelled-by-webhook")))[0] == 201
    assert (await box.call("POST", PODS, pod("unlabelled")))[0] == 422
    # The refused pod reached the mutating webhook, never the validating one.
    assert [r["name"] for r in scripted.requests("/validate")] == ["labelled-by-webhook"]
    assert {r["name"] for r in scripted.requests("/mutate")} == {
        "labelled-by-webhook",
        "unlabelled",
    }


async def test_writes_of_policies_are_judged_by_no_policy(box):
    everything = {
        "resourceRules": [
            {"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"], "resources": ["*"]}
        ]
    }
    await install(
        box,
        policy("deny-all", matchConstraints=everything, validations=[{"expression": "false"}]),
        binding("deny-all", "deny-all"),
    )
    assert (await box.call("DELETE", f"{BINDINGS}/deny-all"))[0] == 200


def test_kubectl_prints_the_denial_and_the_warning(kubectl):
    documents = (
        policy(),
        binding(),
        policy("warn-team"),
        binding("warn-team", "warn-team", actions=("Warn",)),
    )
    kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(documents))
    refused = kubectl("run", "p1", "--image=busybox", "-n", "team-a", check=False)
    assert refused.returncode == 1
    assert (
        "ValidatingAdmissionPolicy 'need-team' with binding 'need-team' denied request: "
        "pods need a team label"
    ) in refused.stderr
    kubectl("delete", "validatingadmissionpolicybinding", "need-team")
    warned = kubectl("run", "p1", "--image=busybox", "-n", "team-a")
    assert "Warning: Validation failed for ValidatingAdmissionPolicy 'warn-team'" in warned.stderr
