"""One ValidatingAdmissionPolicy evaluated against one request, as kube-apiserver evaluates it.

Transcribed from k8s.io/apiserver pkg/admission/plugin/policy/validating/validator.go
`Validate` (v1.30 and v1.32 alike): the policy's matchConditions first (a false one: the policy
does not apply; an error: one decision by the failurePolicy), then its variables, then each
validation: an expression that is not true denies with its messageExpression (trimmed; refused
when empty, multi-line or over 5 KiB), else its message, else "failed expression: ...", and its
reason (Invalid unless given); an expression that errors decides by the failurePolicy (Fail:
deny, Ignore: admit). Audit annotations publish a non-empty string, skip null, and are an
error otherwise.

Which policies and bindings apply to a request, and what a binding's validationActions make of
the decisions, are the dispatcher's (not here yet). Expressions see `object`, `oldObject`,
`request`, `params`, `namespaceObject` and `variables` as dynamic values; their types are checked
when the policy is written (cel_check), so a misspelt variable or field is refused there.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from cel_expr_python import cel

from volcano_guard_sandbox.apiserver import cel_check, cel_cost, cel_eval, versions
from volcano_guard_sandbox.apiserver.matching import evaluate, evaluate_conditions
from volcano_guard_sandbox.apiserver.versions import DEFAULT, KubernetesVersion

# k8s.io/apiserver pkg/apis/cel/config.go MaxEvaluatedMessageExpressionSizeBytes.
MAX_MESSAGE_BYTES = 5 * 1024
REASON_INVALID = "Invalid"  # metav1.StatusReasonInvalid, a validation's default reason

Action = Literal["admit", "deny"]
Evaluation = Literal["admit", "deny", "error"]


@dataclass(frozen=True)
class PolicyDecision:
    """policy_decision.go PolicyDecision: one validation's outcome."""

    action: Action
    evaluation: Evaluation
    message: str = ""
    reason: str = ""


@dataclass(frozen=True)
class AuditAnnotation:
    key: str
    action: Literal["publish", "exclude", "error"]
    value: str = ""
    error: str = ""


@dataclass(frozen=True)
class ValidateResult:
    decisions: tuple[PolicyDecision, ...] = ()
    audit_annotations: tuple[AuditAnnotation, ...] = ()


@dataclass(frozen=True)
class PolicyInputs:
    """What a policy's expressions see: the request's objects and attributes, the binding's
    params and the request's namespace."""

    object: Any = None
    old_object: Any = None
    request: Mapping[str, Any] = field(default_factory=dict)
    params: Any = None
    namespace_object: Any = None

    def variables(self) -> dict[str, Any]:
        return {
            "object": self.object,
            "oldObject": self.old_object,
            "request": dict(self.request),
            "params": self.params,
            "namespaceObject": self.namespace_object,
        }


_VARIABLES = ("object", "oldObject", "request", "namespaceObject", "variables")
_Compiled = Callable[[str], cel.Expression]  # an expression -> its program, in one environment


@functools.cache
def _environment(cel_version: tuple[int, int]) -> cel.Env:
    names = (*_VARIABLES, "params")
    return versions.cel_environment({name: cel.Type.DYN for name in names}, cel_version)


@functools.lru_cache(maxsize=512)
def program(expression: str, version: KubernetesVersion = DEFAULT) -> cel.Expression:
    """The compiled expression, as a stored one runs; RuntimeError naming the problem if it
    does not compile."""
    return _environment(version.cel_for_stored_expressions).compile(expression)


@functools.cache
def _compiled_in(version: KubernetesVersion) -> _Compiled:
    """One callable a version: the evaluator caches its plans by (callable, expression)."""
    return functools.partial(program, version=version)


def compile_errors(spec: Mapping[str, Any], version: KubernetesVersion = DEFAULT) -> list[str]:
    """Every expression of the policy that kube-apiserver refuses on write, with its types
    (cel_check), in the CEL environment a new expression has at version:
    `FIELD: Invalid value: "EXPRESSION": compilation failed: ...`."""
    return cel_check.policy_errors(spec, version.cel_for_new_expressions)


def validate(
    spec: Mapping[str, Any],
    inputs: PolicyInputs,
    version: KubernetesVersion = DEFAULT,
    budget_total: int = cel_cost.RUNTIME_BUDGET,
) -> ValidateResult:
    """validator.go Validate: the decisions and audit annotations of policy spec for inputs,
    the validations and their messages sharing a budget of budget_total (its runtimeCELCostBudget
    argument)."""
    fail = spec.get("failurePolicy", "Fail") != "Ignore"
    data = inputs.variables()
    compiled = _compiled_in(version)
    matches, errors = evaluate_conditions(spec.get("matchConditions") or (), compiled, data)
    if not matches:
        return ValidateResult()
    if errors:
        return ValidateResult((_error(fail, "; ".join(errors)),))
    values, costs, reads, variable_errors = _variables(spec.get("variables") or (), data, compiled)
    # filter.go: the validations share one budget, the messages what it leaves; each filter
    # charges a variable once, when it is first read.
    with cel_cost.budget(budget_total) as budget:
        data["variables"] = cel_eval.LazyVariables(values, costs, reads, variable_errors)
        decisions = tuple(
            _decide(validation, data, fail, compiled)
            for validation in spec.get("validations") or ()
        )
    if budget.exhausted:
        return ValidateResult((_error(fail, cel_cost.OUT_OF_BUDGET),))
    with cel_cost.budget(budget.remaining) as messages:
        data["variables"] = cel_eval.LazyVariables(values, costs, reads, variable_errors)
        decisions = tuple(
            _with_message(validation, decision, data, compiled)
            for validation, decision in zip(spec.get("validations") or (), decisions, strict=True)
        )
    if messages.exhausted:
        failed = f"failed messageExpression: {cel_cost.OUT_OF_BUDGET}"
        return ValidateResult(tuple(_error(fail, failed) for _ in decisions))
    with cel_cost.budget(cel_cost.RUNTIME_BUDGET) as audit:  # validator.go: a budget of its own
        data["variables"] = cel_eval.LazyVariables(values, costs, reads, variable_errors)
        annotations = tuple(
            _annotate(annotation, data, fail, compiled)
            for annotation in spec.get("auditAnnotations") or ()
        )
    if audit.exhausted:
        return ValidateResult((_error(fail, cel_cost.OUT_OF_BUDGET),))
    return ValidateResult(decisions, annotations)


_Variables = tuple[dict[str, Any], dict[str, int], dict[str, set[str]], dict[str, str]]


def _variables(declared: Any, data: dict[str, Any], compiled: _Compiled) -> _Variables:
    """Each variable in order, seeing those before it; its own cost and the variables it reads.
    One that fails to evaluate is left out: an expression that reads it then fails, as the
    apiserver's lazy variables fail it."""
    variables: dict[str, Any] = {}
    costs: dict[str, int] = {}
    reads: dict[str, set[str]] = {}
    errors: dict[str, str] = {}
    for variable in declared:
        name = str(variable.get("name", ""))
        lazy = cel_eval.LazyVariables(variables, costs, reads, errors)
        with cel_cost.budget(2**63) as measured:
            value, error = evaluate(
                compiled, str(variable.get("expression", "")), {**data, "variables": lazy}
            )
        costs[name], reads[name] = measured.spent - lazy.total, set(lazy.charged)
        if error:
            errors[name] = error.partition(" resulted in error: ")[2] or error
        else:
            variables[name] = value
    return variables, costs, reads, errors


def _decide(
    validation: Mapping[str, Any], data: Mapping[str, Any], fail: bool, compiled: _Compiled
) -> PolicyDecision:
    expression = str(validation.get("expression", ""))
    outcome, error = evaluate(compiled, expression, data)
    if error:
        return _error(fail, error)
    if outcome is True:
        return PolicyDecision("admit", "admit")
    return PolicyDecision("deny", "deny", "", str(validation.get("reason") or REASON_INVALID))


def _with_message(
    validation: Mapping[str, Any],
    decision: PolicyDecision,
    data: Mapping[str, Any],
    compiled: _Compiled,
) -> PolicyDecision:
    if decision.evaluation != "deny":
        return decision
    return PolicyDecision("deny", "deny", _message(validation, data, compiled), decision.reason)


def _message(validation: Mapping[str, Any], data: Mapping[str, Any], compiled: _Compiled) -> str:
    message = ""
    if expression := validation.get("messageExpression"):
        value, error = evaluate(compiled, str(expression), data)
        if not error and isinstance(value, str):
            message = value.strip()
            if len(message.encode()) > MAX_MESSAGE_BYTES or "\n" in message:
                message = ""
    if not message and validation.get("message"):
        message = str(validation["message"]).strip()
    return message or f"failed expression: {str(validation.get('expression', '')).strip()}"


def _annotate(
    annotation: Mapping[str, Any], data: Mapping[str, Any], fail: bool, compiled: _Compiled
) -> AuditAnnotation:
    key = str(annotation.get("key", ""))
    expression = str(annotation.get("valueExpression", ""))
    value, error = evaluate(compiled, expression, data)
    if error:
        return AuditAnnotation(key, "error" if fail else "exclude", error=error)
    if value is None or (isinstance(value, str) and not value.strip()):
        return AuditAnnotation(key, "exclude")
    if isinstance(value, str):
        return AuditAnnotation(key, "publish", value.strip())
    return AuditAnnotation(
        key,
        "error",
        error=(
            f"valueExpression '{expression}' resulted in unsupported return type: "
            f"{type(value).__name__}. Return type must be either string or null."
        ),
    )


def _error(fail: bool, message: str) -> PolicyDecision:
    """policyDecisionActionForError: Fail denies, Ignore admits."""
    return PolicyDecision("deny" if fail else "admit", "error", message)
