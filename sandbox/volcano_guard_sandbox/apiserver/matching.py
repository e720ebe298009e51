"""Which admission webhooks kube-apiserver calls for a request, as k8s.io/apiserver v1.32 decides
(pkg/admission/plugin/webhook/generic/webhook.go `ShouldCallHook`, predicates/rules `Matcher`,
predicates/namespace and predicates/object `Matcher`, matchconditions `Match`).

Pure functions of the webhook's configuration and the request's attributes; the calls
themselves are in admission.py.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cel_expr_python import cel

from volcano_guard_sandbox.apiserver import cel_check, cel_cost, cel_eval, label_selectors, versions
from volcano_guard_sandbox.apiserver.cel_cost import COST_LIMIT_EXCEEDED, OUT_OF_BUDGET
from volcano_guard_sandbox.apiserver.versions import DEFAULT, KubernetesVersion

NAMESPACES = ("", "namespaces")  # (group, resource) of Namespace objects: cluster-scoped


@dataclass(frozen=True)
class User:
    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()

    def info(self) -> dict[str, Any]:
        """As an AdmissionRequest's userInfo."""
        info: dict[str, Any] = {"username": self.name}
        if self.uid:
            info["uid"] = self.uid
        if self.groups:
            info["groups"] = list(self.groups)
        return info


@dataclass(frozen=True)
class Attributes:
    """One write as admission sees it (the apiserver's admission.Attributes)."""

    operation: str  # CREATE, UPDATE, DELETE, CONNECT
    group: str
    version: str
    resource: str
    kind: tuple[str, str, str]  # the object's (group, version, kind): Binding for pods/binding
    namespace: str  # for a Namespace object, its own name
    name: str
    user: User
    subresource: str = ""
    object: dict[str, Any] | None = None
    old_object: dict[str, Any] | None = None
    options: dict[str, Any] | None = None
    # The labels of the request's namespace (for a Namespace CREATE/UPDATE, of the object).
    namespace_labels: Mapping[str, str] = field(default_factory=dict)
    dry_run: bool = False

    def request(self, uid: str) -> dict[str, Any]:
        """The AdmissionRequest the apiserver sends (request/admissionreview.go
        CreateV1AdmissionReview); equivalent-resource matching never applies in the sandbox,
        which serves one version of each resource, so kind/resource equal their request* forms."""
        group, version, kind = self.kind
        gvk = {"group": group, "version": version, "kind": kind}
        gvr = {"group": self.group, "version": self.version, "resource": self.resource}
        request: dict[str, Any] = {
            "uid": uid,
            "kind": gvk,
            "resource": gvr,
            "requestKind": gvk,
            "requestResource": gvr,
            "name": self.name,
            "namespace": self.namespace,
            "operation": self.operation,
            "userInfo": self.user.info(),
            "object": self.object,
            "oldObject": self.old_object,
            "dryRun": self.dry_run,
            "options": self.options,
        }
        if self.subresource:
            request["subResource"] = request["requestSubResource"] = self.subresource
        # Go's omitempty drops empty strings; the RawExtensions are null when there is none.
        return {key: value for key, value in request.items() if value != ""}


class ConditionError(Exception):
    """A matchCondition that did not evaluate to a boolean."""


def configured_webhooks(
    configurations: Iterable[Mapping[str, Any]],
) -> list[tuple[str, Mapping[str, Any]]]:
    """(configuration name, webhook) for every webhook, in the order the apiserver calls them:
    the configurations by name (configuration/*_webhook_manager.go sorts them), then each one's
    webhooks in their order."""
    named = sorted(
        ((str((c.get("metadata") or {}).get("name", "")), c) for c in configurations),
        key=lambda pair: pair[0],
    )
    return [
        (name, webhook)
        for name, configuration in named
        for webhook in configuration.get("webhooks") or ()
        if isinstance(webhook, Mapping)
    ]


def exempt(attributes: Attributes) -> bool:
    """Writes of webhook configurations and admission policies are never sent to webhooks
    (rules.go IsExemptAdmissionConfigurationResource; the mutating policies' kinds from 1.32),
    so a webhook cannot lock itself in."""
    group, _, kind = attributes.kind
    return group == "admissionregistration.k8s.io" and kind in (
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
    )


def should_call(
    webhook: Mapping[str, Any], attributes: Attributes, version: KubernetesVersion = DEFAULT
) -> bool:
    """Whether the apiserver sends the request to this webhook. ConditionError when a
    matchCondition fails to evaluate and failurePolicy is Fail (the apiserver then refuses the
    request, 403); with Ignore such a webhook is skipped."""
    if not namespace_matches(webhook.get("namespaceSelector"), attributes):
        return False
    if not object_matches(webhook.get("objectSelector"), attributes):
        return False
    if not any(rule_matches(rule, attributes) for rule in webhook.get("rules") or ()):
        return False
    return conditions_match(webhook, attributes, version)


def rule_matches(rule: Mapping[str, Any], attributes: Attributes) -> bool:
    """rules.go Matcher.Matches: scope, operation, group, version and resource all match."""
    return (
        _scope_matches(rule.get("scope", "*"), attributes)
        and _listed(rule.get("operations"), attributes.operation)
        and _listed(rule.get("apiGroups"), attributes.group)
        and _listed(rule.get("apiVersions"), attributes.version)
        and any(_resource_matches(pattern, attributes) for pattern in rule.get("resources") or ())
    )


def _listed(items: Iterable[str] | None, value: str) -> bool:
    return any(item in ("*", value) for item in items or ())


def _scope_matches(scope: str, attributes: Attributes) -> bool:
    is_namespace = (attributes.group, attributes.resource) == NAMESPACES
    if scope == "*":
        return True
    if scope == "Namespaced":  # a Namespace object is cluster-scoped, though it has a namespace
        return not is_namespace and attributes.namespace != ""
    if scope == "Cluster":
        return is_namespace or attributes.namespace == ""
    return False


def _resource_matches(pattern: str, attributes: Attributes) -> bool:
    resource, _, subresource = pattern.partition("/")
    return resource in ("*", attributes.resource) and subresource in ("*", attributes.subresource)


def namespace_matches(selector: Mapping[str, Any] | None, attributes: Attributes) -> bool:
    """predicates/namespace: a cluster-scoped request other than a Namespace always matches."""
    if not attributes.namespace and (attributes.group, attributes.resource) != NAMESPACES:
        return True
    return selector_matches(selector, attributes.namespace_labels)


def object_matches(selector: Mapping[str, Any] | None, attributes: Attributes) -> bool:
    """predicates/object: the new or the old object's labels match (an empty selector: all)."""
    if not selector or not (selector.get("matchLabels") or selector.get("matchExpressions")):
        return True
    return any(
        obj is not None and selector_matches(selector, _labels(obj))
        for obj in (attributes.object, attributes.old_object)
    )


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector: every matchLabels pair and matchExpression holds; empty: all."""
    selector = selector or {}
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    return all(
        _expression_holds(expression, labels)
        for expression in selector.get("matchExpressions") or ()
    )


def _expression_holds(expression: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, operator = str(expression.get("key")), expression.get("operator")
    values = expression.get("values") or ()
    present = key in labels
    if operator == "In":
        return present and labels[key] in values
    if operator == "NotIn":
        return not present or labels[key] not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    return False  # refused when the configuration is written (see configuration_errors)


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    metadata = obj.get("metadata")
    labels = metadata.get("labels") if isinstance(metadata, Mapping) else None
    return labels if isinstance(labels, Mapping) else {}


def conditions_match(
    webhook: Mapping[str, Any], attributes: Attributes, version: KubernetesVersion = DEFAULT
) -> bool:
    """matchconditions/matcher.go Match for a webhook: any condition false -> skip; else any
    error -> per failurePolicy (Fail: ConditionError; Ignore: skip); else call."""
    conditions = webhook.get("matchConditions") or ()
    if not conditions:
        return True
    variables = {
        "object": attributes.object,
        "oldObject": attributes.old_object,
        "request": cel_request(attributes),
        "namespaceObject": None,  # declared for webhooks too (compile.go), bound to null
    }
    compiled = _compiled_in(version.cel_for_stored_expressions)
    matches, errors = evaluate_conditions(conditions, compiled, variables)
    if not matches:
        return False
    if errors and webhook.get("failurePolicy", "Fail") == "Fail":
        raise ConditionError("; ".join(errors))
    return not errors


def evaluate_conditions(
    conditions: Iterable[Mapping[str, Any]],
    program: Callable[[str], cel.Expression],
    variables: Mapping[str, Any],
) -> tuple[bool, list[str]]:
    """matchconditions/matcher.go Match: (False, ...) when a condition is false, whatever the
    others did; else (True, the errors). Every condition is evaluated first, against one budget
    (filter.go ForInput), whose exhaustion fails them all."""
    results = []
    with cel_cost.budget(cel_cost.MATCH_CONDITIONS_BUDGET):
        for condition in conditions:
            expression = str(condition.get("expression", ""))
            value, error = evaluate(program, expression, variables)
            if error == OUT_OF_BUDGET:
                return True, [error]
            results.append((condition.get("name", ""), value, error))
    errors: list[str] = []
    for name, value, error in results:
        if error:
            errors.append(error)
        elif not isinstance(value, bool):
            errors.append(f"matchCondition {name!r} did not evaluate to a bool: {value}")
        elif not value:
            return False, errors
    return True, errors


def evaluate(
    program: Callable[[str], cel.Expression], expression: str, variables: Mapping[str, Any]
) -> tuple[Any, str]:
    """(expression's plain value, "") or (None, what went wrong). cel_eval evaluates cel-cpp's
    checked AST with cel-go's cost limits (no iteration cap); what it does not model, and the
    words of an evaluation error, come from CEL's C++ runtime (cel-expr-python)."""
    try:
        compiled = program(expression)
    except RuntimeError as exc:  # does not compile: refused when the configuration is written
        return None, f"expression '{expression}' does not compile: {exc}"
    outcome = cel_eval.evaluate_costed(program, expression, variables)
    if outcome is not None and not outcome.error:
        return outcome.value, ""
    if outcome is not None and outcome.error == OUT_OF_BUDGET:
        return None, OUT_OF_BUDGET
    if outcome is not None and (
        outcome.error == COST_LIMIT_EXCEEDED or outcome.error.startswith(cel_eval.VARIABLE_FAILED)
    ):
        return None, f"expression '{expression}' resulted in error: {outcome.error}"
    value = compiled.eval(data=_plain(variables))
    try:
        if value.type() == cel.Type.ERROR:
            return None, f"expression '{expression}' resulted in error: {value.value()}"
        return value.plain_value(), ""
    except (TypeError, SystemError):  # an optional (in a list too), which the binding cannot
        # hand to Python: pybind11 raises TypeError, or SystemError from inside a container
        return None, f"expression '{expression}' resulted in a value the sandbox cannot hold"


def _plain(variables: Mapping[str, Any]) -> dict[str, Any]:
    """The variables as cel-cpp takes them (a LazyVariables as the dict it is)."""
    return {
        key: dict(value) if isinstance(value, cel_eval.LazyVariables) else value
        for key, value in variables.items()
    }


def cel_request(attributes: Attributes) -> dict[str, Any]:
    """The CEL `request` variable: the AdmissionRequest without the objects, which are
    `object` and `oldObject`."""
    request = attributes.request(uid="")
    for key in ("uid", "object", "oldObject"):
        request.pop(key, None)
    return request


# The apiserver's variables for webhook matchConditions, as dynamic values, in its base
# environment (the Kubernetes libraries kubernetes_cel implements) of a version.
_VARIABLES = {name: cel.Type.DYN for name in ("object", "oldObject", "request", "namespaceObject")}


@functools.lru_cache(maxsize=256)
def _program(expression: str, version: tuple[int, int]) -> cel.Expression:
    """The compiled expression; RuntimeError naming the syntax error if it does not compile."""
    return _environment(version).compile(expression)


@functools.cache
def _compiled_in(cel_version: tuple[int, int]) -> Callable[[str], cel.Expression]:
    """One callable a version: the evaluator caches its plans by (callable, expression)."""
    return functools.partial(_program, version=cel_version)


@functools.cache
def _environment(cel_version: tuple[int, int]) -> cel.Env:
    return versions.cel_environment(_VARIABLES, cel_version)


def configuration_errors(
    configuration: Mapping[str, Any], version: KubernetesVersion = DEFAULT
) -> list[str]:
    """What the apiserver's validation refuses in a webhook configuration that would change how
    the sandbox matches: label selectors (label_selectors) and matchConditions that 1.30
    refuses on write, with their types (cel_check)."""
    errors: list[str] = []
    for index, webhook in enumerate(configuration.get("webhooks") or ()):
        if not isinstance(webhook, Mapping):
            errors.append(f"webhooks[{index}]: must be an object")
            continue
        errors += label_selectors.webhook_errors(webhook, f"webhooks[{index}]")
        errors += cel_check.too_many_match_conditions(
            webhook.get("matchConditions"), f"webhooks[{index}].matchConditions"
        )
        for position, condition in enumerate(webhook.get("matchConditions") or ()):
            expression = str(condition.get("expression", ""))
            if error := cel_check.match_condition_error(
                expression, version.cel_for_new_expressions
            ):
                errors.append(
                    f"webhooks[{index}].matchConditions[{position}].expression: "
                    f"Invalid value: {json.dumps(expression)}: {error}"
                )
    return errors
