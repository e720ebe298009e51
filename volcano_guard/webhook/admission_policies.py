"""The guard's denies as ValidatingAdmissionPolicies (admissionregistration.k8s.io/v1, Kubernetes
1.30+): what the enabled policies can decide from the request alone (Policy.in_server), each a
policy and its binding, enforced inside the API server with no network hop and no process that
can be down. The mode sets the binding's validationActions: enforce Deny, warn Warn, audit Audit.

Its pod mutations likewise as MutatingAdmissionPolicies (Policy.mutate_in_server; v1 from
Kubernetes 1.36, v1beta1 in 1.34 and 1.35 where the operator turned the beta on): each a JSONPatch
mutation, reinvoked when a later mutation changes the pod, failing as the webhook registration
it replaces fails.

`volcano-guard manifests` prints them after the webhook configurations when the config's
`validatingAdmissionPolicies` / `mutatingAdmissionPolicies` are true (the defaults) and the
cluster serves them (PolicyApis). They judge the namespaces the webhook judges.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

from volcano_guard.webhook.config import Config
from volcano_guard.webhook.evaluation import POLICIES
from volcano_guard.webhook.policies.base import InServerCheck, InServerMutation, Rule
from volcano_guard.webhook.registrations import unjudged_namespaces

GROUP = "admissionregistration.k8s.io"
API_VERSION = f"{GROUP}/v1"
PREFIX = "volcano-guard-"
ACTIONS = {"enforce": ["Deny"], "warn": ["Warn"], "audit": ["Audit"]}

ApiVersion = Literal["v1", "v1beta1"]


class PolicyApis(NamedTuple):
    """Which in-server policy kinds a cluster serves, each at which version of
    admissionregistration.k8s.io (None: not served). The default: both at v1 (Kubernetes
    1.36+)."""

    validating: ApiVersion | None = "v1"
    mutating: ApiVersion | None = "v1"


NEWEST = PolicyApis()  # what Kubernetes 1.36 serves
VALIDATING_FROM = (1, 30)  # ValidatingAdmissionPolicy v1
MUTATING_FROM = (1, 36)  # MutatingAdmissionPolicy v1
MUTATING_BETA_FROM = (1, 34)  # v1beta1, off unless kube-apiserver's --runtime-config turns it on


def apis_at(version: tuple[int, int]) -> PolicyApis:
    """What Kubernetes `version` can serve: its v1beta1 MutatingAdmissionPolicy only where the
    operator turned the beta on, which the config says (mutatingAdmissionPolicyBeta)."""
    mutating: ApiVersion | None = None
    if version >= MUTATING_FROM:
        mutating = "v1"
    elif version >= MUTATING_BETA_FROM:
        mutating = "v1beta1"
    return PolicyApis("v1" if version >= VALIDATING_FROM else None, mutating)


def installed_apis(config: Config, served: PolicyApis) -> PolicyApis:
    """What of `served` the config calls for: each kind only where its key is true, and
    v1beta1 MutatingAdmissionPolicies only with mutatingAdmissionPolicyBeta."""
    validating = served.validating if config.validatingAdmissionPolicies else None
    mutating = served.mutating if config.mutatingAdmissionPolicies else None
    if mutating == "v1beta1" and not config.mutatingAdmissionPolicyBeta:
        mutating = None
    return PolicyApis(validating, mutating)


def admission_policies(
    config: Config, namespace: str = "volcano-guard", mutating_version: ApiVersion = "v1"
) -> list[dict[str, Any]]:
    """A ValidatingAdmissionPolicy and its binding for every in-server check of every enabled
    policy, then a MutatingAdmissionPolicy (at mutating_version) and its binding for every
    in-server mutation, for the guard installed in `namespace`; none of a kind the config turns
    off."""
    objects: list[dict[str, Any]] = []
    for policy in POLICIES:
        mode = policy.mode(config)
        if mode == "off" or not config.validatingAdmissionPolicies:
            continue
        for check in policy.in_server(config):
            objects += [_policy(check, namespace), _binding(check, ACTIONS[mode], namespace)]
    if config.mutatingAdmissionPolicies:
        objects += mutating_policies(config, namespace, mutating_version)
    return objects


def mutating_policies(
    config: Config, namespace: str = "volcano-guard", api_version: ApiVersion = "v1"
) -> list[dict[str, Any]]:
    """A MutatingAdmissionPolicy and its binding for every in-server mutation of every policy
    the config enforces (a policy that only warns or audits cannot tell from the API server
    what it would patch: Policy.mutate_in_server gives none)."""
    objects: list[dict[str, Any]] = []
    for policy in POLICIES:
        for mutation in policy.mutate_in_server(config):
            objects += [
                _mutating_policy(mutation, namespace, api_version),
                _mutating_binding(mutation, namespace, api_version),
            ]
    return objects


def _match_constraints(rules: tuple[Rule, ...], namespace: str) -> dict[str, Any]:
    return {
        "namespaceSelector": unjudged_namespaces(namespace),
        "resourceRules": [
            {
                "apiGroups": [rule.api_group],
                "apiVersions": [rule.api_version],
                "operations": list(rule.operations),
                "resources": list(rule.resources),
            }
            for rule in rules
        ],
    }


def _shared_spec(check: InServerCheck | InServerMutation, namespace: str) -> dict[str, Any]:
    """What both kinds of policy say alike: what they match, their params and variables."""
    spec: dict[str, Any] = {
        "matchConstraints": _match_constraints(check.rules, namespace),
        "matchConditions": [{"name": "guarded", "expression": check.condition}],
    }
    if check.params_label:
        spec["paramKind"] = {"apiVersion": "v1", "kind": "ConfigMap"}
    if check.variables:
        spec["variables"] = [
            {"name": name, "expression": expression} for name, expression in check.variables
        ]
    return spec


def _policy(check: InServerCheck, namespace: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"failurePolicy": "Fail", **_shared_spec(check, namespace)}
    spec["validations"] = [
        {"expression": expression, "messageExpression": message, "reason": "Forbidden"}
        for expression, message in check.validations
    ]
    return {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": PREFIX + check.name},
        "spec": spec,
    }


def _binding(check: InServerCheck, actions: list[str], namespace: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"policyName": PREFIX + check.name, "validationActions": actions}
    if check.params_label:
        spec["paramRef"] = _param_ref(check.params_label, namespace)
    return {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": PREFIX + check.name},
        "spec": spec,
    }


def _param_ref(label: tuple[str, str], namespace: str) -> dict[str, Any]:
    key, value = label
    # Allow: the API server collects params before it evaluates matchConditions, so Deny
    # would refuse every pod the rules match (any pod CREATE) while none are published.
    return {
        "namespace": namespace,
        "selector": {"matchLabels": {key: value}},
        "parameterNotFoundAction": "Allow",
    }


def _mutating_policy(
    mutation: InServerMutation, namespace: str, api_version: ApiVersion
) -> dict[str, Any]:
    failure_policy = "Ignore" if mutation.fails_open else "Fail"
    spec: dict[str, Any] = {"failurePolicy": failure_policy, **_shared_spec(mutation, namespace)}
    patch = {"expression": mutation.json_patch}
    spec["mutations"] = [{"patchType": "JSONPatch", "jsonPatch": patch}]
    # IfNeeded: each mutation patches only what is missing from the object as it then is (an
    # empty list when nothing is), so a second run is harmless, and it gives a container a
    # later mutation adds (Volcano's mutatepod, a mesh's injector, the guard's own sidecar)
    # the same defaults. The API server reinvokes at most once.
    spec["reinvocationPolicy"] = "IfNeeded"
    return {
        "apiVersion": f"{GROUP}/{api_version}",
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": PREFIX + mutation.name},
        "spec": spec,
    }


def _mutating_binding(
    mutation: InServerMutation, namespace: str, api_version: ApiVersion
) -> dict[str, Any]:
    spec: dict[str, Any] = {"policyName": PREFIX + mutation.name}
    if mutation.params_label:
        spec["paramRef"] = _param_ref(mutation.params_label, namespace)
    return {
        "apiVersion": f"{GROUP}/{api_version}",
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": PREFIX + mutation.name},
        "spec": spec,
    }
