"""ValidatingAdmissionPolicy in the admission chain, as kube-apiserver 1.30 runs it: after the
mutating webhooks, before the validating ones (pkg/kubeapiserver/options/plugins.go
AllOrderedPlugins).

Transcribed from k8s.io/apiserver pkg/admission/plugin/policy:
- which policies apply: every policy some binding names (generic/policy_source.go); its
  matchConstraints (required), then the binding's matchResources if it has any
  (matching/matching.go Matches: namespace and object selectors, excludeResourceRules, then
  resourceRules with resourceNames; generic/policy_matcher.go);
- the params a binding brings (generic/policy_dispatcher.go CollectParams): none without a
  paramKind or a paramRef; by name, or every object a selector picks, in paramRef.namespace or
  the request's; none found and parameterNotFoundAction Deny: a configuration error;
- one validation per param (policy_validation.validate), and what the binding's
  validationActions make of each denial (validating/dispatcher.go Dispatch): Deny refuses with
  the first one, `<resource> "<name>" is forbidden: ValidatingAdmissionPolicy '<policy>' with
  binding '<binding>' denied request: <message>` and the status code of its reason; Warn adds a
  Warning; Audit records the `validation.policy.admission.k8s.io/validation_failure` annotation;
- a configuration error (no matchConstraints, a paramKind the sandbox does not serve, params
  not found under Deny) follows the policy's failurePolicy: Fail refuses, Ignore skips.
Writes of policies and bindings themselves are never judged by policies (generic/plugin.go
admissionResources). The `authorizer` variable is not offered: an expression reading it errors.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from volcano_guard_sandbox.apiserver import label_selectors
from volcano_guard_sandbox.apiserver.admission import Record, forbidden
from volcano_guard_sandbox.apiserver.matching import (
    Attributes,
    cel_request,
    namespace_matches,
    object_matches,
    rule_matches,
    selector_matches,
)
from volcano_guard_sandbox.apiserver.policy_validation import PolicyInputs, validate
from volcano_guard_sandbox.apiserver.store import ApiError
from volcano_guard_sandbox.apiserver.versions import DEFAULT, KubernetesVersion

ADMISSION = "admissionregistration.k8s.io"
# generic/plugin.go admissionResources: no API-written policy judges a write of these.
EXCLUDED = frozenset(
    {
        (ADMISSION, "validatingadmissionpolicies"),
        (ADMISSION, "validatingadmissionpolicybindings"),
        (ADMISSION, "mutatingadmissionpolicies"),
        (ADMISSION, "mutatingadmissionpolicybindings"),
    }
)
VALIDATION_FAILURE = "validation.policy.admission.k8s.io/validation_failure"
MAX_AUDIT_VALUE = 10 * 1024
# policy_decision.go reasonToCode: the reasons a validation may give, and their status codes.
REASON_CODES = {"Forbidden": 403, "Unauthorized": 401, "RequestEntityTooLarge": 413, "Invalid": 422}


class ConfigurationError(Exception):
    """A policy or binding that cannot be applied to this request; its failurePolicy decides."""


@dataclass(frozen=True)
class ParamSource:
    """Where a paramKind's objects are: namespaced or not, and its objects in a namespace
    ("" for a cluster-scoped kind)."""

    namespaced: bool
    objects: Callable[[str], list[dict[str, Any]]]


# (paramKind apiVersion, kind) -> its source; None when the sandbox does not serve it.
ParamLookup = Callable[[str, str], ParamSource | None]


@dataclass(frozen=True)
class _Denial:
    policy: str
    binding: str | None
    message: str
    reason: str = ""


def dispatch(
    attributes: Attributes,
    policies: Sequence[Mapping[str, Any]],
    bindings: Sequence[Mapping[str, Any]],
    params: ParamLookup,
    namespace_object: Mapping[str, Any] | None,
    record: Record,
    version: KubernetesVersion = DEFAULT,
) -> None:
    """Apply every bound policy to the request; ApiError for the first denial."""
    if (attributes.group, attributes.resource) in EXCLUDED:
        return
    by_policy: dict[str, list[Mapping[str, Any]]] = {}
    for binding in bindings:
        by_policy.setdefault(str(_spec(binding).get("policyName", "")), []).append(binding)
    denials: list[_Denial] = []
    for policy in sorted(policies, key=_name):  # Go walks a map; the sandbox walks by name
        if _name(policy) in by_policy:
            denials += _apply(
                policy,
                by_policy[_name(policy)],
                attributes,
                params,
                namespace_object,
                record,
                version,
            )
    if denials:
        raise _refusal(attributes, denials[0])


def _apply(
    policy: Mapping[str, Any],
    bindings: list[Mapping[str, Any]],
    attributes: Attributes,
    params: ParamLookup,
    namespace_object: Mapping[str, Any] | None,
    record: Record,
    version: KubernetesVersion,
) -> list[_Denial]:
    spec, name = _spec(policy), _name(policy)
    fail = spec.get("failurePolicy", "Fail") != "Ignore"
    constraints = spec.get("matchConstraints")
    if not isinstance(constraints, Mapping):
        return (
            [
                _Denial(
                    name,
                    None,
                    "failed to configure policy: policy contained no match "
                    "constraints, a required field",
                )
            ]
            if fail
            else []
        )
    if not matches(constraints, attributes):
        return []
    denials: list[_Denial] = []
    annotations: dict[str, list[str]] = {}
    for binding in sorted(bindings, key=_name):
        resources = _spec(binding).get("matchResources")
        if isinstance(resources, Mapping) and not matches(resources, attributes):
            continue
        try:
            objects = collect_params(
                spec.get("paramKind"), _spec(binding).get("paramRef"), attributes.namespace, params
            )
        except ConfigurationError as exc:
            if fail:
                denials.append(_Denial(name, _name(binding), f"failed to configure binding: {exc}"))
            continue
        for param in objects:
            inputs = PolicyInputs(
                attributes.object,
                attributes.old_object,
                cel_request(attributes),
                param,
                namespace_object,
            )
            result = validate(spec, inputs, version)
            denials += _act(result.decisions, policy, binding, record)
            for annotation in result.audit_annotations:
                if annotation.action == "publish":
                    values = annotations.setdefault(annotation.key, [])
                    value = annotation.value[:MAX_AUDIT_VALUE]
                    if value not in values:
                        values.append(value)
                elif annotation.action == "error":  # failurePolicy Fail: a denial
                    denials.append(_Denial(name, _name(binding), annotation.error))
    for key, values in annotations.items():
        record.annotations[f"{name}/{key}"] = ", ".join(values)
    return denials


def _act(
    decisions: Sequence[Any], policy: Mapping[str, Any], binding: Mapping[str, Any], record: Record
) -> list[_Denial]:
    """What the binding's validationActions make of the policy's denials."""
    denials = []
    actions = [str(a) for a in _spec(binding).get("validationActions") or ()]
    for index, decision in enumerate(decisions):
        if decision.action != "deny":
            continue
        if "Deny" in actions:
            denials.append(
                _Denial(_name(policy), _name(binding), decision.message, decision.reason)
            )
        if "Audit" in actions:
            record.annotations[VALIDATION_FAILURE] = json.dumps(
                [
                    {
                        "message": decision.message,
                        "policy": _spec(binding).get("policyName", ""),
                        "binding": _name(binding),
                        "expressionIndex": index,
                        "validationActions": actions,
                    }
                ],
                separators=(",", ":"),
            )
        if "Warn" in actions:
            record.warnings.append(
                f"Validation failed for ValidatingAdmissionPolicy "
                f"'{_name(policy)}' with binding '{_name(binding)}': "
                f"{decision.message}"
            )
    return denials


def matches(resources: Mapping[str, Any], attributes: Attributes) -> bool:
    """matching.go Matches for a policy's matchConstraints or a binding's matchResources. The
    sandbox serves one version of each resource: matchPolicy Equivalent finds nothing more."""
    if not namespace_matches(resources.get("namespaceSelector"), attributes):
        return False
    if not object_matches(resources.get("objectSelector"), attributes):
        return False
    if _rules_match(resources.get("excludeResourceRules") or (), attributes):
        return False
    rules = resources.get("resourceRules") or ()
    return not rules or _rules_match(rules, attributes)


def _rules_match(rules: Sequence[Mapping[str, Any]], attributes: Attributes) -> bool:
    """NamedRuleWithOperations: the rule matches, and its resourceNames (if any) name it."""
    for rule in rules:
        if rule_matches(rule, attributes):
            names = rule.get("resourceNames") or ()
            if not names or attributes.name in names:
                return True
    return False


def collect_params(
    param_kind: Any, param_ref: Any, namespace: str, lookup: ParamLookup
) -> list[Any]:
    """CollectParams: [None] without a paramKind or a paramRef; else the param objects (none
    found is fine unless parameterNotFoundAction is Deny). ConfigurationError names what is
    wrong."""
    if not isinstance(param_kind, Mapping) or not isinstance(param_ref, Mapping):
        return [None]
    api_version, kind = str(param_kind.get("apiVersion", "")), str(param_kind.get("kind", ""))
    source = lookup(api_version, kind)
    if source is None:
        raise ConfigurationError(f"paramKind kind `{api_version}, Kind={kind}` not known")
    ref_namespace = str(param_ref.get("namespace") or "")
    if source.namespaced:
        if not (ref_namespace or namespace):
            raise ConfigurationError(
                "cannot use namespaced paramRef in policy binding that "
                "matches cluster-scoped resources"
            )
    elif ref_namespace:
        raise ConfigurationError(
            "paramRef.namespace must not be provided for a cluster-scoped `paramKind`"
        )
    name, selector = param_ref.get("name"), param_ref.get("selector")
    if name and selector is not None:
        raise ConfigurationError("paramRef.name and paramRef.selector are mutually exclusive")
    if not name and selector is None:
        raise ConfigurationError("one of name or selector must be provided")
    objects = source.objects((ref_namespace or namespace) if source.namespaced else "")
    found = (
        [obj for obj in objects if _name(obj) == name]
        if name
        else [
            obj
            for obj in objects
            if selector_matches(selector, (obj.get("metadata") or {}).get("labels") or {})
        ]
    )
    if not found and param_ref.get("parameterNotFoundAction") == "Deny":
        raise ConfigurationError(
            "no params found for policy binding with `Deny` parameterNotFoundAction"
        )
    return found


def binding_errors(spec: Mapping[str, Any]) -> list[str]:
    """What the API's validation refuses in a binding that changes how it applies
    (ValidateValidatingAdmissionPolicyBinding): a policyName, validationActions that are
    Deny, Warn or Audit, each once, not Deny with Warn; a paramRef by name or by selector, with
    its parameterNotFoundAction; valid label selectors (label_selectors)."""
    errors = []
    if not spec.get("policyName"):
        errors.append("spec.policyName: Required value")
    actions = spec.get("validationActions")
    if not isinstance(actions, list) or not actions:
        errors.append("spec.validationActions: Required value")
    else:
        for index, action in enumerate(actions):
            if action not in ("Deny", "Warn", "Audit"):
                errors.append(
                    f"spec.validationActions[{index}]: Unsupported value: "
                    f'{json.dumps(action)}: supported values: "Audit", "Deny", '
                    '"Warn"'
                )
            elif actions.index(action) != index:
                errors.append(
                    f"spec.validationActions[{index}]: Duplicate value: {json.dumps(action)}"
                )
        if "Deny" in actions and "Warn" in actions:
            errors.append(
                "spec.validationActions: Invalid value: must not contain both Deny "
                "and Warn (repeating the same validation failure information in the "
                "API response and headers serves no purpose)"
            )
    return errors + param_ref_errors(spec) + label_selectors.binding_errors(spec)


def param_ref_errors(spec: Mapping[str, Any]) -> list[str]:
    """A binding's paramRef (validating and mutating alike): by name or by selector, with its
    parameterNotFoundAction."""
    errors = []
    ref = spec.get("paramRef")
    if isinstance(ref, Mapping):
        if bool(ref.get("name")) == ("selector" in ref):
            errors.append("spec.paramRef: Invalid value: one of name or selector must be set")
        if ref.get("parameterNotFoundAction") not in ("Allow", "Deny"):
            errors.append("spec.paramRef.parameterNotFoundAction: Required value")
    return errors


def _refusal(attributes: Attributes, denial: _Denial) -> ApiError:
    """Dispatch's error: NewForbidden's message, the reason's code, the message as a cause."""
    message = (
        f"ValidatingAdmissionPolicy '{denial.policy}' with binding '{denial.binding}' "
        f"denied request: {denial.message}"
        if denial.binding is not None
        else f"ValidatingAdmissionPolicy '{denial.policy}' denied request: {denial.message}"
    )
    error = forbidden(attributes, message)
    reason = denial.reason or "Invalid"
    details = dict(error.details or {})
    details["causes"] = [{"message": message}]
    return ApiError(REASON_CODES.get(reason, 422), reason, error.message, details)


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = obj.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _name(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata")
    return str(metadata.get("name", "")) if isinstance(metadata, Mapping) else ""
