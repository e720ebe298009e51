"""The JSON shapes of the admissionregistration objects the sandbox reads (webhook
configurations, Validating- and MutatingAdmissionPolicies and their bindings), checked when one
is written.

kube-apiserver decodes a body into Go structs, so a field of the wrong JSON type (a selector
given as a string, a list of conditions as a number) is a bad request (400) before any
validation: `X in version "v1" cannot be handled as a X: json: cannot unmarshal string into Go
struct field ...`. The sandbox keeps the JSON as it came, and its matching and CEL code read
these fields as the types they must be; checking them first turns what would be a Python
exception (a 500) into the API server's answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# A shape: a JSON type name, ("list", item shape), ("map", value shape), or the fields of an
# object (None: any).
Shape = str | tuple[str, Any] | Mapping[str, Any] | None

_STRINGS = ("list", "string")
_SELECTOR = {
    "matchLabels": ("map", "string"),
    "matchExpressions": ("list", {"key": "string", "operator": "string", "values": _STRINGS}),
}
_RULE = {
    "operations": _STRINGS,
    "apiGroups": _STRINGS,
    "apiVersions": _STRINGS,
    "resources": _STRINGS,
    "resourceNames": _STRINGS,
    "scope": "string",
}
_CONDITIONS = ("list", {"name": "string", "expression": "string"})
_MATCH_RESOURCES = {
    "namespaceSelector": _SELECTOR,
    "objectSelector": _SELECTOR,
    "resourceRules": ("list", _RULE),
    "excludeResourceRules": ("list", _RULE),
    "matchPolicy": "string",
}
_WEBHOOK = {
    "name": "string",
    "clientConfig": "object",
    "rules": ("list", _RULE),
    "failurePolicy": "string",
    "matchPolicy": "string",
    "namespaceSelector": _SELECTOR,
    "objectSelector": _SELECTOR,
    "sideEffects": "string",
    "timeoutSeconds": "number",
    "admissionReviewVersions": _STRINGS,
    "reinvocationPolicy": "string",
    "matchConditions": _CONDITIONS,
}
_PARAM_REF = {
    "name": "string",
    "namespace": "string",
    "selector": _SELECTOR,
    "parameterNotFoundAction": "string",
}
SHAPES: Mapping[str, Mapping[str, Any]] = {
    "ValidatingWebhookConfiguration": {"webhooks": ("list", _WEBHOOK)},
    "MutatingWebhookConfiguration": {"webhooks": ("list", _WEBHOOK)},
    "ValidatingAdmissionPolicy": {
        "spec": {
            "paramKind": {"apiVersion": "string", "kind": "string"},
            "matchConstraints": _MATCH_RESOURCES,
            "validations": (
                "list",
                {
                    "expression": "string",
                    "message": "string",
                    "messageExpression": "string",
                    "reason": "string",
                },
            ),
            "failurePolicy": "string",
            "auditAnnotations": ("list", {"key": "string", "valueExpression": "string"}),
            "matchConditions": _CONDITIONS,
            "variables": ("list", {"name": "string", "expression": "string"}),
        }
    },
    "ValidatingAdmissionPolicyBinding": {
        "spec": {
            "policyName": "string",
            "paramRef": _PARAM_REF,
            "matchResources": _MATCH_RESOURCES,
            "validationActions": _STRINGS,
        }
    },
    # admissionregistration/v1 (1.36) MutatingAdmissionPolicy and its binding.
    "MutatingAdmissionPolicy": {
        "spec": {
            "paramKind": {"apiVersion": "string", "kind": "string"},
            "matchConstraints": _MATCH_RESOURCES,
            "variables": ("list", {"name": "string", "expression": "string"}),
            "mutations": (
                "list",
                {
                    "patchType": "string",
                    "jsonPatch": {"expression": "string"},
                    "applyConfiguration": {"expression": "string"},
                },
            ),
            "failurePolicy": "string",
            "matchConditions": _CONDITIONS,
            "reinvocationPolicy": "string",
        }
    },
    "MutatingAdmissionPolicyBinding": {
        "spec": {
            "policyName": "string",
            "paramRef": _PARAM_REF,
            "matchResources": _MATCH_RESOURCES,
        }
    },
}


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _mismatch(value: Any, shape: Shape, path: str) -> str | None:
    """The first field of value that is not of its shape (null is Go's zero value: any)."""
    if value is None or shape is None:
        return None
    if isinstance(shape, str):
        kind = _json_type(value)
        return (
            None if kind == shape else f"cannot unmarshal {kind} into field {path} of type {shape}"
        )
    if isinstance(shape, tuple) and shape[0] == "map":
        if not isinstance(value, Mapping):
            return f"cannot unmarshal {_json_type(value)} into field {path} of type object"
        for key, item in value.items():
            if (found := _mismatch(item, shape[1], f"{path}[{key}]")) is not None:
                return found
        return None
    if isinstance(shape, tuple):
        if not isinstance(value, list):
            return f"cannot unmarshal {_json_type(value)} into field {path} of type array"
        for index, item in enumerate(value):
            if (found := _mismatch(item, shape[1], f"{path}[{index}]")) is not None:
                return found
        return None
    if not isinstance(value, Mapping):
        return f"cannot unmarshal {_json_type(value)} into field {path} of type object"
    for field, inner in shape.items():
        found = _mismatch(value.get(field), inner, f"{path}.{field}".lstrip("."))
        if found is not None:
            return found
    return None


def decode_error(kind: str, obj: Mapping[str, Any]) -> str | None:
    """Why obj cannot be decoded as the kube-apiserver's kind, or None (kinds not here: None)."""
    shape = SHAPES.get(kind)
    if shape is None:
        return None
    found = _mismatch(obj, shape, "")
    if found is None:
        return None
    return f'{kind} in version "v1" cannot be handled as a {kind}: json: {found}'
