"""The CEL cases of upstream's own test tables, read from the Go test files as text.

Each reader knows one file's tables: which variable holds them, what its fields mean, and what
the test does with them (a `valid` rule must evaluate to true; an `errors` entry is a substring
of the error; quantity_test's errors are regular expressions). A table element the reader cannot
parse is counted as unparsed, with why, never dropped.

What a case needs that a 1.30 policy's environment lacks (a CRD's typed `self`, the IP library,
an authorizer) is written on the case as a need; runner.NOT_MODELLED says which needs the
sandbox leaves out and why.
"""

from __future__ import annotations

import base64
import datetime
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol, TypeVar

from volcano_guard_sandbox.conformance import golang
from volcano_guard_sandbox.conformance.golang import Node, Values

ExpectedKind = Literal["value", "error", "compile_error", "compiles", "error_any"]


@dataclass(frozen=True)
class Expected:
    """value: evaluates to value; error: compiles, then evaluation fails; compile_error: refused
    when compiled; compiles: compiles (nothing evaluated); error_any: fails, either way.
    message: what upstream's error must contain (a regular expression where regex)."""

    kind: ExpectedKind
    value: Any = None
    message: str = ""
    regex: bool = False


@dataclass(frozen=True)
class Case:
    file: str  # project/revision/path
    function: str
    name: str
    expression: str
    expected: Expected
    variables: Mapping[str, Any] = field(default_factory=dict)
    policy: bool = False  # compiled as a policy's expression (object, request, params, ...)
    has_params: bool = False
    needs: frozenset[str] = frozenset()

    @property
    def id(self) -> str:
        return f"{self.file.rsplit('/', 1)[-1]}:{self.function}/{self.name}"


@dataclass(frozen=True)
class Unparsed:
    function: str
    name: str
    why: str


@dataclass
class Extraction:
    file: str
    cases: list[Case] = field(default_factory=list)
    unparsed: list[Unparsed] = field(default_factory=list)

    def add(self, case: Case) -> None:
        self.cases.append(uniquely_named(case, {c.id for c in self.cases}))


class NamedCase(Protocol):
    """A case of a table: named as Go's t.Run names it, identified by file, test and name."""

    @property
    def name(self) -> str: ...

    @property
    def id(self) -> str: ...


NamedCaseT = TypeVar("NamedCaseT", bound=NamedCase)


def uniquely_named(case: NamedCaseT, taken: set[str]) -> NamedCaseT:
    """case, its name made unique as Go's t.Run makes it (`name#01`)."""
    unique, count = case, 0
    while unique.id in taken:
        count += 1
        unique = replace(case, name=f"{case.name}#{count:02d}")  # type: ignore[type-var]
    return unique


@dataclass(frozen=True)
class Source:
    project: str
    revision: str
    path: str
    read: Callable[[str, str], Extraction]

    @property
    def file(self) -> str:
        return f"{self.project}/{self.revision}/{self.path}"


# -- helpers -------------------------------------------------------------------------------------


def _body(source: str, function: str) -> tuple[int, int]:
    span = golang.function_body(source, function)
    if span is None:
        raise golang.GoSyntaxError(f"func {function} is not in the file")
    return span


def _table(
    out: Extraction, source: str, function: str, variable: str, span: tuple[int, int] | None = None
) -> Iterable[tuple[int, dict[str, Node] | None]]:
    """(index, fields) of each element of function's table; None (and counted unparsed) for an
    element the reader cannot parse."""
    span = span or _body(source, function)
    table = golang.table(source, span, variable)
    if table is None:
        out.unparsed.append(Unparsed(function, "*", f"no table {variable} in {function}"))
        return
    for index, element in enumerate(table.elements):
        try:
            yield index, golang.fields(source, element)
        except golang.GoSyntaxError as exc:
            out.unparsed.append(Unparsed(function, f"[{index}]", str(exc)))
            yield index, None


def _rows(
    out: Extraction,
    source: str,
    function: str,
    variable: str,
    read: Callable[[dict[str, Node]], Any],
    span: tuple[int, int] | None = None,
) -> Iterable[tuple[int, dict[str, Node], Any]]:
    """(index, fields, read(fields)) of each element of a table; an element that cannot be
    read is counted as unparsed, named by its index as Go's t.Run names it."""
    for index, fields in _table(out, source, function, variable, span):
        if fields is None:
            continue
        try:
            yield index, fields, read(fields)
        except (golang.UnknownValue, KeyError) as exc:
            out.unparsed.append(Unparsed(function, f"[{index}]", str(exc)))


def _string(values: Values, node: Node | None, default: str = "") -> str:
    if node is None:
        return default
    value = values(node)
    if not isinstance(value, str):
        raise golang.UnknownValue(f"{value!r} is not a string")
    return value


def _error_expectation(message: str, regex: bool = False) -> Expected:
    """Where upstream's error arises: compile-time words (the checker's, a program that cannot
    be built) mean the API server refuses the expression on write."""
    compile_time = re.search(
        r"compil|program instantiation|found no matching overload|undeclared reference"
        r"|undefined field|Syntax error|mismatched input|expected type|invalid \w+ argument",
        message,
    )
    return Expected("compile_error" if compile_time else "error", message=message, regex=regex)


# -- k8s.io/apiserver pkg/cel/library ------------------------------------------------------------


def library_table(function: str, needs: frozenset[str] = frozenset()) -> Callable[..., Extraction]:
    """quantity_test.go, ip_test.go, cidr_test.go: {name, expr, expect*Value|Result,
    expected*RuntimeErr (a regexp), expected*CompileErr(s) (regexps)}."""

    def read(file: str, source: str) -> Extraction:
        out, span = Extraction(file), _body(source, function)
        values = Values(golang.local_values(source, span))
        for index, fields in _table(out, source, function, "cases", span):
            if fields is None:
                continue
            name = _string(values, fields.get("name"), f"[{index}]")
            try:
                expected = _library_expectation(values, fields, lenient=bool(needs))
                expression = _string(values, fields["expr"])
            except (golang.UnknownValue, KeyError) as exc:
                out.unparsed.append(Unparsed(function, name, str(exc)))
                continue
            out.add(Case(file, function, name, expression, expected, needs=needs))
        return out

    return read


def _library_expectation(values: Values, fields: Mapping[str, Node], lenient: bool) -> Expected:
    compile_errors = fields.get("expectedCompileErr") or fields.get("expectCompileErrs")
    runtime_error = fields.get("expectedRuntimeErr") or fields.get("expectRuntimeErr")
    value = fields.get("expectValue") or fields.get("expectResult")
    if compile_errors is not None:
        patterns = values(compile_errors)
        return Expected("compile_error", message="|".join(patterns), regex=True)
    if runtime_error is not None:
        return Expected("error", message=_string(values, runtime_error), regex=True)
    if value is None:
        raise golang.UnknownValue("no expected value")
    try:
        return Expected("value", values(value))
    except golang.UnknownValue:
        if not lenient:  # a not-modelled file's values are never compared
            raise
        return Expected("value", golang.Opaque(str(value)))


# -- cel-go ext ----------------------------------------------------------------------------------


def read_strings(file: str, source: str) -> Extraction:
    out, values = Extraction(file), Values()

    def read(fields: dict[str, Node]) -> tuple[str, str]:
        return _string(values, fields["expr"]), _string(values, fields.get("err"))

    span = (0, len(source))
    for index, fields, (expression, error) in _rows(
        out, source, "stringTests", "stringTests", read, span
    ):
        expected = Expected("error", message=error) if error else Expected("value", True)
        if error and golang_flag(values, fields.get("parseOnly")):
            # Parsed only, not checked: the type checker refuses these before evaluation.
            expected = Expected("error_any", message=error)
        out.add(Case(file, "TestStrings", f"[{index}]", expression, expected))
    _read_string_versions(out, source)
    _read_string_format(out, source)
    return out


def golang_flag(values: Values, node: Node | None) -> bool:
    return bool(node is not None and values(node))


def _read_string_versions(out: Extraction, source: str) -> None:
    """TestVersions: every function of versions 0 and 1 compiles and is true at version 2."""
    values = Values()
    for index, fields in _table(out, source, "TestVersions", "versionCases"):
        if fields is None:
            continue
        try:
            version, functions = values(fields["version"]), values(fields["supportedFunctions"])
        except (golang.UnknownValue, KeyError) as exc:
            out.unparsed.append(Unparsed("TestVersions", f"[{index}]", str(exc)))
            continue
        for name, expression in sorted(functions.items()):
            out.add(
                Case(
                    out.file,
                    "TestVersions",
                    f"v{version}/{name}",
                    expression,
                    Expected("value", True),
                )
            )


def _read_string_format(out: Extraction, source: str) -> None:
    """TestStringFormat: `"<format>".format([<formatArgs>])` with dynArgs as variables. Its
    error cases run with cel-go's format check (OptCheckStringFormat) unless skipCompileCheck;
    Kubernetes does not enable that option, so only the skipCompileCheck ones say what 1.30
    answers (an evaluation error)."""
    values = Values(helpers={"mustParseDuration": golang.go_duration, "time.Date": golang.go_date})
    function = "TestStringFormat"
    for index, fields in _table(out, source, function, "tests"):
        if fields is None:
            continue
        name = _string(values, fields.get("name"), f"[{index}]")
        try:
            expression = (
                f"{golang.quote(_string(values, fields['format']))}"
                f".format([{_string(values, fields.get('formatArgs'))}])"
            )
            variables = values(fields["dynArgs"]) if "dynArgs" in fields else {}
            error, output = (
                _string(values, fields.get("err")),
                values(fields["expectedOutput"]) if "expectedOutput" in fields else "",
            )
            locale = _string(values, fields.get("locale"))
        except (golang.UnknownValue, KeyError) as exc:
            needs = {"test-protobuf"} if "proto3pb" in str(fields.get("dynArgs")) else set()
            if needs:
                expected = Expected("value", golang.Opaque("a protobuf message"))
                out.add(
                    Case(
                        out.file,
                        function,
                        name,
                        str(fields.get("format")),
                        expected,
                        needs=frozenset(needs),
                    )
                )
            else:
                out.unparsed.append(Unparsed(function, name, str(exc)))
            continue
        needs = set()
        if locale not in ("", "en_US"):
            needs.add("locale")
        if "TestAllTypes" in expression:
            needs.add("test-protobuf")
        if error and not golang_flag(values, fields.get("skipCompileCheck")):
            needs.add("format-check option")
        expected = Expected("error", message=error) if error else Expected("value", output)
        out.add(
            Case(out.file, function, name, expression, expected, variables, needs=frozenset(needs))
        )


def read_sets(file: str, source: str) -> Extraction:
    out, values = Extraction(file), Values()

    def read(fields: dict[str, Node]) -> tuple[str, Any]:
        return _string(values, fields["expr"]), values(fields["in"]) if "in" in fields else {}

    for index, _, (expression, variables) in _rows(out, source, "TestSets", "setsTests", read):
        expected = Expected("value", True)
        out.add(Case(file, "TestSets", f"[{index}]", expression, expected, variables))
    return out


def read_lists(file: str, source: str) -> Extraction:
    """cel-go's lists extension (slice) is registered by no Kubernetes release up to 1.30
    (environment/base.go): in a 1.30 policy each of these expressions is a compile error."""
    out, values = Extraction(file), Values()
    expected = Expected("compile_error", message="undeclared reference to 'slice'")
    for index, _, expression in _rows(
        out, source, "TestLists", "listsTests", lambda fields: _string(values, fields["expr"])
    ):
        out.add(Case(file, "TestLists", f"[{index}]", expression, expected))
    return out


# -- k8s.io/apiextensions-apiserver pkg/apiserver/schema/cel validation_test.go ------------------


def read_validation(file: str, source: str) -> Extraction:
    """TestValidationExpressions: each group's `valid` rules must hold for its obj as `self`;
    each `errors` rule must fail with an error containing its text."""
    out, function = Extraction(file), "TestValidationExpressions"
    values = Values(
        helpers={
            "ValsEqualThemselvesAndDataLiteral": lambda a, b, lit: (
                f"{a} == {lit} && {lit} == {a} && {a} == {b}"
            ),
            "objs": lambda *items: {f"val{i + 1}": v for i, v in enumerate(items)},
        }
    )
    for index, fields in _table(out, source, function, "tests"):
        if fields is None:
            continue
        group = _string(values, fields.get("name"), f"[{index}]")
        _read_group(out, function, group, fields, values)
    return out


def _read_group(
    out: Extraction, function: str, group: str, fields: Mapping[str, Node], values: Values
) -> None:
    schema = _schema(fields["schema"]) if "schema" in fields else ("crd", "no schema")
    group_features = set()
    if "oldObj" in fields or golang_flag(values, fields.get("expectSkipped")):
        group_features.add("transition rules (oldSelf)")
    if group == "invalid data":
        group_features.add("schema validation of the data before rules run")
    try:
        self_value: Any = _typed(schema, values(fields["obj"])) if "obj" in fields else None
        known_self = True
    except golang.UnknownValue:
        self_value, known_self = None, False
    rules: list[tuple[Node, Expected | None]] = []
    if "valid" in fields:
        valid = fields["valid"]
        elements = valid.elements if isinstance(valid, golang.Composite) else ()
        rules += [(rule, None) for _, rule in elements]
    errors: list[tuple[Node | None, Node]] = []
    if isinstance(fields.get("errors"), golang.Composite):
        errors = list(fields["errors"].elements)  # type: ignore[union-attr]
    for key, message in errors:
        try:
            rules.append((key, _error_expectation(_string(values, message))))  # type: ignore[arg-type]
        except golang.UnknownValue as exc:
            out.unparsed.append(Unparsed(function, group, str(exc)))
    for rule, expected in rules:
        try:
            expression = _string(values, rule)
        except golang.UnknownValue as exc:
            out.unparsed.append(Unparsed(function, group, str(exc)))
            continue
        uses_self = bool(re.search(r"\b(self|oldSelf)\b", expression))
        if uses_self and not known_self:
            out.unparsed.append(
                Unparsed(function, f"{group}/{expression}", "obj has no known value")
            )
            continue
        needs = set()
        if uses_self:
            features = group_features | set(_crd_features(_referenced(schema, expression)))
            needs |= {f"crd:{feature}" for feature in features}
            if re.search(r"__\w+__", expression):
                needs.add("crd:property names escaped (__dash__, ...)")
            if expected is not None and re.search(_TYPE_ERROR, expected.message):
                needs.add("crd:typed self (a policy's object is dynamic when compiled)")
            if expression in _STATICALLY_TYPED_ANSWERS:
                needs.add(f"crd:typed self ({_STATICALLY_TYPED_ANSWERS[expression]})")
        out.add(
            Case(
                out.file,
                function,
                f"{group}/{expression}",
                expression,
                expected or Expected("value", True),
                {"self": self_value} if uses_self else {},
                needs=frozenset(needs),
            )
        )


# Errors that come of self's schema type; others (an invalid regex literal) are the
# environment's, and hold for a policy's expressions too.
_TYPE_ERROR = r"no matching overload|undefined field|expected type|no such field"
# Rules whose value comes of self's schema type: the checker picks the overload by it.
_STATICALLY_TYPED_ANSWERS = {
    "self.emptyDurations.sum() == duration('0')": "an empty list's sum is the zero of the "
    "element type its schema declares (lists.go sum_duration); untyped, it is int 0",
}

Schema = tuple[Any, ...]
_PRIMITIVES = {
    "integerType": "integer",
    "int32Type": "integer",
    "int64Type": "integer",
    "numberType": "number",
    "floatType": "number",
    "doubleType": "number",
    "stringType": "string",
    "booleanType": "boolean",
    # Formats the CRD's schema gives a string: CEL sees a duration, a timestamp, bytes.
    "durationFormat": "duration",
    "dateFormat": "date",
    "dateTimeFormat": "date-time",
    "byteType": "bytes",
}
_FORMATS: Mapping[str, Callable[[str], Any]] = {
    "duration": golang.go_duration,
    "date": lambda text: datetime.datetime.fromisoformat(text).replace(tzinfo=datetime.UTC),
    "date-time": lambda text: datetime.datetime.fromisoformat(
        re.sub(r"(\.\d{6})\d+", r"\1", text.replace("Z", "+00:00"))
    ),
    "bytes": lambda text: base64.b64decode(text, validate=True),
}


def _schema(node: Node) -> Schema:
    """A structural schema of the test's helpers, as (kind, ...); ("crd", what) for a CRD-only
    feature (formats, x-kubernetes-* extensions) or a form this reader does not know."""
    if isinstance(node, golang.Unary):
        return _schema(node.operand)
    if isinstance(node, golang.Name):
        return (_PRIMITIVES[node.dotted],) if node.dotted in _PRIMITIVES else ("crd", node.dotted)
    if not isinstance(node, golang.Call) or not isinstance(node.function, golang.Name):
        return ("crd", "schema.Structural literal (x-kubernetes-* extensions)")
    name, arguments = node.function.dotted, node.arguments
    if name in ("listType", "listTypePtr"):
        return ("list", _schema(arguments[0]))
    if name in ("mapType", "mapTypePtr"):
        return ("map", _schema(arguments[0]))
    if name in ("objectType", "objectTypePtr") and isinstance(arguments[0], golang.Composite):
        properties = {
            key.value: _schema(value)
            for key, value in arguments[0].elements
            if isinstance(key, golang.Literal)
        }
        return ("object", properties)
    if name == "schemas":
        return ("object", {f"val{i + 1}": _schema(a) for i, a in enumerate(arguments)})
    return ("crd", name)


def _referenced(schema: Schema, expression: str) -> Schema:
    """The part of an object schema an expression reaches: the properties it names after
    `self.`, or all of it where it uses `self` otherwise."""
    if schema[0] != "object" or re.search(r"\b(self|oldSelf)\b(?!\.\w)", expression):
        return schema
    named = set(re.findall(r"\b(?:self|oldSelf)\.(\w+)", expression))
    return ("object", {key: value for key, value in schema[1].items() if key in named})


def _crd_features(schema: Schema) -> Iterable[str]:
    kind = schema[0]
    if kind == "crd":
        yield f"schema {schema[1]}"
    elif kind in ("list", "map"):
        yield from _crd_features(schema[1])
    elif kind == "object":
        for inner in schema[1].values():
            yield from _crd_features(inner)


def _typed(schema: Schema, value: Any) -> Any:
    """value as the CRD's schema types it for CEL: a number-typed integer is a double, a
    string of a duration, date, date-time or byte format a duration, timestamp or bytes."""
    kind = schema[0]
    if kind == "number" and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if kind in _FORMATS and isinstance(value, str):
        try:
            return _FORMATS[kind](value)
        except ValueError as exc:
            raise golang.UnknownValue(f"{value!r} as {kind}: {exc}") from None
    if kind == "list" and isinstance(value, list):
        return [_typed(schema[1], item) for item in value]
    if kind == "map" and isinstance(value, dict):
        return {key: _typed(schema[1], item) for key, item in value.items()}
    if kind == "object" and isinstance(value, dict):
        return {key: _typed(schema[1].get(key, ("any",)), item) for key, item in value.items()}
    return value


# -- k8s.io/apiserver pkg/admission/plugin/cel ---------------------------------------------------


def read_compile(file: str, source: str) -> Extraction:
    """TestCompileValidatingPolicyExpression: `expressions` compile in a policy's environment,
    `errorExpressions` are refused with an error containing the text."""
    out, values, function = Extraction(file), Values(), "TestCompileValidatingPolicyExpression"
    for index, fields in _table(out, source, function, "cases"):
        if fields is None:
            continue
        group = _string(values, fields.get("name"), f"[{index}]")
        try:
            has_params = golang_flag(values, fields.get("hasParams"))
            needs = set()
            if golang_flag(values, fields.get("hasAuthorizer")):
                needs.add("authorizer")
            if "StoredExpressions" in str(fields.get("envType")):
                needs.add("stored-expressions test library")
            compiles = values(fields["expressions"]) if "expressions" in fields else []
            refused = values(fields["errorExpressions"]) if "errorExpressions" in fields else {}
        except golang.UnknownValue as exc:
            out.unparsed.append(Unparsed(function, group, str(exc)))
            continue
        expectations = [(expression, Expected("compiles")) for expression in compiles]
        expectations += [
            (expression, Expected("compile_error", message=message))
            for expression, message in sorted(refused.items())
        ]
        for expression, expected in expectations:
            case = Case(file, function, f"{group}/{expression}", expression, expected)
            out.add(replace(case, policy=True, has_params=has_params, needs=frozenset(needs)))
    return out


def read_filter(file: str, source: str) -> Extraction:
    """TestCompile: each condition compiles unless errorExpressions names it. TestFilter's
    cases evaluate against admission attributes and objects: admission_cases reads them."""
    out, values, function = Extraction(file), Values(), "TestCompile"
    for index, fields in _table(out, source, function, "cases"):
        if fields is None:
            continue
        group = _string(values, fields.get("name"), f"[{index}]")
        try:
            refused = values(fields["errorExpressions"]) if "errorExpressions" in fields else {}
            conditions = fields["validation"]
            expressions = [
                _string(values, _expression_field(condition))
                for _, condition in conditions.elements  # type: ignore[union-attr]
            ]
        except (golang.UnknownValue, AttributeError, KeyError) as exc:
            out.unparsed.append(Unparsed(function, group, str(exc)))
            continue
        for expression in expressions:
            expected = (
                Expected("compile_error", message=refused[expression])
                if expression in refused
                else Expected("compiles")
            )
            out.add(
                Case(file, function, f"{group}/{expression}", expression, expected, policy=True)
            )
    return out


def _expression_field(condition: Node) -> Node:
    if isinstance(condition, golang.Unary):
        condition = condition.operand
    if not isinstance(condition, golang.Composite):
        raise golang.UnknownValue("a condition that is not a literal")
    for key, value in condition.elements:
        if isinstance(key, golang.Name) and key.dotted == "Expression":
            return value
    raise golang.UnknownValue("a condition without an Expression")


# -- the files -----------------------------------------------------------------------------------

_APISERVER, _APIEXTENSIONS = "kubernetes-apiserver", "kubernetes-apiextensions-apiserver"
SOURCES: tuple[Source, ...] = (
    Source(
        _APISERVER, "v0.30.14", "pkg/cel/library/quantity_test.go", library_table("TestQuantity")
    ),
    Source(
        _APISERVER,
        "v0.30.14",
        "pkg/cel/library/ip_test.go",
        library_table("TestIP", frozenset({"library:ip"})),
    ),
    Source(
        _APISERVER,
        "v0.30.14",
        "pkg/cel/library/cidr_test.go",
        library_table("TestCIDR", frozenset({"library:cidr"})),
    ),
    Source("cel-go", "v0.17.8", "ext/strings_test.go", read_strings),
    Source("cel-go", "v0.17.8", "ext/sets_test.go", read_sets),
    Source("cel-go", "v0.17.8", "ext/lists_test.go", read_lists),
    Source(
        _APIEXTENSIONS, "v0.30.14", "pkg/apiserver/schema/cel/validation_test.go", read_validation
    ),
    Source(_APISERVER, "v0.30.14", "pkg/admission/plugin/cel/compile_test.go", read_compile),
    Source(_APISERVER, "v0.30.14", "pkg/admission/plugin/cel/filter_test.go", read_filter),
)


def extract(source: Source, text: str) -> Extraction:
    """source's cases from its text; a file whose tables cannot be found at all is one
    unparsed entry naming why."""
    try:
        return source.read(source.file, text)
    except golang.GoSyntaxError as exc:
        extraction = Extraction(source.file)
        extraction.unparsed.append(Unparsed("*", "*", str(exc)))
        return extraction
