"""Which admission webhooks kube-apiserver calls for a request, and what a request meets while
none of them answers: the matching rules of Kubernetes' "Dynamic Admission Control" (rules,
namespaceSelector, objectSelector, matchConditions), with matchConditions evaluated by a real CEL
implementation (cel-python) over the API server's variables `object`, `oldObject`, `request`."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import celpy


@dataclass(frozen=True)
class Request:
    """An API request as the admission chain sees it."""

    operation: str
    group: str
    version: str
    resource: str
    kind: str
    namespace: str
    name: str
    object: dict[str, Any] | None = None
    old_object: dict[str, Any] | None = None
    sub_resource: str = ""
    username: str = "alice"
    groups: tuple[str, ...] = ("system:authenticated",)
    options: dict[str, Any] | None = None
    namespace_labels: Mapping[str, str] = field(default_factory=dict)

    def admission_request(self) -> dict[str, Any]:
        """The AdmissionRequest the API server would send (the CEL `request` variable)."""
        gvk = {"group": self.group, "version": self.version, "kind": self.kind}
        gvr = {"group": self.group, "version": self.version, "resource": self.resource}
        return {"uid": "0", "kind": gvk, "resource": gvr, "subResource": self.sub_resource,
                "requestKind": gvk, "requestResource": gvr,
                "requestSubResource": self.sub_resource, "name": self.name,
                "namespace": self.namespace, "operation": self.operation,
                "userInfo": {"username": self.username, "groups": list(self.groups)},
                "object": self.object, "oldObject": self.old_object, "dryRun": False,
                "options": self.options}

    def labels(self) -> Mapping[str, str]:
        return _labels(self.namespace_labels, self.namespace)


def _labels(labels: Mapping[str, str], namespace: str) -> Mapping[str, str]:
    # The API server labels every namespace with its name.
    return {**labels, "kubernetes.io/metadata.name": namespace}


class ConditionError(Exception):
    """A matchCondition did not evaluate to a boolean."""


def rule_matches(rule: Mapping[str, Any], request: Request) -> bool:
    resource = (f"{request.resource}/{request.sub_resource}" if request.sub_resource
                else request.resource)

    def listed(values: Iterable[str], value: str) -> bool:
        return "*" in values or value in values

    def resource_listed(patterns: Iterable[str]) -> bool:
        for pattern in patterns:
            if pattern == resource or pattern == "*/*":
                return True
            main, _, sub = pattern.partition("/")
            if pattern == "*" and not request.sub_resource:
                return True
            if sub and (main in ("*", request.resource)) and sub in ("*", request.sub_resource):
                return True
        return False

    scope = rule.get("scope", "*")
    return (listed(rule["apiGroups"], request.group)
            and listed(rule["apiVersions"], request.version)
            and listed(rule["operations"], request.operation)
            and resource_listed(rule["resources"])
            and (scope == "*" or (scope == "Namespaced") == bool(request.namespace)))


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector: matchLabels and matchExpressions all hold; empty matches all."""
    selector = selector or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or ():
        key, operator = expression["key"], expression["operator"]
        values = expression.get("values") or ()
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


def _object_labels(obj: Mapping[str, Any] | None) -> Mapping[str, str]:
    metadata = (obj or {}).get("metadata") or {}
    return metadata.get("labels") or {}


# cel-python raises the interpreter's recursion limit on its first compile; do it at import,
# not inside a test (hypothesis warns when a test changes it).
celpy.Environment().compile("true")


@functools.cache
def _program(expression: str) -> celpy.Runner:
    environment = celpy.Environment()
    return environment.program(environment.compile(expression))


def condition_holds(expression: str, request: Request) -> bool:
    activation = {"object": celpy.json_to_cel(request.object),
                  "oldObject": celpy.json_to_cel(request.old_object),
                  "request": celpy.json_to_cel(request.admission_request())}
    try:
        result = _program(expression).evaluate(activation)
    except celpy.CELEvalError as exc:
        raise ConditionError(f"{expression!r}: {exc}") from exc
    if not isinstance(result, celpy.celtypes.BoolType):
        raise ConditionError(f"{expression!r} gave {result!r}, not a boolean")
    return bool(result)


def webhook_matches(webhook: Mapping[str, Any], request: Request) -> bool:
    """Whether the API server sends the request to this webhook (ConditionError: a condition
    failed, which the API server treats as a call that failed)."""
    if not any(rule_matches(rule, request) for rule in webhook.get("rules") or ()):
        return False
    if request.namespace and not selector_matches(webhook.get("namespaceSelector"),
                                                  request.labels()):
        return False
    object_selector = webhook.get("objectSelector")
    if object_selector and not any(
            obj is not None and selector_matches(object_selector, _object_labels(obj))
            for obj in (request.object, request.old_object)):
        return False
    return all(condition_holds(c["expression"], request)
               for c in webhook.get("matchConditions") or ())


def called(configurations: Iterable[Mapping[str, Any]],
           request: Request) -> list[Mapping[str, Any]]:
    """The webhooks the request is sent to, in order (ConditionError if a condition fails)."""
    return [webhook for configuration in configurations
            for webhook in configuration.get("webhooks") or ()
            if webhook_matches(webhook, request)]


def during_outage(configurations: Iterable[Mapping[str, Any]], request: Request) -> str:
    """What happens to the request while none of these webhooks answers: "admitted", or
    "refused by NAME" for the first called webhook whose failurePolicy is Fail (the default)."""
    for webhook in called(configurations, request):
        if webhook.get("failurePolicy", "Fail") == "Fail":
            return f"refused by {webhook['name']}"
    return "admitted"
