"""A checked CEL expression as plain Python: the AST and its resolved references.

cel-cpp (cel-expr-python) parses and type-checks; `Expression.serialize()` gives the result as an
Any-wrapped `cel.expr.CheckedExpr`. This module declares the few messages of that proto the
sandbox's cost-tracking evaluator reads (cel/expr/checked.proto and syntax.proto, field numbers as
published; the type map and source info are not read) and decodes one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from google.protobuf import any_pb2, descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto
_SCALARS = {
    "int32": _F.TYPE_INT32,
    "int64": _F.TYPE_INT64,
    "uint64": _F.TYPE_UINT64,
    "bool": _F.TYPE_BOOL,
    "double": _F.TYPE_DOUBLE,
    "string": _F.TYPE_STRING,
    "bytes": _F.TYPE_BYTES,
}
# message: "field number type; ...", a type ending in * repeated (cel/expr/syntax.proto and
# checked.proto; CheckedExpr's reference_map is a map, that is repeated entries).
_MESSAGES = {
    "Constant": "null_value 1 int32; bool_value 2 bool; int64_value 3 int64; "
    "uint64_value 4 uint64; double_value 5 double; string_value 6 string; bytes_value 7 bytes",
    "Ident": "name 1 string",
    "Select": "operand 1 Expr; field 2 string; test_only 3 bool",
    "Call": "target 1 Expr; function 2 string; args 3 Expr*",
    "CreateList": "elements 1 Expr*; optional_indices 2 int32*",
    "Entry": "id 1 int64; field_key 2 string; map_key 3 Expr; value 4 Expr; optional_entry 5 bool",
    "CreateStruct": "message_name 1 string; entries 2 Entry*",
    "Comprehension": "iter_var 1 string; iter_range 2 Expr; accu_var 3 string; "
    "accu_init 4 Expr; loop_condition 5 Expr; loop_step 6 Expr; result 7 Expr",
    "Expr": "id 2 int64; const_expr 3 Constant; ident_expr 4 Ident; select_expr 5 Select; "
    "call_expr 6 Call; list_expr 7 CreateList; struct_expr 8 CreateStruct; "
    "comprehension_expr 9 Comprehension",
    "Reference": "name 1 string; overload_id 3 string*; value 4 Constant",
    "ReferenceEntry": "key 1 int64; value 2 Reference",
    "CheckedExpr": "reference_map 2 ReferenceEntry*; expr 4 Expr",
}


def message_class(
    root: str = "CheckedExpr", extra: Mapping[str, str] | None = None, package: str = "ce"
) -> Any:
    """The class of message root among the messages above (and extra ones, declared alike),
    proto2 (so a zero constant is still present), in a pool of their own."""
    file = descriptor_pb2.FileDescriptorProto(name=f"sandbox_{package}_expr.proto", package=package)
    for name, fields in {**_MESSAGES, **(extra or {})}.items():
        message = file.message_type.add(name=name)
        for declaration in fields.split(";"):
            field_name, number, kind = declaration.split()
            repeated = kind.endswith("*")
            kind = kind.rstrip("*")
            field = message.field.add(
                name=field_name,
                number=int(number),
                type=_SCALARS.get(kind, _F.TYPE_MESSAGE),
                label=_F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL,
            )
            if kind not in _SCALARS:
                field.type_name = f".{package}.{kind}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.{root}"))


_CheckedExpr = message_class()


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
