"""Upstream's admission-plugin cases run against the sandbox's matching (matching.py), each
passed, failed, not modelled or unparsed, reported as runner.py reports the CEL cases.

A case built on a Go fake is run on what the fake stands for: a fake filter's evaluation
result true, false or an error is a matchCondition whose expression is `true`, `false`, or
fails at run time naming the fake's error (`{'a': true}['test error']`). Where the case gives
a cost budget, the fake costs 1 (validator_test.go fakeCelFilter): its expression is one of
cost 1 (`!true`, `'a' + ''`), against the sandbox's cost tracking.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from volcano_guard_sandbox.apiserver import (
    admission,
    cel_cost,
    cel_eval,
    label_selectors,
    matching,
    policies,
    policy_validation,
)
from volcano_guard_sandbox.apiserver.store import OBJECT_META_FIELDS
from volcano_guard_sandbox.conformance import golang, plugin_scenarios, runner, sandbox_cel
from volcano_guard_sandbox.conformance.admission_cases import (
    ADMISSION_SOURCES,
    ANY_STRING,
    AdmissionCase,
    AdmissionExtraction,
    AdmissionSource,
    GoError,
    extract_admission,
)
from volcano_guard_sandbox.conformance.runner import FileReport, Result, error_matches

# What the sandbox does not model, by the need a case carries, and why.
ADMISSION_NOT_MODELLED: Mapping[str, str] = {
    "filter error": "a CEL filter that fails as a whole before any expression is evaluated "
    "(a Go fake's ForInput error): the sandbox's expressions fail one by one",
    "equivalent resources": "matchPolicy Equivalent across API versions of one resource: the "
    "sandbox serves one version of each resource, so there is no equivalent to match",
    "nil selector": "a nil namespace or object selector (Go's labels.Nothing), which the API "
    "never stores: it defaults both to {}, as the sandbox reads them",
    "authorizer": "authorizer checks: the sandbox has no authorizer to ask (refused when a "
    "policy that uses one is written)",
    **plugin_scenarios.NOT_MODELLED,
}

# Go's wildcard rule, whose other parts the test of one part leaves open.
_OPEN_RULE = {
    "apiGroups": ["*"],
    "apiVersions": ["*"],
    "operations": ["*"],
    "resources": ["*/*"],
    "scope": "*",
}
_PART_FIELDS = {
    "group": ("Rule", "APIGroups", "apiGroups"),
    "version": ("Rule", "APIVersions", "apiVersions"),
    "operation": ("", "Operations", "operations"),
    "resource": ("Rule", "Resources", "resources"),
    "scope": ("Rule", "Scope", "scope"),
}


def sandbox_rule(part: str, rule: Mapping[str, Any]) -> dict[str, Any]:
    """The RuleWithOperations as a webhook's rule, open on every part but the one tested (Go's
    unset part: nil, which matches nothing, but a nil scope matches all)."""
    inner, go_field, json_field = _PART_FIELDS[part]
    holder = rule.get(inner) or {} if inner else rule
    value = holder.get(go_field)
    opened = dict(_OPEN_RULE)
    if value is None:
        opened.pop(json_field) if part == "scope" else opened.update({json_field: []})
    else:
        opened[json_field] = value
    return opened


def sandbox_attributes(go: Mapping[str, Any]) -> matching.Attributes:
    group, version = go.get("group", ""), go.get("version", "")
    return matching.Attributes(
        operation=go.get("operation", "CREATE"),
        group=group,
        version=version,
        resource=go.get("resource", ""),
        kind=(go.get("kind group", group), go.get("kind version", version), go.get("kind", "")),
        namespace=go.get("namespace", ""),
        name=go.get("name", ""),
        user=matching.User(""),
        subresource=go.get("subresource", ""),
        object=go.get("object"),
        old_object=go.get("oldObject"),
    )


def _rule_part(case: AdmissionCase) -> tuple[bool, str, str]:
    rule = sandbox_rule(case.inputs["part"], case.inputs["rule"])
    matched = matching.rule_matches(rule, sandbox_attributes(case.inputs["attributes"]))
    return matched is case.expected, _matched(case.expected), f"{_matched(matched)} by {rule}"


def _matched(value: bool) -> str:
    return "matches" if value else "does not match"


def condition_expression(evaluation: Mapping[str, Any]) -> str:
    """The expression that evaluates as the fake's EvaluationResult: its value (a bool, a
    string, null), or an error that names the fake's words (a key missing from a map)."""
    if (error := evaluation.get("Error")) is not None:
        text = error.text if isinstance(error, GoError) else ""
        return f"{{'a': true}}[{golang.quote(text)}]"
    value = evaluation.get("EvalResult")
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return golang.quote(value)
    if value is None:
        return "null"
    raise ValueError(f"an evaluation result of {value!r}")


# matcher_test.go's fakeAttr: a CREATE of default/foo, of no kind.
_FAKE_ATTRIBUTES = {"operation": "CREATE", "namespace": "default", "name": "foo"}


def _match_conditions(case: AdmissionCase) -> tuple[bool, str, str]:
    """matcher.go Match. Which condition failed (returnedName) the sandbox does not report: it
    reaches no decision, so only the match and the error are compared."""
    conditions = [
        {
            "name": (evaluation.get("ExpressionAccessor") or {}).get("Name", ""),
            "expression": condition_expression(evaluation),
        }
        for evaluation in case.inputs["evaluations"]
    ]
    webhook: dict[str, Any] = {"matchConditions": conditions}
    if case.inputs.get("failurePolicy"):
        webhook["failurePolicy"] = case.inputs["failurePolicy"]
    expected_error, expected_match = case.expected["error"], case.expected["matches"]
    try:
        matched = matching.conditions_match(webhook, sandbox_attributes(_FAKE_ATTRIBUTES))
    except matching.ConditionError as exc:
        passed = bool(expected_error) and expected_error in str(exc)
        return passed, _conditions_expected(case), f"error: {exc}"
    passed = not expected_error and matched is expected_match
    return passed, _conditions_expected(case), _matched(matched)


def _conditions_expected(case: AdmissionCase) -> str:
    if case.expected["error"]:
        return f"error: {case.expected['error']}"
    return _matched(case.expected["matches"])


def validate_spec(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """The policy whose expressions evaluate as TestValidate's fake filters and matcher."""
    spec: dict[str, Any] = {}
    if inputs.get("failPolicy"):
        spec["failurePolicy"] = inputs["failPolicy"]
    if matcher := inputs.get("matcher"):
        error = matcher.get("error")
        result = {"Error": error} if error else {"EvalResult": bool(matcher.get("matches"))}
        spec["matchConditions"] = [
            {"name": "placeholder", "expression": condition_expression(result)}
        ]
    messages = inputs.get("messageEvaluations") or []
    costed = bool(inputs.get("costBudget"))
    spec["validations"] = [
        _validation(evaluation, messages[index] if index < len(messages) else {}, costed)
        for index, evaluation in enumerate(inputs.get("evaluations") or [])
    ]
    spec["auditAnnotations"] = [
        {
            "key": (evaluation.get("ExpressionAccessor") or {}).get("Key", ""),
            "valueExpression": condition_expression(evaluation),
        }
        for evaluation in inputs.get("auditEvaluations") or []
    ]
    return spec


def costing_one(expression: str) -> str:
    """An expression of the same value costing 1 (a bool's negated negation, a string's
    concatenation: cel_cost), for a fake filter that costs 1; a string whose value the case
    says does not matter (ANY_STRING) becomes a short one."""
    if expression in ("true", "false"):
        return "!" + ("false" if expression == "true" else "true")
    if expression == golang.quote(ANY_STRING):
        return "'a' + ''"
    raise ValueError(f"no expression of cost 1 for {expression}")


def _validation(
    evaluation: Mapping[str, Any], message: Mapping[str, Any], costed: bool = False
) -> dict[str, Any]:
    accessor = evaluation.get("ExpressionAccessor") or {}
    written = costing_one if costed else str
    validation: dict[str, Any] = {"expression": written(condition_expression(evaluation))}
    if accessor.get("Message"):
        validation["message"] = accessor["Message"]
    if accessor.get("Reason"):
        validation["reason"] = accessor["Reason"]
    if "EvalResult" in message or "Error" in message:  # `{}`: no messageExpression
        validation["messageExpression"] = written(condition_expression(message))
    return validation


def _validate(case: AdmissionCase) -> tuple[bool, str, str]:
    """validator.go Validate. A decision's message must contain the expected one (Go's
    strings.Contains), where the fake's `failed expression: <Expression>` names the expression
    that stands for it; an audit annotation's error must contain the fake's words."""
    spec = validate_spec(case.inputs)
    budget = case.inputs.get("costBudget") or cel_cost.RUNTIME_BUDGET
    result = policy_validation.validate(spec, policy_validation.PolicyInputs(), budget_total=budget)
    expected_decisions = [
        _expected_decision(decision, case.inputs.get("evaluations") or [], index, spec)
        for index, decision in enumerate(case.expected["decisions"])
    ]
    got_decisions = [(d.action, d.message, d.reason) for d in result.decisions]
    expected_annotations = [
        (a.get("Action", ""), a.get("Value", ""), a.get("Error", ""))
        for a in case.expected["audit annotations"]
    ]
    got_annotations = [(a.action, a.value, a.error) for a in result.audit_annotations]
    passed = (
        len(got_decisions) == len(expected_decisions)
        and all(map(_decision_matches, expected_decisions, got_decisions))
        and len(got_annotations) == len(case.inputs.get("auditEvaluations") or [])
        and all(map(_annotation_matches, expected_annotations, got_annotations))
    )
    expected = f"decisions {expected_decisions}, annotations {expected_annotations}"
    return passed, expected, f"decisions {got_decisions}, annotations {got_annotations}"


def _expected_decision(
    decision: Mapping[str, Any], evaluations: Sequence[Any], index: int, spec: Mapping[str, Any]
) -> tuple[str, str, str]:
    message = decision.get("Message", "")
    if index < len(evaluations):
        written = (evaluations[index].get("ExpressionAccessor") or {}).get("Expression", "")
        if written and message == f"failed expression: {written}":
            message = f"failed expression: {spec['validations'][index]['expression']}"
    return decision.get("Action", ""), message, decision.get("Reason", "")


def _decision_matches(expected: tuple[str, str, str], got: tuple[str, str, str]) -> bool:
    return expected[0] == got[0] and expected[1] in got[1] and expected[2] == got[2]


def _annotation_matches(expected: tuple[str, str, str], got: tuple[str, str, str]) -> bool:
    return expected[:2] == got[:2] and expected[2] in got[2] and bool(expected[2]) == bool(got[2])


def sandbox_rule_of(named: Mapping[str, Any]) -> dict[str, Any]:
    """A NamedRuleWithOperations as the API's JSON; Go's nil lists match nothing, its nil scope
    everything."""
    with_operations = named.get("RuleWithOperations") or {}
    rule = with_operations.get("Rule") or {}
    converted = {
        "operations": with_operations.get("Operations") or [],
        "apiGroups": rule.get("APIGroups") or [],
        "apiVersions": rule.get("APIVersions") or [],
        "resources": rule.get("Resources") or [],
        "resourceNames": named.get("ResourceNames") or [],
    }
    if rule.get("Scope"):
        converted["scope"] = rule["Scope"]
    return converted


def sandbox_selector(selector: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if selector is None:
        return None
    return {
        "matchLabels": selector.get("MatchLabels") or {},
        "matchExpressions": [
            {"key": e.get("Key"), "operator": e.get("Operator"), "values": e.get("Values") or []}
            for e in selector.get("MatchExpressions") or []
        ],
    }


def sandbox_match_resources(criteria: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "namespaceSelector": sandbox_selector(criteria.get("NamespaceSelector")),
        "objectSelector": sandbox_selector(criteria.get("ObjectSelector")),
        "resourceRules": [sandbox_rule_of(r) for r in criteria.get("ResourceRules") or []],
        "excludeResourceRules": [
            sandbox_rule_of(r) for r in criteria.get("ExcludeResourceRules") or []
        ],
        "matchPolicy": criteria.get("MatchPolicy") or "Exact",
    }


def _match_resources(case: AdmissionCase) -> tuple[bool, str, str]:
    """matching.go Matches (the matched kind and resource are the request's: the sandbox never
    converts, so only whether it matches is compared). An expected error is a selector Go cannot
    parse at admission; kube-apiserver refuses such a selector when the policy is written
    (validateMatchResources), so the case passes if the sandbox refuses it on write too, with
    upstream's words in its refusal."""
    resources = sandbox_match_resources(case.inputs["criteria"])
    if error := case.expected["error"]:
        refusal = "; ".join(label_selectors.policy_errors({"matchConstraints": resources}))
        if refusal:
            return error in refusal, f"error: {error}", f"refused when written: {refusal}"
    matched = policies.matches(resources, sandbox_attributes(case.inputs["attributes"]))
    if error:
        return False, f"error: {error}", f"{_matched(matched)} by {resources}"
    expected = case.expected["matches"]
    return matched is expected, _matched(expected), f"{_matched(matched)} by {resources}"


def sandbox_webhook(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """The ValidatingWebhook as the API's JSON; its matchConditions, if any, become one
    condition that evaluates as the fake matcher answers (matchResult, or matchError)."""
    go = inputs["webhook"]
    webhook: dict[str, Any] = {
        "namespaceSelector": sandbox_selector(go.get("NamespaceSelector")),
        "objectSelector": sandbox_selector(go.get("ObjectSelector")),
        "rules": [sandbox_rule_of({"RuleWithOperations": rule}) for rule in go.get("Rules") or []],
        "matchPolicy": go.get("MatchPolicy") or "Exact",
    }
    if conditions := go.get("MatchConditions"):
        error = inputs.get("match error")
        result = {"Error": error} if error else {"EvalResult": inputs["match result"]}
        name = conditions[0].get("Name", "")
        webhook["matchConditions"] = [{"name": name, "expression": condition_expression(result)}]
    return webhook


def _should_call(case: AdmissionCase) -> tuple[bool, str, str]:
    """webhook.go ShouldCallHook. A matchCondition's error is refused as the API refuses it
    (admission.forbidden): the words before the cause must be upstream's, and the cause must
    name the fake's error."""
    webhook = sandbox_webhook(case.inputs)
    attributes = sandbox_attributes(case.inputs["attributes"])
    expected_error = case.expected["error"]
    try:
        called = matching.should_call(webhook, attributes)
    except matching.ConditionError as exc:
        refusal = admission.forbidden(attributes, str(exc)).message
        prefix, _, cause = expected_error.partition(" is forbidden: ")
        passed = bool(expected_error) and refusal.startswith(f"{prefix} is forbidden: ")
        return passed and cause in refusal, f"error: {expected_error}", f"error: {refusal}"
    expected = "called" if case.expected["call"] else "not called"
    got = "called" if called else "not called"
    if expected_error:
        return False, f"error: {expected_error}", got
    return called is case.expected["call"], expected, f"{got} by {webhook}"


def _namespace_object(namespace: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """filter.go CreateNamespaceObject: the namespace's status, spec and the metadata fields it
    copies (not managedFields, not ownerReferences)."""
    if namespace is None:
        return None
    metadata = namespace.get("metadata") or {}
    kept = {key: value for key, value in metadata.items() if key in _NAMESPACE_METADATA}
    return {"metadata": kept, "spec": namespace.get("spec"), "status": namespace.get("status")}


# CreateNamespaceObject copies every metadata field but these.
_NAMESPACE_METADATA = OBJECT_META_FIELDS - {"ownerReferences", "managedFields", "selfLink"}


def _filter(case: AdmissionCase) -> tuple[bool, str, str]:
    """filter.go ForInput: each expression compiled as a policy's is when written (refused:
    an error, as the filter reports a compilation error per expression), else evaluated in the
    sandbox's policy environment; a bool result or an error containing upstream's words (a
    compilation error: any refusal on write; else by reason, runner.error_matches)."""
    attributes = sandbox_attributes(case.inputs["attributes"])
    variables = {
        "object": attributes.object,
        "oldObject": attributes.old_object,
        "request": matching.cel_request(attributes),
        "namespaceObject": _namespace_object(case.inputs["namespace"]),
        "variables": {},
    }
    if case.inputs["has params"]:
        variables["params"] = case.inputs["params"]
    got: list[tuple[str, Any]] = []
    for expression in case.inputs["expressions"]:
        refused = sandbox_cel.policy_compile_error(expression, case.inputs["has params"], False)
        if refused:
            got.append(("compile error", refused))
            continue
        value, error = _evaluate(expression, variables, case.inputs["per call limit"])
        got.append(("error", error) if error else ("value", value))
    expected = [_expected_result(result) for result in case.expected]
    passed = len(got) == len(expected) and all(map(_result_matches, expected, got))
    return passed, str(expected), str(got)


def _evaluate(
    expression: str, variables: Mapping[str, Any], per_call_limit: int
) -> tuple[Any, str]:
    """The expression's value or error, under the case's per-call cost limit (celgo.CostLimit)
    when it sets one: then by the sandbox's evaluator that counts cost (cel_eval)."""
    if not per_call_limit:
        return matching.evaluate(policy_validation.program, expression, variables)
    node = cel_eval.plan_of(policy_validation.program, expression)
    if node is None:
        return None, "not modelled by the sandbox's cost-counting evaluator"
    outcome = cel_eval.run(node, dict(variables), per_call_limit)
    return outcome.value, outcome.error


def _expected_result(result: Mapping[str, Any]) -> tuple[str, Any]:
    error = result.get("Error")
    if isinstance(error, GoError):
        return "error", error.text
    return "value", result.get("EvalResult")


def _result_matches(expected: tuple[str, Any], got: tuple[str, Any]) -> bool:
    kind, value = expected
    if kind == "value":
        return got == ("value", value)
    if "compil" in value:
        return got[0] == "compile error"
    return got[0] != "value" and error_matches(value, False, got[1])


RUNS: Mapping[str, Callable[[AdmissionCase], tuple[bool, str, str]]] = {
    "rule part": _rule_part,
    "match conditions": _match_conditions,
    "validate": _validate,
    "match resources": _match_resources,
    "should call": _should_call,
    "filter": _filter,
    "transcribed": lambda case: plugin_scenarios.verdict(case.function),
}


def not_modelled_reason(case: AdmissionCase) -> str:
    return "; ".join(ADMISSION_NOT_MODELLED[need] for need in sorted(case.needs))


def run_case(case: AdmissionCase) -> Result:
    base = {"file": case.file, "id": case.id, "expression": case.kind}
    if reason := not_modelled_reason(case):
        return Result(**base, verdict="not modelled", category=reason)
    passed, expected, got = RUNS[case.kind](case)
    return Result(
        **base,
        verdict="passed" if passed else "failed",
        expected=expected,
        got=got,
        category="" if passed else case.kind,
    )


def run_extraction(extraction: AdmissionExtraction) -> FileReport:
    return runner.run_extraction(extraction, run_case)


def run_admission_folder(
    folder: Path, sources: Sequence[AdmissionSource] = ADMISSION_SOURCES
) -> list[FileReport]:
    """Every admission source under folder; a missing file is an OSError naming it."""
    return [
        run_extraction(extract_admission(source, (folder / source.file).read_text("utf-8")))
        for source in sources
    ]
