"""A checked CEL expression's calls, renamed: the part of cel.expr's CheckedExpr the sandbox reads.

CEL's C++ runtime picks an implementation by function name and argument kinds, but the type
checker knows more: which overload a call resolved to (`list_duration_sum_duration`, not just a
list's `sum`). Where the overloads of one kind differ (the zero of an empty list's sum), the
environment renames such a call to a runtime function of that overload alone.

The messages below declare only the fields walked (cel/expr/syntax.proto and checked.proto field
numbers); the others are kept as unknown fields and written back unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from google.protobuf import any_pb2, descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto


def _field(
    message: Any, name: str, number: int, kind: int, type_name: str = "", repeated: bool = False
) -> None:
    field = message.field.add(
        name=name,
        number=number,
        type=kind,
        label=_F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL,
    )
    if type_name:
        field.type_name = type_name


def _checked_expr_class() -> Any:
    file = descriptor_pb2.FileDescriptorProto(
        name="volcano_guard_partial_checked.proto", package="cel.expr", syntax="proto3"
    )
    message, string, int64, expr = _F.TYPE_MESSAGE, _F.TYPE_STRING, _F.TYPE_INT64, ".cel.expr.Expr"
    node = file.message_type.add(name="Expr")
    _field(node, "id", 2, int64)
    for name, number, nested in (
        ("select_expr", 5, "Select"),
        ("call_expr", 6, "Call"),
        ("list_expr", 7, "CreateList"),
        ("struct_expr", 8, "CreateStruct"),
        ("comprehension_expr", 9, "Comprehension"),
    ):
        _field(node, name, number, message, f"{expr}.{nested}")
    _field(node.nested_type.add(name="Select"), "operand", 1, message, expr)
    call = node.nested_type.add(name="Call")
    _field(call, "target", 1, message, expr)
    _field(call, "function", 2, string)
    _field(call, "args", 3, message, expr, repeated=True)
    _field(node.nested_type.add(name="CreateList"), "elements", 1, message, expr, repeated=True)
    struct = node.nested_type.add(name="CreateStruct")
    _field(struct, "entries", 2, message, f"{expr}.CreateStruct.Entry", repeated=True)
    entry = struct.nested_type.add(name="Entry")
    _field(entry, "map_key", 3, message, expr)
    _field(entry, "value", 4, message, expr)
    comprehension = node.nested_type.add(name="Comprehension")
    for name, number in (
        ("iter_range", 2),
        ("accu_init", 4),
        ("loop_condition", 5),
        ("loop_step", 6),
        ("result", 7),
    ):
        _field(comprehension, name, number, message, expr)
    reference = file.message_type.add(name="Reference")
    _field(reference, "overload_id", 3, string, repeated=True)
    checked = file.message_type.add(name="CheckedExpr")
    map_entry = checked.nested_type.add(name="ReferenceMapEntry")
    map_entry.options.map_entry = True
    _field(map_entry, "key", 1, int64)
    _field(map_entry, "value", 2, message, ".cel.expr.Reference")
    _field(checked, "reference_map", 2, message, ".cel.expr.CheckedExpr.ReferenceMapEntry", True)
    _field(checked, "expr", 4, message, expr)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("cel.expr.CheckedExpr"))


_CheckedExpr = _checked_expr_class()


def _children(node: Any) -> Iterator[Any]:
    if node.HasField("select_expr"):
        yield node.select_expr.operand
    if node.HasField("call_expr"):
        if node.call_expr.HasField("target"):
            yield node.call_expr.target
        yield from node.call_expr.args
    if node.HasField("list_expr"):
        yield from node.list_expr.elements
    if node.HasField("struct_expr"):
        for entry in node.struct_expr.entries:
            if entry.HasField("map_key"):
                yield entry.map_key
            yield entry.value
    if node.HasField("comprehension_expr"):
        comprehension = node.comprehension_expr
        for part in ("iter_range", "accu_init", "loop_condition", "loop_step", "result"):
            yield getattr(comprehension, part)


def rename_calls(serialized: bytes, renamed: Mapping[str, str]) -> bytes:
    """The serialized (Any-wrapped) CheckedExpr with each call resolved only to overloads in
    `renamed` (overload id -> runtime function name), all of one name, calling that function
    instead."""
    if not any(overload.encode() in serialized for overload in renamed):
        return serialized
    wrapper = any_pb2.Any()
    wrapper.ParseFromString(serialized)
    checked = _CheckedExpr()
    checked.ParseFromString(wrapper.value)
    stack = [checked.expr]
    while stack:
        node = stack.pop()
        overloads: list[str] = []
        if node.id in checked.reference_map:
            overloads = list(checked.reference_map[node.id].overload_id)
        names = {renamed.get(overload) for overload in overloads}
        if node.HasField("call_expr") and len(names) == 1 and None not in names:
            node.call_expr.function = names.pop() or ""
        stack.extend(_children(node))
    wrapper.value = checked.SerializeToString()
    return wrapper.SerializeToString()
