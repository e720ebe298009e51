"""MutatingAdmissionPolicy in the admission chain, as kube-apiserver 1.36 runs it: the first of
the mutating plugins, before the mutating webhooks (kube-apiserver pkg/kubeapiserver/options/
plugins.go AllOrderedPlugins: MutatingAdmissionPolicy, MutatingAdmissionWebhook,
ValidatingAdmissionPolicy, ValidatingAdmissionWebhook), served where the version plays it
(v1 at 1.36; v1beta1 from 1.34 and v1alpha1 from 1.32 when --runtime-config turns them on).

Transcribed from k8s.io/apiserver v0.36.3 pkg/admission/plugin/policy:
- mutating/plugin.go: CREATE, UPDATE and CONNECT only (a DELETE has no object to mutate);
  generic/plugin.go: writes of the admission policies and their bindings are never mutated;
- generic/policy_dispatcher.go Dispatch: each policy some binding names (policy name order: Go
  walks a map, the sandbox sorts), its matchConstraints, each binding's matchResources (name
  order), its params (policies.collect_params); a configuration error is `failed to configure
  policy|binding: ...`;
- mutating/dispatcher.go dispatchInvocations: the policy's matchConditions (an error is the
  policy's, with reason Invalid), then each mutation in order on the object as the previous left
  it, defaulted again after each (dispatchOne); a mutation's error is the policy's, and the next
  mutation still runs; reinvocation (reinvocation.py, reinvocationcontext.go): on the chain's
  second pass only the IfNeeded policies called before a later change run again;
- the errors the policy's failurePolicy keeps (Fail; Ignore drops them) refuse the request: 403,
  the first one's `policy 'P' with binding 'B' denied request: ...` as message, its reason
  (Invalid for evaluation errors, Forbidden for configuration errors), every one as a cause.

Mutations are JSONPatch or ApplyConfiguration (mutating_policies; the latter merged on the
sandbox's server-side apply schema, apply.py).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from volcano_guard_sandbox.apiserver import label_selectors, policy_metrics
from volcano_guard_sandbox.apiserver.admission import Record, forbidden
from volcano_guard_sandbox.apiserver.matching import Attributes, cel_request, evaluate_conditions
from volcano_guard_sandbox.apiserver.mutating_policies import (
    MutationError,
    apply_configuration_expression,
    apply_json_patch_expression,
    mutation_errors,
)
from volcano_guard_sandbox.apiserver.policies import (
    EXCLUDED,
    ConfigurationError,
    ParamLookup,
    _name,
    _spec,
    collect_params,
    matches,
    param_ref_errors,
)
from volcano_guard_sandbox.apiserver.policy_validation import PolicyInputs, _compiled_in
from volcano_guard_sandbox.apiserver.reinvocation import POLICY_PLUGIN, ReinvocationContext
from volcano_guard_sandbox.apiserver.resources import ADMISSION, ResourceType
from volcano_guard_sandbox.apiserver.store import ApiError, Stored
from volcano_guard_sandbox.apiserver.versions import KubernetesVersion

POLICY_KIND = "MutatingAdmissionPolicy"
BINDING_KIND = "MutatingAdmissionPolicyBinding"
KINDS = (POLICY_KIND, BINDING_KIND)
OPERATIONS = ("CREATE", "UPDATE", "CONNECT")
PATCH_TYPES = ("ApplyConfiguration", "JSONPatch")


@dataclass(frozen=True)
class _Invocation:
    policy: Mapping[str, Any]
    binding: Mapping[str, Any]
    param: Any


@dataclass(frozen=True)
class _PolicyError:
    policy: str
    binding: str | None
    message: str
    reason: str = ""
    fail: bool = True

    def text(self) -> str:
        """generic PolicyError.Error."""
        if self.binding is not None:
            return (
                f"policy '{self.policy}' with binding '{self.binding}' denied request: "
                f"{self.message}"
            )
        return f'policy "{self.policy}" denied request: {self.message}'


def stored(items: Iterable[Stored]) -> list[Mapping[str, Any]]:
    """The stored policies or bindings, each decoded once for as long as it is unchanged (a
    request reads them, never changes them): not per request."""
    return [_decoded(item.raw) for item in items]


@functools.lru_cache(maxsize=1024)
def _decoded(raw: bytes) -> Mapping[str, Any]:
    decoded: Mapping[str, Any] = json.loads(raw)
    return decoded


@functools.cache  # asked on every write
def served_kinds(version: KubernetesVersion) -> tuple[ResourceType, ResourceType] | None:
    """The policy and binding resources this version serves (None: the plugin is off)."""
    served = {r.kind: r for r in version.resources if r.group == ADMISSION and r.kind in KINDS}
    if len(served) < len(KINDS):
        return None
    return served[POLICY_KIND], served[BINDING_KIND]


def admit(
    attributes: Attributes,
    policies: Sequence[Mapping[str, Any]],
    bindings: Sequence[Mapping[str, Any]],
    params: ParamLookup,
    namespace_object: Mapping[str, Any] | None,
    record: Record,
    version: KubernetesVersion,
    reinvocation: ReinvocationContext,
    defaults: Callable[[dict[str, Any]], None] = lambda obj: None,
    builtin: bool = True,
) -> dict[str, Any] | None:
    """One pass of the plugin: the object after every bound policy that applies mutated it;
    ApiError (403) for the errors the policies' failurePolicy keeps."""
    if attributes.operation not in OPERATIONS or (
        (attributes.group, attributes.resource) in EXCLUDED
    ):
        return attributes.object
    errors: list[_PolicyError] = []
    invocations = _invocations(attributes, policies, bindings, params, errors)
    obj = attributes.object
    if invocations:
        obj = _dispatch(
            attributes,
            invocations,
            namespace_object,
            version,
            reinvocation,
            defaults,
            errors,
            builtin,
        )
    kept = [error for error in errors if error.fail]
    if kept:
        raise _refusal(attributes, kept)
    del record  # the plugin records no audit annotations
    return obj


def _invocations(
    attributes: Attributes,
    policies: Sequence[Mapping[str, Any]],
    bindings: Sequence[Mapping[str, Any]],
    params: ParamLookup,
    errors: list[_PolicyError],
) -> list[_Invocation]:
    """generic Dispatch: the (policy, binding, param) the request is for."""
    by_policy: dict[str, list[Mapping[str, Any]]] = {}
    for binding in bindings:
        by_policy.setdefault(str(_spec(binding).get("policyName", "")), []).append(binding)
    invocations = []
    for policy in sorted(policies, key=_name):
        if _name(policy) not in by_policy:
            continue
        spec, fail = _spec(policy), _fails(policy)
        constraints = spec.get("matchConstraints")
        if not isinstance(constraints, Mapping):
            errors.append(
                _PolicyError(
                    _name(policy),
                    None,
                    "failed to configure policy: policy contained no match constraints, "
                    "a required field",
                    fail=fail,
                )
            )
            continue
        if not matches(constraints, attributes):
            continue
        for binding in sorted(by_policy[_name(policy)], key=_name):
            resources = _spec(binding).get("matchResources")
            if isinstance(resources, Mapping) and not matches(resources, attributes):
                continue
            try:
                found = collect_params(
                    spec.get("paramKind"),
                    _spec(binding).get("paramRef"),
                    attributes.namespace,
                    params,
                )
            except ConfigurationError as exc:
                errors.append(
                    _PolicyError(
                        _name(policy),
                        _name(binding),
                        f"failed to configure binding: {exc}",
                        "",
                        fail,
                    )
                )
                continue
            invocations += [_Invocation(policy, binding, param) for param in found]
    return invocations


def _dispatch(
    attributes: Attributes,
    invocations: list[_Invocation],
    namespace_object: Mapping[str, Any] | None,
    version: KubernetesVersion,
    reinvocation: ReinvocationContext,
    defaults: Callable[[dict[str, Any]], None],
    errors: list[_PolicyError],
    builtin: bool,
) -> dict[str, Any] | None:
    """dispatcher.go dispatchInvocations."""
    state = reinvocation.plugin(POLICY_PLUGIN)
    if reinvocation.is_reinvoke and state.output_changed(attributes.object):
        state.require_reinvoking_previously_invoked()
    obj, dirty = attributes.object, False
    request = cel_request(attributes)
    try:
        for invocation in invocations:
            policy, binding = invocation.policy, invocation.binding
            spec, fail = _spec(policy), _fails(policy)
            inputs = PolicyInputs(
                obj, attributes.old_object, request, invocation.param, namespace_object
            )
            condition_error = _conditions(spec, inputs, version)
            if condition_error is None:
                continue
            if condition_error:
                errors.append(
                    _PolicyError(_name(policy), _name(binding), condition_error, "Invalid", fail)
                )
                continue
            key = (_name(policy), _name(binding), _param_key(invocation.param))
            if reinvocation.is_reinvoke and not state.should_reinvoke(key):
                continue
            before = obj
            for mutation in spec.get("mutations") or ():
                if obj is None:  # no object to patch
                    continue
                inputs = replace(inputs, object=obj)
                elapsed = policy_metrics.timer()
                try:
                    obj = _mutate(mutation, spec, inputs, version, builtin)
                except MutationError as exc:
                    policy_metrics.record_mutation(
                        _name(policy), _name(binding), str(exc), elapsed()
                    )
                    errors.append(
                        _PolicyError(_name(policy), _name(binding), str(exc), "Invalid", fail)
                    )
                    continue
                policy_metrics.record_mutation(_name(policy), _name(binding), None, elapsed())
                _check_decodes(obj)
                defaults(obj)
                dirty = True
            if obj != before:
                state.require_reinvoking_previously_invoked()
                reinvocation.should_reinvoke = True
            if spec.get("reinvocationPolicy") == "IfNeeded":
                state.add_previously_invoked(key)
        if dirty:
            state.require_reinvoking_previously_invoked()
            reinvocation.should_reinvoke = True
    finally:
        state.set_last_output(obj)
    return obj


def _conditions(spec: Mapping[str, Any], inputs: PolicyInputs, version: KubernetesVersion) -> Any:
    """matchconditions Matcher.Match with the policy's failurePolicy: None when a condition
    is false (or errs under Ignore), "" to go on, else the error."""
    conditions = spec.get("matchConditions") or ()
    if not conditions:
        return ""
    matched, errors = evaluate_conditions(conditions, _compiled_in(version), inputs.variables())
    if not matched or (errors and spec.get("failurePolicy") == "Ignore"):
        return None
    return "; ".join(errors)


def _mutate(
    mutation: Any,
    spec: Mapping[str, Any],
    inputs: PolicyInputs,
    version: KubernetesVersion,
    builtin: bool,
) -> Any:
    variables = spec.get("variables") or ()
    if mutation.get("patchType") == "ApplyConfiguration":
        expression = str((mutation.get("applyConfiguration") or {}).get("expression", ""))
        return apply_configuration_expression(expression, inputs, variables, version, builtin)
    expression = str((mutation.get("jsonPatch") or {}).get("expression", ""))
    return apply_json_patch_expression(expression, inputs, variables, version)


def _check_decodes(obj: Any) -> None:
    """json_patch.go decodes the patched JSON into the kind's type: one that is not an object,
    or whose metadata is not, does not decode, an internal error whatever the failurePolicy
    (the strict decoding of every other field is not modelled)."""
    if not isinstance(obj, dict) or not isinstance(obj.get("metadata", {}), dict):
        raise ApiError(
            500,
            "InternalError",
            "Internal error occurred: the patched object does not decode: it or its metadata "
            "is not a JSON object",
            {"causes": [{"message": "the patched object or its metadata is not a JSON object"}]},
        )


def _param_key(param: Any) -> tuple[str, str]:
    metadata = param.get("metadata") if isinstance(param, Mapping) else None
    if not isinstance(metadata, Mapping):
        return ("", "")
    return (str(metadata.get("namespace") or ""), str(metadata.get("name") or ""))


def _refusal(attributes: Attributes, errors: list[_PolicyError]) -> ApiError:
    """policy_dispatcher.go: NewForbidden, its message the first error's, its reason the first
    error's if it has one, every error a cause."""
    error = forbidden(attributes, "admission request denied by policy")
    first = errors[0]
    details = dict(error.details or {})
    details["causes"] = [{"message": e.text()} for e in errors]
    return ApiError(403, first.reason or "Forbidden", first.text(), details)


# -- writes of the policies and bindings ----------------------------------------------------------


def policy_errors(spec: Mapping[str, Any], version: KubernetesVersion) -> list[str]:
    """ValidateMutatingAdmissionPolicy, the parts that change how the sandbox runs one:
    matchConstraints with resourceRules, at least one mutation with a supported patchType and
    its expression, failurePolicy and reinvocationPolicy values, then its expressions
    (mutating_policies.mutation_errors) and selectors."""
    errors = []
    constraints = spec.get("matchConstraints")
    if not isinstance(constraints, Mapping):
        errors.append("spec.matchConstraints: Required value")
    elif not constraints.get("resourceRules"):
        errors.append("spec.matchConstraints.resourceRules: Required value")
    mutations = spec.get("mutations")
    if not isinstance(mutations, list) or not mutations:
        errors.append("spec.mutations: Required value")
    for index, mutation in enumerate(mutations if isinstance(mutations, list) else ()):
        errors += _mutation_errors(mutation, f"spec.mutations[{index}]")
    errors += _enum_errors(spec, "failurePolicy", ("Fail", "Ignore"))
    errors += _enum_errors(spec, "reinvocationPolicy", ("IfNeeded", "Never"))
    kind = spec.get("paramKind")
    if isinstance(kind, Mapping):
        for key in ("apiVersion", "kind"):
            if not kind.get(key):
                errors.append(f"spec.paramKind.{key}: Required value")
    return errors + mutation_errors(spec, version) + label_selectors.policy_errors(spec)


def _mutation_errors(mutation: Any, path: str) -> list[str]:
    if not isinstance(mutation, Mapping):
        return [f"{path}: Invalid value: must be an object"]
    patch_type = mutation.get("patchType")
    if not patch_type:
        return [f"{path}.patchType: Required value"]
    if patch_type not in PATCH_TYPES:
        return [
            f"{path}.patchType: Unsupported value: {json.dumps(patch_type)}: supported values: "
            '"ApplyConfiguration", "JSONPatch"'
        ]
    field, other = (
        ("jsonPatch", "applyConfiguration")
        if patch_type == "JSONPatch"
        else ("applyConfiguration", "jsonPatch")
    )
    if other in mutation:
        return [f"{path}.{other}: Forbidden: must not be set when patchType is {patch_type}"]
    patch = mutation.get(field)
    if not isinstance(patch, Mapping):
        return [f"{path}.{field}: Required value"]
    if not str(patch.get("expression") or "").strip():
        return [f"{path}.{field}.expression: Required value"]
    return []


def _enum_errors(spec: Mapping[str, Any], key: str, allowed: tuple[str, ...]) -> list[str]:
    value = spec.get(key)
    if value is None or value in allowed:
        return []
    supported = ", ".join(json.dumps(a) for a in allowed)
    return [f"spec.{key}: Unsupported value: {json.dumps(value)}: supported values: {supported}"]


def binding_errors(spec: Mapping[str, Any]) -> list[str]:
    """ValidateMutatingAdmissionPolicyBinding, the parts that change how it applies: a
    policyName; a paramRef by name or by selector, with its parameterNotFoundAction; valid
    selectors."""
    errors = []
    if not spec.get("policyName"):
        errors.append("spec.policyName: Required value")
    return errors + param_ref_errors(spec) + label_selectors.binding_errors(spec)


def check_write(kind: str, obj: Mapping[str, Any], version: KubernetesVersion) -> None:
    """The write of a MutatingAdmissionPolicy or its binding: 422 for what the API refuses
    (and what the sandbox does not model: the authorizer, whose compile error says so)."""
    spec, name = _spec(obj), _name(obj)
    errors = policy_errors(spec, version) if kind == POLICY_KIND else binding_errors(spec)
    if errors:
        raise ApiError(
            422,
            "Invalid",
            f'{kind}.admissionregistration.k8s.io "{name}" is invalid: {"; ".join(errors)}',
        )


def _fails(policy: Mapping[str, Any]) -> bool:
    return _spec(policy).get("failurePolicy", "Fail") != "Ignore"
