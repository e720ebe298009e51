"""The types kube-apiserver 1.30 declares for admission expressions, as protobuf messages CEL's
C++ checker can read, and the checked AST it hands back.

k8s.io/apiserver pkg/admission/plugin/cel/compile.go declares `request` as BuildRequestType
(kubernetes.AdmissionRequest and its GroupVersionKind, GroupVersionResource and UserInfo) and
`namespaceObject` as BuildNamespaceType (kubernetes.Namespace with a few of its fields); `object`,
`oldObject` and `params` are dyn. composition.go declares `variables` as an object type,
kubernetes.variables, one field per variable typed as its expression's output type
(convertCelTypeToDeclType: scalars as they are, lists and maps with their parameters, any other
type, a message included, dyn). Here each of those is a proto3 message in a descriptor pool, the
route kubernetes_cel takes for kubernetes.Quantity: the checker then refuses an undefined field
("undefined field 'foo1'") as cel-go refuses it.

Where proto cannot say a type exactly, the field is a google.protobuf value the checker reads as
dyn: UserInfo.extra is map(string, list(dyn)) (1.30: list(string)), and a variable's list of lists
or map of lists has dyn elements. Those read more loosely than 1.30 (a misspelt field below them
is not caught), and a list literal mixing one of them with a typed value is refused as mixed.

`checked` decodes the cel.expr.CheckedExpr that Expression.serialize() returns (the subset of
cel/expr/syntax.proto and checked.proto the validators read), so the sandbox can walk the AST
with each node's checked type, as cel-go's AST validators do.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from google.protobuf import (
    any_pb2,
    descriptor_pb2,
    descriptor_pool,
    duration_pb2,
    message_factory,
    struct_pb2,
    timestamp_pb2,
)

from volcano_guard_sandbox.apiserver import kubernetes_cel

Field = descriptor_pb2.FieldDescriptorProto
PACKAGE = "kubernetes"
REQUEST_TYPE = "kubernetes.AdmissionRequest"
NAMESPACE_TYPE = "kubernetes.Namespace"
VARIABLES_TYPE = "kubernetes.variables"  # composition.go VariablesTypeName

_SCALARS = {
    "string": Field.TYPE_STRING,
    "bool": Field.TYPE_BOOL,
    "int": Field.TYPE_INT64,
    "uint": Field.TYPE_UINT64,
    "double": Field.TYPE_DOUBLE,
    "bytes": Field.TYPE_BYTES,
}
_MESSAGES = {
    "timestamp": ".google.protobuf.Timestamp",
    "duration": ".google.protobuf.Duration",
    "dyn": ".google.protobuf.Value",
    "list_dyn": ".google.protobuf.ListValue",
}
_WELL_KNOWN_FILES = (struct_pb2, timestamp_pb2, duration_pb2)

# A field: (name, type, repeated). A type is a scalar or _MESSAGES name, a kubernetes message
# (".kubernetes.X"), or ("map", key, value) for a map field.
FieldSpec = tuple[str, Any, bool]


def _admission_messages() -> dict[str, list[FieldSpec]]:
    """compile.go BuildRequestType and BuildNamespaceType, field by field."""
    gvk = [("group", "string", False), ("version", "string", False), ("kind", "string", False)]
    gvr = [("group", "string", False), ("version", "string", False), ("resource", "string", False)]
    return {
        "GroupVersionKind": gvk,
        "GroupVersionResource": gvr,
        "UserInfo": [
            ("username", "string", False),
            ("uid", "string", False),
            ("groups", "string", True),
            ("extra", ("map", "string", "list_dyn"), False),
        ],
        "AdmissionRequest": [
            ("kind", ".kubernetes.GroupVersionKind", False),
            ("resource", ".kubernetes.GroupVersionResource", False),
            ("subResource", "string", False),
            ("requestKind", ".kubernetes.GroupVersionKind", False),
            ("requestResource", ".kubernetes.GroupVersionResource", False),
            ("requestSubResource", "string", False),
            ("name", "string", False),
            ("namespace", "string", False),
            ("operation", "string", False),
            ("userInfo", ".kubernetes.UserInfo", False),
            ("dryRun", "bool", False),
            ("options", "dyn", False),
        ],
        "NamespaceSpec": [("finalizers", "string", True)],
        "NamespaceCondition": [
            ("status", "string", False),
            ("type", "string", False),
            ("lastTransitionTime", "timestamp", False),
            ("message", "string", False),
            ("reason", "string", False),
        ],
        "NamespaceStatus": [
            ("conditions", ".kubernetes.NamespaceCondition", True),
            ("phase", "string", False),
        ],
        "NamespaceMetadata": [
            ("name", "string", False),
            ("generateName", "string", False),
            ("namespace", "string", False),
            ("labels", ("map", "string", "string"), False),
            ("annotations", ("map", "string", "string"), False),
            ("UID", "string", False),  # sic: upstream declares UID, not uid
            ("creationTimestamp", "timestamp", False),
            ("deletionGracePeriodSeconds", "int", False),
            ("deletionTimestamp", "timestamp", False),
            ("generation", "int", False),
            ("resourceVersion", "string", False),
            ("finalizers", "string", True),
        ],
        "Namespace": [
            ("metadata", ".kubernetes.NamespaceMetadata", False),
            ("spec", ".kubernetes.NamespaceSpec", False),
            ("status", ".kubernetes.NamespaceStatus", False),
        ],
    }


def _set_type(field: Any, kind: Any) -> None:
    if kind in _SCALARS:
        field.type = _SCALARS[kind]
    else:
        field.type = Field.TYPE_MESSAGE
        field.type_name = _MESSAGES.get(kind, kind)


def _add_message(
    file: descriptor_pb2.FileDescriptorProto, name: str, fields: Iterable[FieldSpec]
) -> None:
    message = file.message_type.add(name=name)
    for number, (field_name, kind, repeated) in enumerate(fields, start=1):
        field = message.field.add(name=field_name, number=number)
        repeated = repeated or isinstance(kind, tuple)  # a map is a repeated MapEntry
        field.label = Field.LABEL_REPEATED if repeated else Field.LABEL_OPTIONAL
        if isinstance(kind, tuple):  # a map: a repeated nested MapEntry message
            entry = message.nested_type.add(name=f"{field_name[:1].upper()}{field_name[1:]}Entry")
            entry.options.map_entry = True
            _set_type(entry.field.add(name="key", number=1, label=Field.LABEL_OPTIONAL), kind[1])
            _set_type(entry.field.add(name="value", number=2, label=Field.LABEL_OPTIONAL), kind[2])
            field.type = Field.TYPE_MESSAGE
            field.type_name = f".{PACKAGE}.{name}.{entry.name}"
        else:
            _set_type(field, kind)


def _file(
    name: str, messages: Mapping[str, Iterable[FieldSpec]]
) -> descriptor_pb2.FileDescriptorProto:
    file = descriptor_pb2.FileDescriptorProto(
        name=name,
        package=PACKAGE,
        syntax="proto3",
        dependency=[m.DESCRIPTOR.name for m in _WELL_KNOWN_FILES],
    )
    for message, fields in messages.items():
        _add_message(file, message, fields)
    return file


def _copied(descriptor: Any) -> descriptor_pb2.FileDescriptorProto:
    file = descriptor_pb2.FileDescriptorProto()
    descriptor.CopyToProto(file)
    return file


_BASE_FILES = (
    *(_copied(module.DESCRIPTOR) for module in _WELL_KNOWN_FILES),
    _copied(kubernetes_cel.POOL.FindMessageTypeByName(kubernetes_cel.QUANTITY_TYPE).file),
    _file("volcano_guard_admission_types.proto", _admission_messages()),
)


# cel/mutation/jsonpatch.go JSONPatchType: "JSONPatch", outside any package, with op, path and
# from strings and a dyn value; declared only where a mutating policy's mutations compile
# (plugin/cel compile.go hasPatchTypes).
JSONPATCH_TYPE = "JSONPatch"


def _jsonpatch_file() -> descriptor_pb2.FileDescriptorProto:
    file = descriptor_pb2.FileDescriptorProto(
        name="volcano_guard_jsonpatch.proto",
        syntax="proto3",
        dependency=[struct_pb2.DESCRIPTOR.name],
    )
    _add_message(
        file,
        JSONPATCH_TYPE,
        [
            ("op", "string", False),
            ("path", "string", False),
            ("from", "string", False),
            ("value", "dyn", False),
        ],
    )
    return file


def pool(
    variables: Mapping[str, Any] | None = None,
    patch_types: bool = False,
    extra_files: Iterable[descriptor_pb2.FileDescriptorProto] = (),
) -> descriptor_pool.DescriptorPool:
    """The Quantity the libraries need, the admission types, and kubernetes.variables with a
    field per variable (name: FieldSpec type from `field_kind`) when variables is not None;
    with patch_types, the JSONPatch type of a mutation's expression."""
    result = descriptor_pool.DescriptorPool()
    for file in _BASE_FILES:
        result.Add(file)
    if patch_types:
        result.Add(_jsonpatch_file())
    for file in extra_files:  # a mutation's Object types (object_types)
        result.Add(file)
    if variables is not None:
        fields = [_variable_field(name, kind) for name, kind in variables.items()]
        result.Add(_file("volcano_guard_variables.proto", {"variables": fields}))
    return result


def _variable_field(name: str, kind: Any) -> FieldSpec:
    if isinstance(kind, tuple) and kind[0] == "list":
        return (name, kind[1], True)
    return (name, kind, False)


# -- the output type of a variable, as a field ---------------------------------------------------


def field_kind(celtype: Any) -> Any:
    """composition.go convertCelTypeToDeclType, as a field of kubernetes.variables: a scalar,
    timestamp or duration as itself; a list or a map with representable parameters as itself;
    anything else (dyn, null, a message, an optional, a type) as dyn."""
    scalar = _element_kind(celtype)
    if scalar:
        return scalar
    kind = celtype.WhichOneof("type_kind")
    if kind == "list_type":
        return ("list", _element_kind(celtype.list_type.elem_type) or "dyn")
    if kind == "map_type":
        key = _element_kind(celtype.map_type.key_type)
        if key in ("string", "int", "uint", "bool"):
            return ("map", key, _element_kind(celtype.map_type.value_type) or "dyn")
    return "dyn"


_PRIMITIVES = {1: "bool", 2: "int", 3: "uint", 4: "double", 5: "string", 6: "bytes"}
_WELL_KNOWN = {2: "timestamp", 3: "duration"}


def _element_kind(celtype: Any) -> str | None:
    kind = celtype.WhichOneof("type_kind")
    if kind == "primitive":
        return _PRIMITIVES.get(celtype.primitive)
    if kind == "well_known":
        return _WELL_KNOWN.get(celtype.well_known)
    return None


# -- cel.expr.CheckedExpr, the subset the validators read ----------------------------------------

_CEL = "volcano_guard.celexpr"


def _checked_file() -> descriptor_pb2.FileDescriptorProto:
    file = descriptor_pb2.FileDescriptorProto(name="volcano_guard_celexpr.proto", package=_CEL)
    file.syntax = "proto3"

    def message(name: str, fields: list[tuple[str, int, Any, bool]], oneof: str = "") -> Any:
        added = file.message_type.add(name=name)
        if oneof:
            added.oneof_decl.add(name=oneof)
        for field_name, number, kind, repeated in fields:
            field = added.field.add(name=field_name, number=number)
            field.label = Field.LABEL_REPEATED if repeated else Field.LABEL_OPTIONAL
            if isinstance(kind, str):
                field.type = Field.TYPE_MESSAGE
                field.type_name = f".{_CEL}.{kind}"
            else:
                field.type = kind
                if oneof:
                    field.oneof_index = 0
        return added

    def oneof_all(added: Any) -> None:
        for field in added.field:
            field.oneof_index = 0

    i64, i32, text, flag = Field.TYPE_INT64, Field.TYPE_INT32, Field.TYPE_STRING, Field.TYPE_BOOL
    message("Empty", [])
    message("Ident", [("name", 1, text, False)])
    message("Select", [("operand", 1, "Expr", False), ("field", 2, text, False)])
    message(
        "Call",
        [("target", 1, "Expr", False), ("function", 2, text, False), ("args", 3, "Expr", True)],
    )
    message("CreateList", [("elements", 1, "Expr", True), ("optional_indices", 2, i32, True)])
    message(
        "Entry",
        [
            ("id", 1, i64, False),
            ("field_key", 2, text, False),
            ("map_key", 3, "Expr", False),
            ("value", 4, "Expr", False),
            ("optional_entry", 5, flag, False),
        ],
    )
    message("CreateStruct", [("message_name", 1, text, False), ("entries", 2, "Entry", True)])
    message(
        "Comprehension",
        [
            ("iter_range", 2, "Expr", False),
            ("accu_init", 4, "Expr", False),
            ("loop_condition", 5, "Expr", False),
            ("loop_step", 6, "Expr", False),
            ("result", 7, "Expr", False),
        ],
    )
    constant = message(
        "Constant",
        [
            ("null_value", 1, i32, False),
            ("bool_value", 2, flag, False),
            ("int64_value", 3, i64, False),
            ("uint64_value", 4, Field.TYPE_UINT64, False),
            ("double_value", 5, Field.TYPE_DOUBLE, False),
            ("string_value", 6, text, False),
            ("bytes_value", 7, Field.TYPE_BYTES, False),
        ],
        oneof="constant_kind",
    )
    oneof_all(constant)
    message(
        "Expr",
        [
            ("id", 2, i64, False),
            ("const_expr", 3, "Constant", False),
            ("ident_expr", 4, "Ident", False),
            ("select_expr", 5, "Select", False),
            ("call_expr", 6, "Call", False),
            ("list_expr", 7, "CreateList", False),
            ("struct_expr", 8, "CreateStruct", False),
            ("comprehension_expr", 9, "Comprehension", False),
        ],
    )
    message("ListType", [("elem_type", 1, "Type", False)])
    message("MapType", [("key_type", 1, "Type", False), ("value_type", 2, "Type", False)])
    message("AbstractType", [("name", 1, text, False), ("parameter_types", 2, "Type", True)])
    celtype = message(
        "Type",
        [
            ("dyn", 1, "Empty", False),
            ("null", 2, i32, False),
            ("primitive", 3, i32, False),
            ("wrapper", 4, i32, False),
            ("well_known", 5, i32, False),
            ("list_type", 6, "ListType", False),
            ("map_type", 7, "MapType", False),
            ("message_type", 9, text, False),
            ("type_param", 10, text, False),
            ("type", 11, "Type", False),
            ("error", 12, "Empty", False),
            ("abstract_type", 14, "AbstractType", False),
        ],
        oneof="type_kind",
    )
    oneof_all(celtype)
    positions = message("PositionsEntry", [("key", 1, i64, False), ("value", 2, i32, False)])
    positions.options.map_entry = True
    message(
        "SourceInfo",
        [("line_offsets", 3, i32, True), ("positions", 4, "PositionsEntry", True)],
    )
    types = message("TypeMapEntry", [("key", 1, i64, False), ("value", 2, "Type", False)])
    types.options.map_entry = True
    message(
        "CheckedExpr",
        [
            ("type_map", 3, "TypeMapEntry", True),
            ("expr", 4, "Expr", False),
            ("source_info", 5, "SourceInfo", False),
        ],
    )
    return file


_CHECKED_POOL = descriptor_pool.DescriptorPool()
_CHECKED_POOL.Add(_checked_file())
_CheckedExpr = message_factory.GetMessageClass(
    _CHECKED_POOL.FindMessageTypeByName(f"{_CEL}.CheckedExpr")
)


def checked(serialized: bytes) -> Any:
    """The CheckedExpr of Expression.serialize() (a google.protobuf.Any holding one)."""
    wrapper = any_pb2.Any()
    wrapper.ParseFromString(serialized)
    result = _CheckedExpr()
    result.ParseFromString(wrapper.value)
    return result


def format_type(celtype: Any) -> str:
    """cel-go FormatCELType: int, list(string), map(string, int), google.protobuf.Timestamp..."""
    kind = celtype.WhichOneof("type_kind")
    if kind == "primitive":
        return _PRIMITIVES.get(celtype.primitive, "dyn")
    if kind == "well_known":
        names = {1: "any", 2: "google.protobuf.Timestamp", 3: "google.protobuf.Duration"}
        return names.get(celtype.well_known, "dyn")
    if kind == "wrapper":
        return f"wrapper({_PRIMITIVES.get(celtype.wrapper, 'dyn')})"
    if kind == "list_type":
        return f"list({format_type(celtype.list_type.elem_type)})"
    if kind == "map_type":
        key, value = celtype.map_type.key_type, celtype.map_type.value_type
        return f"map({format_type(key)}, {format_type(value)})"
    if kind == "abstract_type":
        parameters = ", ".join(format_type(p) for p in celtype.abstract_type.parameter_types)
        return (
            f"{celtype.abstract_type.name}({parameters})"
            if parameters
            else celtype.abstract_type.name
        )
    if kind == "type":
        return f"type({format_type(celtype.type)})"
    return {
        "null": "null_type",
        "message_type": celtype.message_type,
        "type_param": celtype.type_param,
    }.get(kind or "", "dyn")
