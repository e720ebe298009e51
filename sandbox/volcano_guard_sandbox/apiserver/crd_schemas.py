"""Custom resources held to their CRD's structural schema, as kube-apiserver's apiextensions holds
them (k8s.io/apiextensions-apiserver pkg/apiserver/schema: pruning, defaulting; validation by
kube-openapi's validator):

- **Pruning**: a field the schema does not declare is dropped on decode (and after each
  mutating webhook); `fieldValidation=Strict` refuses it (400 `strict decoding error: unknown
  field "spec.foo"`), `Warn` says so in a Warning header (server.py).
- **Defaulting**: a declared `default` fills an absent field of an object that is present; a
  null where the schema is not `nullable` is the default, or dropped when there is none.
- **Validation** (422 `Queue.scheduling.volcano.sh "x" is invalid: ...`): type (int-or-string
  quantities: an integer or a string), `pattern`, `enum`, `minimum`, `maximum`, `maxLength`,
  `required`, in kube-openapi's words as apiextensions turns them into field errors.

Held so far: Volcano's Queue, at v1.15.1 (the same at master; descriptions left out). v1.10.0's
schema differs: no `dequeueStrategy` nor `weight` default, none of the enums, minima, maxima and
the `parent` pattern, and `status.allocated` required. tests/sandbox/test_crd_schemas.py holds
QUEUE to Volcano's CRD file.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from functools import cache
from typing import Any

from volcano_guard_sandbox.apiserver.resources import SCHEDULING, ResourceType

Schema = dict[str, Any]

QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+"
    r"(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


def _quantities() -> Schema:
    """A ResourceList: resource name -> quantity (int-or-string matching the pattern)."""
    return {
        "additionalProperties": {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY_PATTERN,
            "x-kubernetes-int-or-string": True,
        },
        "type": "object",
    }


def _strings() -> Schema:
    return {"items": {"type": "string"}, "type": "array"}


def _node_group_terms() -> Schema:
    return {
        "properties": {
            "preferredDuringSchedulingIgnoredDuringExecution": _strings(),
            "requiredDuringSchedulingIgnoredDuringExecution": _strings(),
        },
        "type": "object",
    }


def _count() -> Schema:
    return {"format": "int32", "minimum": 0, "type": "integer"}


QUEUE_SPEC: Schema = {
    "properties": {
        "affinity": {
            "properties": {
                "nodeGroupAffinity": _node_group_terms(),
                "nodeGroupAntiAffinity": _node_group_terms(),
            },
            "type": "object",
        },
        "capability": _quantities(),
        "dequeueStrategy": {"default": "traverse", "enum": ["fifo", "traverse"], "type": "string"},
        "deserved": _quantities(),
        "extendClusters": {
            "items": {
                "properties": {
                    "capacity": _quantities(),
                    "name": {"type": "string"},
                    "weight": {"format": "int32", "type": "integer"},
                },
                "type": "object",
            },
            "type": "array",
        },
        "guarantee": {"properties": {"resource": _quantities()}, "type": "object"},
        "parent": {"maxLength": 253, "pattern": DNS1123_SUBDOMAIN, "type": "string"},
        "priority": _count(),
        "reclaimable": {"type": "boolean"},
        "type": {"maxLength": 253, "type": "string"},
        "weight": {
            "default": 1,
            "format": "int32",
            "maximum": 65535,
            "minimum": 1,
            "type": "integer",
        },
    },
    "type": "object",
}
QUEUE_STATUS: Schema = {
    "properties": {
        "allocated": _quantities(),
        "completed": _count(),
        "inqueue": _count(),
        "pending": _count(),
        "reservation": {
            "properties": {"nodes": _strings(), "resource": _quantities()},
            "type": "object",
        },
        "running": _count(),
        "state": {"enum": ["Open", "Closed", "Closing", "Unknown"], "type": "string"},
        "unknown": _count(),
    },
    "type": "object",
}
QUEUE: Schema = {
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": QUEUE_SPEC,
        "status": QUEUE_STATUS,
    },
    "type": "object",
}
# (group, version, plural) -> the openAPIV3Schema of the CRD's served version.
SCHEMAS: dict[tuple[str, str, str], Schema] = {(SCHEDULING, "v1beta1", "queues"): QUEUE}


def schema_of(resource: ResourceType) -> Schema | None:
    return SCHEMAS.get((resource.group, resource.version, resource.plural))


# -- pruning ------------------------------------------------------------------------------------


def unknown_fields(schema: Schema, obj: dict[str, Any]) -> list[str]:
    """The paths of the fields below the top level the schema does not declare (the top level
    and metadata are server.py's), sorted as the apiserver lists them."""
    found: list[str] = []
    for key, sub in _properties(schema).items():
        if key != "metadata" and key in obj:
            found += _unknown(sub, obj[key], key)
    return sorted(found)


def _unknown(schema: Schema, value: Any, path: str) -> Iterator[str]:
    if isinstance(value, dict):
        declared, additional = _properties(schema), schema.get("additionalProperties")
        for key, item in value.items():
            if key in declared:
                yield from _unknown(declared[key], item, f"{path}.{key}")
            elif isinstance(additional, dict):
                yield from _unknown(additional, item, f"{path}.{key}")
            elif schema.get("type") == "object" and not _keeps_unknown(schema):
                yield f"{path}.{key}"
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            yield from _unknown(schema["items"], item, f"{path}[{index}]")


def prune(schema: Schema, obj: dict[str, Any]) -> None:
    """Drop, in place, every field the schema does not declare (metadata left to its own)."""
    for key in list(obj):
        if key not in ("apiVersion", "kind", "metadata"):
            if key not in _properties(schema):
                del obj[key]
            else:
                _prune(_properties(schema)[key], obj[key])


def _prune(schema: Schema, value: Any) -> None:
    if isinstance(value, dict):
        declared, additional = _properties(schema), schema.get("additionalProperties")
        for key in list(value):
            if key in declared:
                _prune(declared[key], value[key])
            elif isinstance(additional, dict):
                _prune(additional, value[key])
            elif schema.get("type") == "object" and not _keeps_unknown(schema):
                del value[key]
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            _prune(schema["items"], item)


# -- defaulting ---------------------------------------------------------------------------------


def apply_defaults(schema: Schema, value: Any) -> None:
    """Defaults of absent fields of the objects present, in place; a null where the schema is
    not nullable becomes the default, or is dropped (prunenulls.go, algorithm.go)."""
    if isinstance(value, dict):
        declared, additional = _properties(schema), schema.get("additionalProperties")
        for key in list(value):
            sub = declared.get(key, additional if isinstance(additional, dict) else None)
            if sub is not None and value[key] is None and not sub.get("nullable"):
                if "default" in sub:
                    value[key] = json.loads(json.dumps(sub["default"]))
                else:
                    del value[key]
        for key, sub in declared.items():
            if key not in value and "default" in sub:
                value[key] = json.loads(json.dumps(sub["default"]))
        for key, item in value.items():
            sub = declared.get(key, additional if isinstance(additional, dict) else None)
            if sub is not None:
                apply_defaults(sub, item)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            apply_defaults(schema["items"], item)


# -- validation ---------------------------------------------------------------------------------


def validation_errors(schema: Schema, obj: dict[str, Any]) -> list[tuple[str, str]]:
    """(field path, detail) for each way obj breaks the schema below its top level."""
    errors: list[tuple[str, str]] = []
    for key, sub in _properties(schema).items():
        if key != "metadata" and obj.get(key) is not None:
            _validate(sub, obj[key], key, errors)
    return errors


def _validate(schema: Schema, value: Any, path: str, errors: list[tuple[str, str]]) -> None:
    if value is None:  # a null the defaulting let through: nullable
        return
    wanted = "integer,string" if schema.get("x-kubernetes-int-or-string") else schema.get("type")
    if wanted and not _of_type(value, str(wanted)):
        got = _json_type(value)
        errors.append(
            (path, f'Invalid value: "{got}": {path} in body must be of type {wanted}: "{got}"')
        )
        return
    if isinstance(value, dict):
        _validate_object(schema, value, path, errors)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            if isinstance(schema.get("items"), dict):
                _validate(schema["items"], item, f"{path}[{index}]", errors)
    else:
        errors += [(path, detail) for detail in _scalar_errors(schema, value, path)]


def _validate_object(
    schema: Schema, value: dict[str, Any], path: str, errors: list[tuple[str, str]]
) -> None:
    for key in schema.get("required") or ():
        if key not in value:
            errors.append((f"{path}.{key}", "Required value"))
    declared, additional = _properties(schema), schema.get("additionalProperties")
    for key, item in value.items():
        sub = declared.get(key, additional if isinstance(additional, dict) else None)
        if sub is not None:
            _validate(sub, item, f"{path}.{key}", errors)


def _scalar_errors(schema: Schema, value: Any, path: str) -> Iterator[str]:
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(_shown(item) for item in schema["enum"])
        yield f"Unsupported value: {_shown(value)}: supported values: {allowed}"
    if isinstance(value, str):
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            yield f"Too long: may not be more than {schema['maxLength']} bytes"
        if "pattern" in schema and not _pattern(schema["pattern"]).search(value):
            pattern = schema["pattern"]
            yield f"Invalid value: {_shown(value)}: {path} in body should match '{pattern}'"
    elif isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            yield (
                f"Invalid value: {_shown(value)}: {path} in body should be greater than or "
                f"equal to {schema['minimum']}"
            )
        if "maximum" in schema and value > schema["maximum"]:
            yield (
                f"Invalid value: {_shown(value)}: {path} in body should be less than or equal to "
                f"{schema['maximum']}"
            )


# -- helpers ------------------------------------------------------------------------------------


def _properties(schema: Schema) -> dict[str, Schema]:
    declared = schema.get("properties")
    return declared if isinstance(declared, dict) else {}


def _keeps_unknown(schema: Schema) -> bool:
    return bool(schema.get("x-kubernetes-preserve-unknown-fields"))


def _is_integer(value: Any) -> bool:
    """kube-openapi counts a JSON number with no fraction as an integer."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


_TYPE_CHECKS: dict[str, Callable[[Any], bool]] = {
    "integer": _is_integer,
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
}


def _of_type(value: Any, wanted: str) -> bool:
    if wanted == "object":  # the common case, first
        return isinstance(value, dict)
    return any(_TYPE_CHECKS[one](value) for one in wanted.split(",") if one in _TYPE_CHECKS)


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if _is_integer(value):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "object" if isinstance(value, dict) else "array" if isinstance(value, list) else "null"


def _shown(value: Any) -> str:
    """A value as field.Error prints it: strings quoted, numbers and booleans bare."""
    return json.dumps(value)


@cache
def _pattern(pattern: str) -> re.Pattern[str]:
    """Go's `$` (no multi-line flag) is the end of the text; Python's also matches before a
    final newline."""
    return re.compile(re.sub(r"(?<!\\)\$", r"\\Z", pattern))
