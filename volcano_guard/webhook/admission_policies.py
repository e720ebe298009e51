"""The guard's denies as ValidatingAdmissionPolicies (admissionregistration.k8s.io/v1, Kubernetes
1.30+): what the enabled policies can decide from the request alone (Policy.in_server), each a
policy and its binding, enforced inside the API server with no network hop and no process that
can be down. The mode sets the binding's validationActions: enforce Deny, warn Warn, audit Audit.

`volcano-guard manifests` prints them after the webhook configurations when the config's
`validatingAdmissionPolicies` is true (the default). They judge the namespaces the webhook
judges.
"""

from __future__ import annotations

from typing import Any

from volcano_guard.webhook.config import Config
from volcano_guard.webhook.evaluation import POLICIES
from volcano_guard.webhook.policies.base import InServerCheck
from volcano_guard.webhook.registrations import unjudged_namespaces

API_VERSION = "admissionregistration.k8s.io/v1"
PREFIX = "volcano-guard-"
ACTIONS = {"enforce": ["Deny"], "warn": ["Warn"], "audit": ["Audit"]}


def admission_policies(config: Config, namespace: str = "volcano-guard") -> list[dict[str, Any]]:
    """A ValidatingAdmissionPolicy and its binding for every in-server check of every enabled
    policy, for the guard installed in `namespace`; none when the config turns them off."""
    if not config.validatingAdmissionPolicies:
        return []
    objects: list[dict[str, Any]] = []
    for policy in POLICIES:
        mode = policy.mode(config)
        if mode == "off":
            continue
        for check in policy.in_server(config):
            objects += [_policy(check, namespace), _binding(check, ACTIONS[mode], namespace)]
    return objects


def _policy(check: InServerCheck, namespace: str) -> dict[str, Any]:
    rules = [
        {
            "apiGroups": [rule.api_group],
            "apiVersions": [rule.api_version],
            "operations": list(rule.operations),
            "resources": list(rule.resources),
        }
        for rule in check.rules
    ]
    spec: dict[str, Any] = {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "namespaceSelector": unjudged_namespaces(namespace),
            "resourceRules": rules,
        },
        "matchConditions": [{"name": "guarded", "expression": check.condition}],
    }
    if check.params_label:
        spec["paramKind"] = {"apiVersion": "v1", "kind": "ConfigMap"}
    if check.variables:
        spec["variables"] = [
            {"name": name, "expression": expression} for name, expression in check.variables
        ]
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
        key, value = check.params_label
        # Allow: the API server collects params before it evaluates matchConditions, so Deny
        # would refuse every pod the rules match (any pod CREATE) while none are published.
        spec["paramRef"] = {
            "namespace": namespace,
            "selector": {"matchLabels": {key: value}},
            "parameterNotFoundAction": "Allow",
        }
    return {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": PREFIX + check.name},
        "spec": spec,
    }
