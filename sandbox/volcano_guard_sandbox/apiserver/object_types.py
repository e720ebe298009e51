"""`Object.<path>{...}` initializers of a mutation's expression, on cel-expr-python.

kube-apiserver resolves any type name `Object` or `Object.<field>...` as an object type whose
every field is dyn (cel/mutation/typeresolver.go DynamicTypeResolver, dynamic/objects.go), so
`Object.spec.template.spec.containers{name: "x", ports: [...]}` builds a value the checker
types as that object. cel-expr-python's checker knows a struct type only from a protobuf
descriptor, and a nested message cannot be named like a field of its parent (`Object.spec` the
message and `spec` the field of `Object`). So, for one expression:

- each initializer's type name is rewritten to a message name of the sandbox's
  (`Object.spec.template` -> `ObjectType__spec__template`, outside any package; `internal_name`
  and `original_name`), and
- a message is declared for each, a field for each field the expression sets: a nested object
  type where every value given to it is that initializer, a list of one where every value is a
  list literal of them, else google.protobuf.Value (dyn).

Where the expression gives one field both an object and another value, or writes an object
initializer where the sandbox cannot tell its field (a conditional, a variable), the checker
refuses it: a compile error upstream would not give (docs/decisions/sandbox.md).

At run time an initializer is an `ObjectValue` (a dict of its set fields with its upstream type
name); `type_mismatches` is CheckTypeNamesMatchFieldPathNames.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from typing import Any

from google.protobuf import any_pb2, descriptor_pb2, struct_pb2

from volcano_guard_sandbox.apiserver import checked_ast

INITIALIZER = re.compile(r"(?<![\w.])Object((?:\.\w+)*)(\s*\{)")
OBJECT = "Object"
_INTERNAL = "ObjectType"
_F = descriptor_pb2.FieldDescriptorProto


class ObjectValue(dict[str, Any]):
    """dynamic.ObjectVal: the fields set, and the object type's name (`Object.spec`)."""

    def __init__(self, type_name: str, fields: dict[str, Any]) -> None:
        super().__init__(fields)
        self.type_name = type_name

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, ObjectValue)
            and other.type_name == self.type_name
            and dict.__eq__(self, other)
        )

    __hash__ = None  # type: ignore[assignment]


def internal_name(original: str) -> str:
    return _INTERNAL + original[len(OBJECT) :].replace(".", "__")


def originals(text: str) -> str:
    """text (a compile error) with the sandbox's message names as the expression wrote them."""
    return re.sub(rf"\b{_INTERNAL}(?:__\w+?)*\b", lambda m: original_name(m.group()) or "", text)


def original_name(internal: str) -> str | None:
    if internal != _INTERNAL and not internal.startswith(_INTERNAL + "__"):
        return None
    return OBJECT + internal[len(_INTERNAL) :].replace("__", ".")


def rewritten(expression: str) -> str:
    """expression with each initializer's type name as the sandbox's message name."""
    return INITIALIZER.sub(lambda m: internal_name(OBJECT + m.group(1)) + m.group(2), expression)


# -- the messages an expression's initializers need -----------------------------------------------


# cel/expr/syntax.proto ParsedExpr: what an expression compiled unchecked serializes to.
_ParsedExpr = checked_ast.message_class("ParsedExpr", {"ParsedExpr": "expr 2 Expr"}, "pe")


def _nodes(expr: Any) -> Iterator[Any]:
    stack = [expr]
    while stack:
        node = stack.pop()
        yield node
        kind = _kind(node)
        if kind == "select_expr":
            stack.append(node.select_expr.operand)
        elif kind == "call_expr":
            if node.call_expr.HasField("target"):
                stack.append(node.call_expr.target)
            stack.extend(node.call_expr.args)
        elif kind == "list_expr":
            stack.extend(node.list_expr.elements)
        elif kind == "struct_expr":
            for entry in node.struct_expr.entries:
                if entry.HasField("map_key"):
                    stack.append(entry.map_key)
                stack.append(entry.value)
        elif kind == "comprehension_expr":
            fold = node.comprehension_expr
            stack.extend(
                [fold.iter_range, fold.accu_init, fold.loop_condition, fold.loop_step, fold.result]
            )


_KINDS = (
    "const_expr",
    "ident_expr",
    "select_expr",
    "call_expr",
    "list_expr",
    "struct_expr",
    "comprehension_expr",
)


def _kind(node: Any) -> str:
    return next((kind for kind in _KINDS if node.HasField(kind)), "")


def _initializer(node: Any) -> str | None:
    if _kind(node) == "struct_expr" and original_name(node.struct_expr.message_name):
        return str(node.struct_expr.message_name)
    return None


def _field_kind(value: Any) -> tuple[str, str]:
    """("message", T), ("repeated", T) or ("dyn", "") for a value given to a field."""
    if (name := _initializer(value)) is not None:
        return ("message", name)
    if _kind(value) == "list_expr" and value.list_expr.elements:
        names = {_initializer(element) for element in value.list_expr.elements}
        if len(names) == 1 and None not in names:
            return ("repeated", str(names.pop()))
    return ("dyn", "")


def declarations(parsed: bytes) -> bytes:
    """The FileDescriptorProto (serialized) of the messages a parsed expression's initializers
    need (Expression.serialize() of one compiled unchecked)."""
    wrapper = any_pb2.Any()
    wrapper.ParseFromString(parsed)
    tree = _ParsedExpr()
    tree.ParseFromString(wrapper.value)
    fields: dict[str, dict[str, tuple[str, str]]] = {}
    for node in _nodes(tree.expr):
        name = _initializer(node)
        if name is None:
            continue
        declared = fields.setdefault(name, {})
        for entry in node.struct_expr.entries:
            kind = _field_kind(entry.value)
            if declared.setdefault(entry.field_key, kind) != kind:
                declared[entry.field_key] = ("dyn", "")  # given both: the checker decides
            if kind[1]:
                fields.setdefault(kind[1], {})
    return _file(fields).SerializeToString()


def _file(messages: dict[str, dict[str, tuple[str, str]]]) -> descriptor_pb2.FileDescriptorProto:
    file = descriptor_pb2.FileDescriptorProto(
        name="volcano_guard_object_types.proto",
        syntax="proto3",
        dependency=[struct_pb2.DESCRIPTOR.name],
    )
    for name in sorted(messages):
        message = file.message_type.add(name=name)
        for number, (field_name, (kind, type_name)) in enumerate(
            sorted(messages[name].items()), start=1
        ):
            field = message.field.add(name=field_name, number=number, type=_F.TYPE_MESSAGE)
            field.label = _F.LABEL_REPEATED if kind == "repeated" else _F.LABEL_OPTIONAL
            field.type_name = f".{type_name}" if kind != "dyn" else ".google.protobuf.Value"
    return file


@functools.lru_cache(maxsize=256)
def file_descriptor(serialized: bytes) -> descriptor_pb2.FileDescriptorProto:
    file = descriptor_pb2.FileDescriptorProto()
    file.ParseFromString(serialized)
    return file


# -- run time -------------------------------------------------------------------------------------


def type_mismatches(value: Any, path: tuple[str, ...] | None = None) -> list[str]:
    """dynamic/objects.go typeCheck: an object's type name must be the field path from the root
    object's type (`Object.spec.selector` for the selector field of an `Object.spec`)."""
    errors: list[str] = []
    if isinstance(value, ObjectValue):
        path = path or (value.type_name,)
        expected = ".".join(path)
        if value.type_name != expected:
            errors.append(
                f'unexpected type name "{value.type_name}", expected "{expected}", which '
                "matches field name path from root Object type"
            )
        for key, field in value.items():
            errors += type_mismatches(field, (*path, key))
    elif isinstance(value, list) and path is not None:
        for item in value:
            errors += type_mismatches(item, path)
    elif isinstance(value, dict) and path is not None:
        for item in value.values():
            errors += type_mismatches(item, path)
    return errors
