"""Admission expressions checked when a policy or webhook configuration is written, as
kube-apiserver 1.30 checks them.

kubernetes/kubernetes pkg/apis/admissionregistration/validation/validation.go compiles every
expression of a ValidatingAdmissionPolicy and of a webhook's matchConditions on write, in the
NewExpressions environment of k8s.io/apiserver pkg/admission/plugin/cel/compile.go, and refuses
the object (422) with `FIELD: Invalid value: "EXPRESSION": DETAIL` where:
- the expression does not compile: `compilation failed: ...` (the checker's words, here
  cel-cpp's): an undeclared variable, a misspelt field of `request` or `namespaceObject`
  ("undefined field 'foo1'"), of `variables` (a variable not declared before this expression),
  an overload that does not exist for the checked types;
- one of the environment's AST validators (pkg/cel/environment/base.go, since 1.29:
  cel-go cel/validator.go ValidateDurationLiterals, ValidateTimestampLiterals,
  ValidateRegexLiterals, ValidateHomogeneousAggregateLiterals) reports an issue: a literal
  `duration(...)`, `timestamp(...)` or `matches(...)` argument that does not parse ("invalid
  matches argument"), or a list or map literal whose elements are not all of one type
  ("expected type 'int' but found 'string'"), except inside a `format` call;
- the output type is not the one the field takes (CompileCELExpression: "must evaluate to
  bool" for a validation or matchCondition, string for a messageExpression, string or null for
  an audit annotation's valueExpression; a variable takes any type).

What each expression sees (validation.go, per field): `object`, `oldObject` and `params` (when the
policy has a paramKind) are dyn, `request` and `namespaceObject` typed (cel_types); `variables`
only where the policy declares variables (the composited compiler), typed by the variables
compiled before; `authorizer` in every field but messageExpression. The sandbox does not model
the authorizer library: an expression that uses it is refused, saying so.

1.30 writes no warnings for a policy on write (the registry strategy's WarningsOnCreate and
WarningsOnUpdate return none): the schema-aware type check of `object` and `params`
(validating/typechecking.go) reports to status.typeChecking, from a controller, never refusing.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from cel_expr_python import cel

from volcano_guard_sandbox.apiserver import cel_types, kubernetes_cel, object_types, versions

BOOL = ("bool",)
STRING = ("string",)
STRING_OR_NULL = ("string", "null_type")
ANY: tuple[str, ...] = ()

NOT_MODELLED_AUTHORIZER = (
    "compilation failed: the sandbox does not model authorizer checks "
    "(kube-apiserver's `authorizer` variable and its library)"
)

# 1.30 keeps a variable's optional value (typed dyn); cel-expr-python cannot hand one to Python,
# where the sandbox holds each variable's value between expressions.
NOT_MODELLED_OPTIONAL_VALUE = (
    "compilation failed: the sandbox does not model a variable holding an optional value "
    "(cel-expr-python cannot return one to Python): unwrap it (orValue, value) in the variable"
)

# cel-cpp names an undeclared variable with what is selected from it: 'authorizer.requestResource'.
_UNDECLARED_AUTHORIZER = re.compile(r"undeclared reference to 'authorizer[.']")

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
# The most variables of a policy the sandbox compiles: each sees those before it through a
# protobuf type of its own, a CEL environment built per variable (tens of milliseconds), so
# a policy of tens of thousands of them would hold a write for minutes. 1.30 sets no bound.
MAX_VARIABLES = 100

# validation.go isCELIdentifier: a variable's name.
_IDENTIFIER = re.compile(r"[_a-zA-Z][_a-zA-Z0-9]*")
_RESERVED = frozenset(
    {
        *("true", "false", "null", "in", "as", "break", "const", "continue", "else", "for"),
        *("function", "if", "import", "let", "loop", "package", "namespace", "return", "var"),
        *("void", "while"),
    }
)

VariableKinds = tuple[tuple[str, Any], ...]
KUBERNETES_1_30 = versions.KubernetesVersion(30)


@dataclass(frozen=True)
class Declarations:
    """compile.go OptionalVariableDeclarations, and the composited `variables` (None: none)."""

    params: bool = False
    authorizer: bool = False
    variables: VariableKinds | None = None
    # The CEL environment version a new expression is compiled in: the sandbox passes the one of
    # the release it plays; by default 1.30's (1.29), which this module's docstring and the
    # conformance tables are held to.
    cel_version: tuple[int, int] = KUBERNETES_1_30.cel_for_new_expressions
    # compile.go HasPatchTypes: JSONPatch and the jsonpatch library (a mutation's expressions),
    # and the serialized FileDescriptorProto of its Object types (object_types.declarations).
    patch_types: bool = False
    object_types: bytes = b""


@dataclass(frozen=True)
class Checked:
    error: str = ""  # the detail after `Invalid value: "EXPRESSION": `, "" if admitted
    kind: Any = "dyn"  # the output type as a field of kubernetes.variables


@functools.lru_cache(maxsize=128)
def _environment(declarations: Declarations) -> cel.Env:
    variables: dict[str, cel.Type] = {
        "object": cel.Type.DYN,
        "oldObject": cel.Type.DYN,
        "request": cel.Type(cel_types.REQUEST_TYPE),
        "namespaceObject": cel.Type(cel_types.NAMESPACE_TYPE),
    }
    if declarations.params:
        variables["params"] = cel.Type.DYN
    fields = None
    if declarations.variables is not None:
        variables["variables"] = cel.Type(cel_types.VARIABLES_TYPE)
        fields = dict(declarations.variables)
    return versions.cel_environment(
        variables,
        declarations.cel_version,
        pool=cel_types.pool(
            fields,
            declarations.patch_types,
            [object_types.file_descriptor(declarations.object_types)]
            if declarations.object_types
            else [],
        ),
        extensions=[kubernetes_cel.jsonpatch_library()] if declarations.patch_types else (),
    )


@functools.lru_cache(maxsize=1024)
def check(expression: str, declarations: Declarations, returns: tuple[str, ...]) -> Checked:
    """compile.go CompileCELExpression: parse, check, validate the AST, then the output type."""
    if (surrogate := _LONE_SURROGATE.search(expression)) is not None:
        # cel-cpp takes UTF-8 only (its binding raises TypeError); the API's JSON decoding
        # turns these into U+FFFD, so only a caller that skips it gets here.
        return Checked(
            f"compilation failed: a lone UTF-16 surrogate at offset {surrogate.start()} "
            "is not a character"
        )
    try:
        program = _environment(declarations).compile(expression)
    except RuntimeError as exc:
        if declarations.authorizer and _UNDECLARED_AUTHORIZER.search(str(exc)):
            return Checked(NOT_MODELLED_AUTHORIZER)
        return Checked(f"compilation failed: {exc}")
    tree = cel_types.checked(program.serialize())
    output = tree.type_map[tree.expr.id]
    if returns and cel_types.format_type(output) not in returns:
        wanted = returns[0] if len(returns) == 1 else f"one of [{' '.join(returns)}]"
        return Checked(f"must evaluate to {wanted}")
    if "optional_type" in cel_types.format_type(output):
        return Checked(NOT_MODELLED_OPTIONAL_VALUE)
    return Checked("", cel_types.field_kind(output))


# -- the AST validators ---------------------------------------------------------------------------

_CHILDREN = {
    "select_expr": lambda e: [e.select_expr.operand],
    "call_expr": lambda e: (
        ([e.call_expr.target] if e.call_expr.HasField("target") else []) + list(e.call_expr.args)
    ),
    "list_expr": lambda e: list(e.list_expr.elements),
    "struct_expr": lambda e: [
        child
        for entry in e.struct_expr.entries
        for child in ([entry.map_key] if entry.HasField("map_key") else []) + [entry.value]
    ],
    "comprehension_expr": lambda e: [
        getattr(e.comprehension_expr, part)
        for part in ("iter_range", "accu_init", "loop_condition", "loop_step", "result")
    ],
}


def _kind(expr: Any) -> str:
    for name in ("const_expr", "ident_expr", *_CHILDREN):
        if expr.HasField(name):
            return name
    return ""


def _walk(root: Any) -> Iterator[tuple[Any, str, bool]]:
    """(node, kind, exempt) for every node: exempt for a list or map literal that is an
    argument of `format`, or inside one (cel-go inExemptFunction). A stack, not recursion: an
    expression's AST is as deep as its nesting."""
    stack = [(root, False)]
    while stack:
        expr, exempt = stack.pop()
        kind = _kind(expr)
        yield expr, kind, exempt
        is_format = kind == "call_expr" and expr.call_expr.function == "format"
        aggregate = kind in ("list_expr", "struct_expr")
        children = _CHILDREN[kind](expr) if kind in _CHILDREN else []
        stack.extend((child, is_format or (aggregate and exempt)) for child in reversed(children))


def literal_issues(tree: Any) -> Iterator[str]:
    for node, kind, exempt in _walk(tree.expr):
        if kind == "list_expr" and not exempt:
            yield from _mixed_list(tree, node)
        elif kind == "struct_expr" and not exempt and not node.struct_expr.message_name:
            yield from _mixed_map(tree, node)
        elif kind == "call_expr" and node.call_expr.function in _LITERAL_CHECKS:
            yield from _bad_literal(tree, node)


def _element_type(tree: Any, expr: Any, optional: bool) -> Any:
    celtype = tree.type_map[expr.id]
    if optional and celtype.WhichOneof("type_kind") == "abstract_type":
        parameters = celtype.abstract_type.parameter_types
        return parameters[0] if parameters else celtype
    return celtype


def _mixed_list(tree: Any, node: Any) -> Iterator[str]:
    """validator.go homogeneousAggregateLiteralValidator, lists: the first mismatch."""
    optional = set(node.list_expr.optional_indices)
    first = None
    for index, element in enumerate(node.list_expr.elements):
        found = cel_types.format_type(_element_type(tree, element, index in optional))
        if first is None:
            first = found
        elif found != first:
            yield _issue(tree, element.id, f"expected type '{first}' but found '{found}'")
            return


def _mixed_map(tree: Any, node: Any) -> Iterator[str]:
    """validator.go homogeneousAggregateLiteralValidator, maps: every mismatched key or value."""
    first: tuple[str, str] | None = None
    for entry in node.struct_expr.entries:
        key = cel_types.format_type(tree.type_map[entry.map_key.id])
        value = cel_types.format_type(_element_type(tree, entry.value, entry.optional_entry))
        if first is None:
            first = (key, value)
            continue
        if key != first[0]:
            yield _issue(tree, entry.map_key.id, f"expected type '{first[0]}' but found '{key}'")
        if value != first[1]:
            yield _issue(tree, entry.value.id, f"expected type '{first[1]}' but found '{value}'")


# validator.go newFormatValidator(function, 0, ...): the call's first argument (the target of a
# member call is not an argument), when a literal, must evaluate. cel-cpp's RE2 stands for Go's
# regexp (the same syntax), its duration and timestamp parsers for cel-go's.
_LITERAL_CHECKS = {
    "matches": "''.matches(s)",
    "duration": "duration(s)",
    "timestamp": "timestamp(s)",
}
_LITERAL_ENVIRONMENT = cel.NewEnv(variables={"s": cel.Type.STRING, "i": cel.Type.INT})
# evalCall evaluates a literal of any kind: a timestamp may also be given in seconds.
_INT_LITERAL_CHECKS: dict[str, str] = {"timestamp": "timestamp(i)"}


@functools.lru_cache(maxsize=256)
def _literal_fails(function: str, literal: str | int) -> bool:
    data: dict[str, str | int]
    if isinstance(literal, int):
        expression, data = _INT_LITERAL_CHECKS[function], {"i": literal}
    else:
        expression, data = _LITERAL_CHECKS[function], {"s": literal}
    value = _LITERAL_ENVIRONMENT.compile(expression).eval(data=data)
    return value.type() == cel.Type.ERROR


def _bad_literal(tree: Any, node: Any) -> Iterator[str]:
    args = node.call_expr.args
    if not args or _kind(args[0]) != "const_expr":
        return
    constant = args[0].const_expr
    kind = constant.WhichOneof("constant_kind")
    if kind == "int64_value" and node.call_expr.function in _INT_LITERAL_CHECKS:
        literal: str | int = constant.int64_value
    elif kind == "string_value":
        literal = constant.string_value
    else:
        return
    if _literal_fails(node.call_expr.function, literal):
        yield _issue(tree, args[0].id, f"invalid {node.call_expr.function} argument")


def _issue(tree: Any, expr_id: int, message: str) -> str:
    """cel-go's issue form: ERROR: <input>:LINE:COLUMN: MESSAGE."""
    offset = tree.source_info.positions.get(expr_id, 0)
    starts = [0, *tree.source_info.line_offsets]
    line = max(i for i, start in enumerate(starts) if start <= offset) + 1
    return f"ERROR: <input>:{line}:{offset - starts[line - 1] + 1}: {message}"


# -- what validation.go checks, field by field ----------------------------------------------------


def is_cel_identifier(name: str) -> bool:
    return bool(_IDENTIFIER.fullmatch(name)) and name not in _RESERVED


def policy_errors(
    spec: Mapping[str, Any], cel_version: tuple[int, int] = Declarations.cel_version
) -> list[str]:
    """validation.go validateValidatingAdmissionPolicySpec, its CEL part: every expression
    refused, as `FIELD: Invalid value: "EXPRESSION": DETAIL`, and every variable name that is not
    a CEL identifier; compiled in the CEL environment of cel_version."""
    params = bool(spec.get("paramKind"))
    errors = too_many_match_conditions(spec.get("matchConditions"), "spec.matchConditions")
    errors += _field_errors(
        spec, "matchConditions", "expression", Declarations(params, True, None, cel_version), BOOL
    )  # the stateless compiler: no `variables`
    declared, name_errors = _variables(spec.get("variables") or (), params, cel_version)
    errors += name_errors
    errors += _field_errors(
        spec, "validations", "expression", Declarations(params, True, declared, cel_version), BOOL
    )
    errors += _field_errors(
        spec,
        "validations",
        "messageExpression",
        Declarations(params, False, declared, cel_version),
        STRING,
    )
    errors += _field_errors(
        spec,
        "auditAnnotations",
        "valueExpression",
        Declarations(params, True, declared, cel_version),
        STRING_OR_NULL,
    )
    return errors


def _variables(
    declared: Any, params: bool, cel_version: tuple[int, int]
) -> tuple[VariableKinds | None, list[str]]:
    """composition.go CompileAndStoreVariable in order: each variable sees those before it, typed
    by its output type (dyn when it does not compile)."""
    if not declared:
        return None, []
    if len(declared) > MAX_VARIABLES:
        return None, [
            f"spec.variables: Too many: {len(declared)}: the sandbox compiles at most "
            f"{MAX_VARIABLES} variables a policy (each is a CEL environment of its own)"
        ]
    errors: list[str] = []
    kinds: dict[str, Any] = {}
    for index, variable in enumerate(declared):
        if not isinstance(variable, Mapping):
            continue
        name, expression = str(variable.get("name") or ""), str(variable.get("expression") or "")
        if name.strip() and not is_cel_identifier(name):
            errors.append(
                f"spec.variables[{index}].name: Invalid value: {json.dumps(name)}: "
                "name is not a valid CEL identifier"
            )
        checked = Checked()
        if expression.strip():
            before = Declarations(params, True, tuple(kinds.items()), cel_version)
            checked = check(expression, before, ANY)
            if checked.error:
                errors.append(
                    f"spec.variables[{index}].expression: Invalid value: "
                    f"{json.dumps(expression)}: {checked.error}"
                )
        if is_cel_identifier(name):
            kinds[name] = checked.kind
    return tuple(kinds.items()), errors


def _field_errors(
    spec: Mapping[str, Any],
    field_name: str,
    key: str,
    declarations: Declarations,
    returns: tuple[str, ...],
) -> list[str]:
    errors = []
    for index, item in enumerate(spec.get(field_name) or ()):
        expression = item.get(key) if isinstance(item, Mapping) else None
        if not expression or not str(expression).strip():
            continue
        checked = check(str(expression), declarations, returns)
        if checked.error:
            errors.append(
                f"spec.{field_name}[{index}].{key}: Invalid value: "
                f"{json.dumps(str(expression))}: {checked.error}"
            )
    return errors


MAX_MATCH_CONDITIONS = 64  # admissionregistration/v1 types.go: "a maximum of 64 match conditions"


def too_many_match_conditions(conditions: Any, path: str) -> list[str]:
    """validation.go's field.TooMany for more than 64 matchConditions (policies and webhooks)."""
    if isinstance(conditions, list) and len(conditions) > MAX_MATCH_CONDITIONS:
        return [f"{path}: Too many: {len(conditions)}: must have at most 64 items"]
    return []


def match_condition_error(
    expression: str, cel_version: tuple[int, int] = Declarations.cel_version
) -> str:
    """validation.go validateMatchConditionsExpression for a webhook: no params, an authorizer,
    a bool, in the CEL environment of cel_version. The detail, "" when admitted."""
    declarations = Declarations(params=False, authorizer=True, cel_version=cel_version)
    return check(expression.strip(), declarations, BOOL).error
