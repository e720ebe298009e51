"""A checked CEL expression as plain Python: the AST and its resolved references.

cel-cpp (cel-expr-python) parses and type-checks; `Expression.serialize()` gives the result as an
Any-wrapped `cel.expr.CheckedExpr`. This module declares the few messages of that proto the
sandbox's cost-tracking evaluator reads (cel/expr/checked.proto and syntax.proto, field numbers as
published; the type map and source info are not read) and turns one into tuples.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from google.protobuf import any_pb2, descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto

# message -> [(field, number, type, label, type name)]
_MESSAGES: dict[str, list[tuple[str, int, int, int, str]]] = {
    "Constant": [
        ("null_value", 1, _F.TYPE_INT32, _F.LABEL_OPTIONAL, ""),
        ("bool_value", 2, _F.TYPE_BOOL, _F.LABEL_OPTIONAL, ""),
        ("int64_value", 3, _F.TYPE_INT64, _F.LABEL_OPTIONAL, ""),
        ("uint64_value", 4, _F.TYPE_UINT64, _F.LABEL_OPTIONAL, ""),
        ("double_value", 5, _F.TYPE_DOUBLE, _F.LABEL_OPTIONAL, ""),
        ("string_value", 6, _F.TYPE_STRING, _F.LABEL_OPTIONAL, ""),
        ("bytes_value", 7, _F.TYPE_BYTES, _F.LABEL_OPTIONAL, ""),
    ],
    "Ident": [("name", 1, _F.TYPE_STRING, _F.LABEL_OPTIONAL, "")],
    "Select": [
        ("operand", 1, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL, ".ce.Expr"),
        ("field", 2, _F.TYPE_STRING, _F.LABEL_OPTIONAL, ""),
        ("test_only", 3, _F.TYPE_BOOL, _F.LABEL_OPTIONAL, ""),
    ],
    "Call": [
        ("target", 1, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL, ".ce.Expr"),
        ("function", 2, _F.TYPE_STRING, _F.LABEL_OPTIONAL, ""),
        ("args", 3, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, ".ce.Expr"),
    ],
    "CreateList": [
        ("elements", 1, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, ".ce.Expr"),
        ("optional_indices", 2, _F.TYPE_INT32, _F.LABEL_REPEATED, ""),
    ],
    "Entry": [
        ("id", 1, _F.TYPE_INT64, _F.LABEL_OPTIONAL, ""),
        ("field_key", 2, _F.TYPE_STRING, _F.LABEL_OPTIONAL, ""),
        ("map_key", 3, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL, ".ce.Expr"),
        ("value", 4, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL, ".ce.Expr"),
        ("optional_entry", 5, _F.TYPE_BOOL, _F.LABEL_OPTIONAL, ""),
    ],
    "CreateStruct": [
        ("message_name", 1, _F.TYPE_STRING, _F.LABEL_OPTIONAL, ""),
        ("entries", 2, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, ".ce.Entry"),
    ],
    "Comprehension": [
        ("iter_var", 1, _F.TYPE_STRING, _F.LABEL_OPTIONAL, ""),
        ("iter_range", 2, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL, ".ce.Expr"),
        ("accu_var", 3, _F.TYPE_STRING, _F.LABEL_OPTIONAL, ""),
        ("accu_init", 4, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL, ".ce.Expr"),
        ("loop_condition", 5, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL, ".ce.Expr"),
        ("loop_step", 6, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL, ".ce.Expr"),
        ("result", 7, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL, ".ce.Expr"),
    ],
    "Expr": [
        ("id", 2, _F.TYPE_INT64, _F.LABEL_OPTIONAL, ""),
        ("const_expr", 3, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL, ".ce.Constant"),
        ("ident_expr", 4, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL, ".ce.Ident"),
        ("select_expr", 5, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL, ".ce.Select"),
        ("call_expr", 6, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL, ".ce.Call"),
        ("list_expr", 7, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL, ".ce.CreateList"),
        ("struct_expr", 8, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL, ".ce.CreateStruct"),
        ("comprehension_expr", 9, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL, ".ce.Comprehension"),
    ],
    "Reference": [
        ("name", 1, _F.TYPE_STRING, _F.LABEL_OPTIONAL, ""),
        ("overload_id", 3, _F.TYPE_STRING, _F.LABEL_REPEATED, ""),
        ("value", 4, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL, ".ce.Constant"),
    ],
    "ReferenceEntry": [
        ("key", 1, _F.TYPE_INT64, _F.LABEL_OPTIONAL, ""),
        ("value", 2, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL, ".ce.Reference"),
    ],
    "CheckedExpr": [
        ("reference_map", 2, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, ".ce.ReferenceEntry"),
        ("expr", 4, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL, ".ce.Expr"),
    ],
}


def _checked_expr_class() -> Any:
    file = descriptor_pb2.FileDescriptorProto(name="sandbox_checked_expr.proto", package="ce")
    for name, fields in _MESSAGES.items():
        message = file.message_type.add(name=name)
        for field_name, number, field_type, label, type_name in fields:
            field = message.field.add(name=field_name, number=number, type=field_type, label=label)
            if type_name:
                field.type_name = type_name
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("ce.CheckedExpr"))


_CheckedExpr = _checked_expr_class()


@dataclass(frozen=True)
class Reference:
    name: str
    overload_ids: tuple[str, ...]


def decode(serialized: bytes) -> tuple[Any, dict[int, Reference]]:
    """(the root Expr message, reference map by expression id) of Expression.serialize()."""
    wrapper = any_pb2.Any()
    wrapper.ParseFromString(serialized)
    checked = _CheckedExpr()
    checked.ParseFromString(wrapper.value)
    references = {
        entry.key: Reference(entry.value.name, tuple(entry.value.overload_id))
        for entry in checked.reference_map
    }
    return checked.expr, references


def constant(message: Any) -> Any:
    """A Constant message's Python value."""
    for field, value in message.ListFields():
        if field.name == "null_value":
            return None
        return value
    return None
