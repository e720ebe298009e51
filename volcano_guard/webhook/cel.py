"""Small builders for the CEL expressions of webhook `matchConditions`.

The API server evaluates them before calling a webhook, with the variables `object`, `oldObject`
(null on CREATE; `object` is null on DELETE) and `request` (the AdmissionRequest). An expression
that fails to evaluate counts against the webhook's failurePolicy, so every expression built
here guards each field with has() before it reads it and short-circuits on the request's kind
and operation first.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable


def literal(value: object) -> str:
    """value (str, bool, int, float, list, dict, or an Expr kept as written) as a CEL
    literal. A string becomes printable ASCII whatever it holds: quotes, backslashes, line
    breaks and every other character outside ' '..'~' are escapes, so no config value can end
    the literal or add to the expression (a raw newline ends a quoted literal in CEL's grammar:
    a config value holding one made every expression it was rendered into fail to compile). A
    list or map whose values differ in type gets them as dyn() (kube-apiserver's CEL refuses
    mixed aggregate literals)."""
    if isinstance(value, Expr):
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) or (isinstance(value, float) and math.isfinite(value)):
        return repr(value)
    if isinstance(value, str):
        if _PLAIN.fullmatch(value):  # most values: rendering is a large part of manifests' time
            return f"'{value}'"
        return "'" + "".join(_escaped(c) for c in value) + "'"
    if isinstance(value, list):
        return "[" + ", ".join(_element(v, _mixed(value)) for v in value) + "]"
    if isinstance(value, dict):
        mixed = _mixed(list(value.values()))
        entries = (f"{literal(k)}: {_element(v, mixed)}" for k, v in value.items())
        return "{" + ", ".join(entries) + "}"
    raise TypeError(f"no CEL literal for {type(value).__name__}")


_PLAIN = re.compile(r"[ -&(-\[\]-~]*")  # printable ASCII but a quote or backslash: as it is


def _mixed(values: list[object]) -> bool:
    """Values of more than one type (an Expr's is dyn to the type checker); or several lists
    or maps, whose element types may differ (an empty one's are dyn)."""
    nested = len(values) > 1 and any(isinstance(v, list | dict) for v in values)
    return nested or len({type(v) for v in values}) > 1


def _element(value: object, mixed: bool) -> str:
    return f"dyn({literal(value)})" if mixed else literal(value)


def _escaped(character: str) -> str:
    if character in "\\'":
        return "\\" + character
    if " " <= character <= "~":
        return character
    code = ord(character)
    if 0xD800 <= code <= 0xDFFF:  # YAML's "\ud800" reads as one; no CEL string holds it
        raise ValueError(f"U+{code:04X} is half of a UTF-16 pair, not a character")
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def string(value: str) -> str:
    """A CEL string literal of any text, an Expr's too (see literal)."""
    return literal(str(value))


def strings(values: Iterable[str]) -> str:
    """A CEL list of string literals."""
    return "[" + ", ".join(string(value) for value in values) + "]"


def all_of(*conditions: str) -> str:
    kept = [c for c in conditions if c]
    return " && ".join(f"({c})" if " || " in c else c for c in kept) or "true"


def any_of(*conditions: str) -> str:
    kept = [c for c in conditions if c]
    return " || ".join(f"({c})" if " && " in c or " || " in c else c for c in kept)


def negate(condition: str) -> str:
    """Not condition; "" (no condition) stays "", so all_of drops it."""
    return f"!({condition})" if condition else ""


def kind_is(group: str, *kinds: str) -> str:
    """The request is for one of these kinds of this API group (request.kind)."""
    kind = (
        f"request.kind.kind == {string(kinds[0])}"
        if len(kinds) == 1
        else f"request.kind.kind in {strings(kinds)}"
    )
    return f"request.kind.group == {string(group)} && {kind}"


def operation_is(*operations: str) -> str:
    if len(operations) == 1:
        return f"request.operation == {string(operations[0])}"
    return f"request.operation in {strings(operations)}"


def annotation_set(obj: str, key: str) -> str:
    """obj (object or oldObject) has annotation key with a non-empty value."""
    annotations = f"{obj}.metadata.annotations"
    return (
        f"has({obj}.metadata.annotations) && {string(key)} in {annotations} && "
        f"{annotations}[{string(key)}] != ''"
    )


def field_set(path: str) -> str:
    """A string field (e.g. object.spec.nodeName) that is present and not empty."""
    return f"has({path}) && {path} != ''"


def user_in(users: Iterable[str], groups: Iterable[str]) -> str:
    """The requesting user is one of users or in one of groups; "" when both are empty."""
    users, groups = tuple(users), tuple(groups)
    tests = []
    if users:
        tests.append(f"request.userInfo.username in {strings(users)}")
    if groups:
        tests.append(
            "has(request.userInfo.groups) && "
            f"request.userInfo.groups.exists(g, g in {strings(groups)})"
        )
    return any_of(*tests) if tests else ""


def namespace_in(namespaces: Iterable[str]) -> str:
    namespaces = tuple(namespaces)
    return f"request.namespace in {strings(namespaces)}" if namespaces else ""


class Expr(str):
    """A CEL expression among literal text, for concat()."""


def concat(*parts: str) -> str:
    """A CEL string expression joining literal text and Expr parts (which must be strings);
    an Expr with an operator in it is parenthesized (`a ? b : c + 'x'` would take the `+`)."""
    return " + ".join(
        _operand(part) if isinstance(part, Expr) else string(part) for part in parts if part
    )


def _operand(expression: str) -> str:
    simple = expression.replace(".", "").replace("_", "").replace("[0]", "").isalnum()
    return expression if simple else f"({expression})"


# What AdmissionRequest.describe() says of the request's object (`Pod "team-a/train-0"`), as
# CEL parts for concat(), for the in-server checks' messages.
DESCRIBED = (
    Expr("request.kind.kind"),
    ' "',
    Expr("request.namespace"),
    "/",
    Expr("object.metadata.name"),
    '"',
)


def json_patch(op: str, path: str, value: str = "") -> str:
    """A MutatingAdmissionPolicy's `JSONPatch{...}` of CEL path and value expressions (no value:
    a remove)."""
    fields = f"op: {string(op)}, path: {path}"
    return f"JSONPatch{{{fields}, value: {value}}}" if value else f"JSONPatch{{{fields}}}"
