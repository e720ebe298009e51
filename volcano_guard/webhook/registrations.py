"""The Mutating/ValidatingWebhookConfigurations that match a config (`volcano-guard manifests`).

Each enabled policy declares the requests it can act on (Policy.scopes: rules and a CEL
condition); a registration sends the union of its policies' rules, narrowed by one matchCondition
that is the OR of their conditions. So a pod that every policy would allow untouched is never
sent, and an outage of the guard stops only the requests it exists to judge. Injection fails open
in a registration of its own, selected by the inject label; the binding guard fails open too.
With the in-server policies installed, the requests a policy's ValidatingAdmissionPolicies
decide (`validatingAdmissionPolicies`) and the pods its MutatingAdmissionPolicies patch
(`mutatingAdmissionPolicies`) are not sent to the webhook at all; what it still sends then fails
open where the API server refuses what the policy would (docs/decisions/registrations.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import yaml

from volcano_guard.webhook.config import Config
from volcano_guard.webhook.evaluation import POLICIES
from volcano_guard.webhook.policies.base import (
    BINDINGS,
    INJECT,
    MUTATE,
    MUTATE_OPEN,
    VALIDATE,
    VALIDATE_OPEN,
    InServerCheck,
    InServerMutation,
    Rule,
    Scope,
)

API_VERSION = "admissionregistration.k8s.io/v1"
TIMEOUT_SECONDS = 5
MATCH_CONDITION = "requests-its-policies-act-on"


@dataclass(frozen=True)
class Registration:
    name: str
    kind: Literal["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"]
    path: str
    failure_policy: Literal["Fail", "Ignore"]


# In the order the API server calls them (it orders a configuration's webhooks as listed).
REGISTRATIONS = (
    # Defaults, the nodeName rewrite and the PodGroup stamps must not be skipped.
    Registration(MUTATE, "MutatingWebhookConfiguration", "/mutate", "Fail"),
    # Defaults and the rewrite where a policy in the API server refuses what they would fix;
    # a pod's PodGroup generation annotation (it tells, nothing depends on it).
    Registration(MUTATE_OPEN, "MutatingWebhookConfiguration", "/mutate", "Ignore"),
    # A guard outage starts a labelled pod without the sidecar, not never.
    Registration(INJECT, "MutatingWebhookConfiguration", "/mutate", "Ignore"),
    # The guard's point: no unaccounted pod, no stale PodGroup delete.
    Registration(VALIDATE, "ValidatingWebhookConfiguration", "/validate", "Fail"),
    # The checks a policy in the API server also makes: they hold while the guard is down.
    Registration(VALIDATE_OPEN, "ValidatingWebhookConfiguration", "/validate", "Ignore"),
    # While the guard is down, every scheduler must still be able to bind.
    Registration(BINDINGS, "ValidatingWebhookConfiguration", "/validate", "Ignore"),
)


_OPEN = {MUTATE: MUTATE_OPEN, VALIDATE: VALIDATE_OPEN}
MUTATING_WEBHOOKS = frozenset({MUTATE, MUTATE_OPEN, INJECT})


def enabled_scopes(config: Config) -> list[Scope]:
    """Every scope of every policy the config turns on, in policy order, less what the
    in-server policies the config installs take over (placed)."""
    scopes = []
    for policy in POLICIES:
        if policy.mode(config) == "off":
            continue
        checks = policy.in_server(config) if config.validatingAdmissionPolicies else ()
        mutations = policy.mutate_in_server(config) if config.mutatingAdmissionPolicies else ()
        placed = (placed_scope(scope, checks, mutations) for scope in policy.scopes(config))
        scopes += [scope for scope in placed if scope is not None]
    return scopes


def placed_scope(
    scope: Scope, checks: Sequence[InServerCheck], mutations: Sequence[InServerMutation]
) -> Scope | None:
    """Where a policy's scope goes given its installed in-server checks and mutations (None:
    to no registration). What they cover leaves the webhook, but for what they decide only
    with the node states the guard publishes (params: while there are none the API server
    allows, docs/decisions/registrations.md), which the webhook still judges, failing open;
    so are the mutations of a policy whose denies the API server makes (it refuses what they
    would fix). The binding guard stays: bindings are no pod CREATE, and it fails open."""
    if scope.webhook in MUTATING_WEBHOOKS:
        if mutations and not _read_params(mutations):
            return None
        return _failing_open(scope) if mutations or checks else scope
    if not checks or scope.webhook == BINDINGS:
        return scope
    return _failing_open(scope) if _read_params(checks) else None


def _read_params(policies: Sequence[InServerCheck | InServerMutation]) -> bool:
    return any(policy.params_label for policy in policies)


def _failing_open(scope: Scope) -> Scope:
    return scope._replace(webhook=_OPEN.get(scope.webhook, scope.webhook))


def unjudged_namespaces(namespace: str) -> dict[str, Any]:
    """The namespaceSelector of everything the guard registers: kube-system and the guard's
    own namespace are never judged, so the guard can always be repaired."""
    return {
        "matchExpressions": [
            {
                "key": "kubernetes.io/metadata.name",
                "operator": "NotIn",
                "values": sorted({"kube-system", namespace}),
            }
        ]
    }


def webhook_configurations(
    config: Config,
    namespace: str = "volcano-guard",
    service: str = "volcano-guard",
    name: str = "volcano-guard",
) -> list[dict[str, Any]]:
    """The two configurations, each named `name`, calling service `namespace/service`:443."""
    scopes = enabled_scopes(config)
    configurations = []
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        webhooks = []
        for registration in REGISTRATIONS:
            mine = [scope for scope in scopes if scope.webhook == registration.name]
            if registration.kind == kind and mine:
                webhooks.append(_webhook(registration, mine, namespace, service))
        configurations.append(
            {
                "apiVersion": API_VERSION,
                "kind": kind,
                "metadata": {"name": name},
                "webhooks": webhooks,
            }
        )
    return configurations


def _webhook(
    registration: Registration, scopes: list[Scope], namespace: str, service: str
) -> dict[str, Any]:
    webhook: dict[str, Any] = {
        "name": registration.name,
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "timeoutSeconds": TIMEOUT_SECONDS,
        "failurePolicy": registration.failure_policy,
        "matchPolicy": "Equivalent",
        "clientConfig": {
            "service": {
                "name": service,
                "namespace": namespace,
                "path": registration.path,
                "port": 443,
            }
        },
        # Webhook configurations themselves are never sent to webhooks.
        "namespaceSelector": unjudged_namespaces(namespace),
        "rules": _rules(scope.rules for scope in scopes),
    }
    labels = {key: value for scope in scopes for key, value in scope.object_labels}
    if labels:
        webhook["objectSelector"] = {"matchLabels": labels}
    if registration.kind == "MutatingWebhookConfiguration":
        webhook["reinvocationPolicy"] = "IfNeeded"  # see what later webhooks changed
    if all(scope.condition for scope in scopes):  # one without a condition takes every request
        conditions = [scope.condition for scope in scopes]
        expression = (
            conditions[0]
            if len(conditions) == 1
            else "\n|| ".join(f"({condition})" for condition in conditions)
        )
        webhook["matchConditions"] = [{"name": MATCH_CONDITION, "expression": expression}]
    return webhook


def _rules(rule_sets: Iterable[tuple[Rule, ...]]) -> list[dict[str, Any]]:
    """The union of rules: operations merged per resource, resources with the same operations
    and scope listed in one rule."""
    operations: dict[tuple[str, str, str, str], set[str]] = {}
    for rules in rule_sets:
        for rule in rules:
            for resource in rule.resources:
                key = (rule.api_group, rule.api_version, resource, rule.scope)
                operations.setdefault(key, set()).update(rule.operations)
    merged: dict[tuple[str, str, tuple[str, ...], str], list[str]] = {}
    for (group, version, resource, scope), ops in operations.items():
        merged.setdefault((group, version, tuple(sorted(ops)), scope), []).append(resource)
    return [
        {
            "apiGroups": [group],
            "apiVersions": [version],
            "operations": list(ops),
            "resources": resources,
            "scope": scope,
        }
        for (group, version, ops, scope), resources in merged.items()
    ]


HEADER = """\
# Printed by `volcano-guard manifests`: what the reconciler writes for this config (apply it
# yourself only for a GitOps install, with `reconcile --gitops`). Each webhook covers only the
# requests its policies act on (matchConditions), so a guard outage never stops a pod the guard
# would have allowed untouched. Where the cluster serves them (--kubernetes-version), the
# in-server policies follow: ValidatingAdmissionPolicies for the denies the API server can decide
# alone, MutatingAdmissionPolicies for the pod mutations it can make alone, and what they cover
# is sent to no webhook. caBundle is set by the reconciler (or `volcano-guard certs ensure`) or
# by cert-manager's cainjector.
"""


def render(configurations: list[dict[str, Any]]) -> str:
    """YAML documents, expressions as literal blocks, behind HEADER."""
    return HEADER + "---\n".join(
        yaml.dump(c, Dumper=_Dumper, sort_keys=False, width=100) for c in configurations
    )


class _Dumper(yaml.SafeDumper):
    pass


def _string(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _string)
