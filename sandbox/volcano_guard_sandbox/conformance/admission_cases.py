"""The cases of upstream's admission-plugin test tables (webhook rules and matchConditions, and
which tables are not read yet), read from the Go test files as text as cases.py reads the CEL
ones.

These tables hold Go structs (`adreg.RuleWithOperations{...}`, `cel.EvaluationResult{...}`) and
the test files' own helpers (`a("g", "v", "r", ...)` builds admission attributes). GoObjects
reads a struct literal as a dict of its Go field names (with `__type__`), so a reader says what
each field means and admission_runner maps it to the sandbox's configuration.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from volcano_guard_sandbox.conformance import golang
from volcano_guard_sandbox.conformance.cases import Unparsed
from volcano_guard_sandbox.conformance.golang import Node, Values

_APISERVER, _REVISION = "kubernetes-apiserver", "v0.30.14"
_PLUGIN = "pkg/admission/plugin/"


@dataclass(frozen=True)
class AdmissionCase:
    """kind says what the case checks (admission_runner.RUNS); inputs are its Go values."""

    file: str
    function: str
    name: str
    kind: str
    inputs: Mapping[str, Any]
    expected: Any
    needs: frozenset[str] = frozenset()

    @property
    def id(self) -> str:
        return f"{self.file.rsplit('/', 1)[-1]}:{self.function}/{self.name}"


@dataclass
class AdmissionExtraction:
    file: str
    cases: list[AdmissionCase] = field(default_factory=list)
    unparsed: list[Unparsed] = field(default_factory=list)

    def add(self, case: AdmissionCase) -> None:
        taken = {c.id for c in self.cases}
        unique, count = case, 0
        while unique.id in taken:
            count += 1
            unique = replace(case, name=f"{case.name}#{count:02d}")
        self.cases.append(unique)


@dataclass(frozen=True)
class AdmissionSource:
    path: str
    read: Callable[[str, str], AdmissionExtraction]
    project: str = _APISERVER
    revision: str = _REVISION

    @property
    def file(self) -> str:
        return f"{self.project}/{self.revision}/{self.path}"


@dataclass(frozen=True)
class GoError:
    """errors.New(text) / fmt.Errorf(...): an error a fake returns."""

    text: str


# The Go constants of admission and admissionregistration these tables use, as their JSON.
_ADMISSION_CONSTANTS: Mapping[str, Any] = {
    **{
        f"{package}.{name}": name.upper()
        for package in ("admission", "adreg", "v1", "admissionregistrationv1")
        for name in ("Create", "Update", "Delete", "Connect")
    },
    **{f"{p}.OperationAll": "*" for p in ("adreg", "v1", "admissionregistrationv1")},
    **{f"{p}.ClusterScope": "Cluster" for p in ("adreg", "v1")},
    **{f"{p}.NamespacedScope": "Namespaced" for p in ("adreg", "v1")},
    **{f"{p}.AllScopes": "*" for p in ("adreg", "v1")},
    **{f"{p}.Fail": "Fail" for p in ("adreg", "v1")},
    **{f"{p}.Ignore": "Ignore" for p in ("adreg", "v1")},
    **{f"metav1.StatusReason{r}": r for r in ("Forbidden", "Unauthorized", "Invalid")},
    "ActionAdmit": "admit",
    "ActionDeny": "deny",
    "AuditAnnotationActionPublish": "publish",
    "AuditAnnotationActionExclude": "exclude",
    "AuditAnnotationActionError": "error",
    "apiservercel.ErrorTypeInvalid": "Invalid",
    "celtypes.StringType": "<the string type>",
    "celtypes.NullValue": None,
}
ANY_STRING = "<the string type>"  # a fake's result that "does not matter" (a cost case's)


class GoObjects(Values):
    """Values, plus struct literals as dicts of Go field names and admission's constants."""

    def name(self, dotted: str) -> Any:
        if dotted in _ADMISSION_CONSTANTS:
            return _ADMISSION_CONSTANTS[dotted]
        return super().name(dotted)

    def call(self, node: golang.Call) -> Any:
        name = node.function.dotted if isinstance(node.function, golang.Name) else ""
        if name == "errors.New":
            return GoError(self(node.arguments[0]))
        if name == "fmt.Errorf":
            arguments = [self(argument) for argument in node.arguments]
            return GoError(golang.go_sprintf(arguments[0], arguments[1:]))
        if name == "celtypes.String":
            return str(self(node.arguments[0]))
        if name == "strings.Repeat":
            return str(self(node.arguments[0])) * int(self(node.arguments[1]))
        return super().call(node)

    def composite(self, node: golang.Composite) -> Any:
        if node.type.startswith("[]"):
            element_type = node.type[2:].lstrip("*")
            return [self(_typed(value, element_type)) for _, value in node.elements]
        if node.type.startswith("map["):
            return super().composite(node)
        if node.elements and all(key is None for key, _ in node.elements):
            raise golang.UnknownValue(f"an unkeyed literal of {node.type or 'an elided type'}")
        struct: dict[str, Any] = {"__type__": node.type}
        for key, value in node.elements:
            if not isinstance(key, golang.Name):
                raise golang.UnknownValue(f"a field of {node.type} that is not a name")
            struct[key.dotted] = self(value)
        return struct


def _typed(node: Node, element_type: str) -> Node:
    """An element of a typed slice literal whose own type is elided (`{...}`)."""
    if isinstance(node, golang.Composite) and not node.type:
        return golang.Composite(element_type, node.elements)
    return node


def _map_literal(source: str, span: tuple[int, int], variable: str) -> golang.Composite:
    """The composite literal assigned to variable (`table := tests{...}`) within span."""
    match = re.compile(rf"\b{re.escape(variable)}\s*:=\s*(\w+)\{{").search(source, *span)
    if match is None:
        raise golang.GoSyntaxError(f"no table {variable}")
    items = golang.tokens(source, match.start(1), span[1])
    end = golang.balanced_end(items, 1)
    node = golang.parse_expression(source, items[: end + 1])
    if not isinstance(node, golang.Composite):
        raise golang.GoSyntaxError(f"{variable} is not a composite literal")
    return node


def _keyed(node: Node) -> dict[str, Node]:
    if not isinstance(node, golang.Composite):
        raise golang.UnknownValue("a table element is not a composite literal")
    return {key.dotted: value for key, value in node.elements if isinstance(key, golang.Name)}


# -- webhook/predicates/rules/rules_test.go ------------------------------------------------------


def _attributes(namespace: str) -> Callable[..., dict[str, Any]]:
    """rules_test.go's a(), namespacedAttributes() and clusterScopedAttributes()."""

    def build(
        group: str, version: str, resource: str, subresource: str, name: str, operation: str, _: Any
    ) -> dict[str, Any]:
        return {
            "group": group,
            "version": version,
            "resource": resource,
            "subresource": subresource,
            "name": name,
            "operation": operation,
            "kind": "k" + resource,
            "namespace": namespace,
        }

    return build


_RULE_PARTS = {
    "TestGroup": "group",
    "TestVersion": "version",
    "TestOperation": "operation",
    "TestResource": "resource",
    "TestScope": "scope",
}


def read_rules(file: str, source: str) -> AdmissionExtraction:
    """Each test function checks one part of a rule (Matcher.group(), .version(), ...): every
    `match` attributes must match the table's rule on that part, every `noMatch` must not."""
    out = AdmissionExtraction(file)
    helpers: dict[str, Callable[..., Any]] = {
        "a": _attributes("ns"),
        "namespacedAttributes": _attributes("ns"),
        "clusterScopedAttributes": _attributes(""),
        "attrList": lambda *items: list(items),
    }
    for function, part in _RULE_PARTS.items():
        span = golang.function_body(source, function)
        if span is None:
            out.unparsed.append(Unparsed(function, "*", f"func {function} is not in the file"))
            continue
        values = GoObjects(golang.local_values(source, span), helpers)
        for key, element in _map_literal(source, span, "table").elements:
            name = values(key) if key is not None else "?"
            try:
                fields = _keyed(element)
                rule = values(fields["rule"])
                expectations = [
                    (expected, index, attributes)
                    for expected, listed in ((True, "match"), (False, "noMatch"))
                    if listed in fields
                    for index, attributes in enumerate(values(fields[listed]))
                ]
            except (golang.UnknownValue, KeyError) as exc:
                out.unparsed.append(Unparsed(function, str(name), str(exc)))
                continue
            for expected, index, attributes in expectations:
                verb = "match" if expected else "noMatch"
                out.add(
                    AdmissionCase(
                        file,
                        function,
                        f"{name}_{verb}_{index}",
                        "rule part",
                        {"part": part, "rule": rule, "attributes": attributes},
                        expected,
                    )
                )
    return out


# -- webhook/matchconditions/matcher_test.go -----------------------------------------------------


def read_match_conditions(file: str, source: str) -> AdmissionExtraction:
    """TestMatch: a matcher over a fake filter's evaluations (true, false or an error each);
    whether it matches, or the error it reports, by the failure policy."""
    out, function = AdmissionExtraction(file), "TestMatch"
    span = golang.function_body(source, function)
    if span is None:
        out.unparsed.append(Unparsed(function, "*", "func TestMatch is not in the file"))
        return out
    values = GoObjects(golang.local_values(source, span))
    table = golang.table(source, span, "cases")
    if table is None:
        out.unparsed.append(Unparsed(function, "*", "no table cases"))
        return out
    for index, element in enumerate(table.elements):
        try:
            fields = golang.fields(source, element)
            name = values(fields["name"])
            case = {key: values(fields[key]) for key in fields if key != "name"}
        except (golang.GoSyntaxError, golang.UnknownValue, KeyError) as exc:
            out.unparsed.append(Unparsed(function, f"[{index}]", str(exc)))
            continue
        needs = frozenset({"filter error"} if case.get("throwError") else ())
        expected = {
            "matches": bool(case.get("shouldMatch")),
            "error": case.get("expectError", ""),
            "failed condition": case.get("returnedName", ""),
        }
        inputs = {
            "evaluations": case.get("evaluations") or [],
            "failurePolicy": case.get("failPolicy"),
        }
        out.add(AdmissionCase(file, function, name, "match conditions", inputs, expected, needs))
    return out


# -- policy/validating/validator_test.go ---------------------------------------------------------


def read_validate(file: str, source: str) -> AdmissionExtraction:
    """TestValidate: a validator over fake filters (validations, messageExpressions, audit
    annotations: each result true, false, a string, null or an error) and a fake matcher; its
    decisions (action, a message containing the expected one, reason) and audit annotations."""
    out, function = AdmissionExtraction(file), "TestValidate"
    for index, fields, case in _struct_rows(out, source, function, "cases"):
        del fields
        needs = set()
        if case.get("throwError"):
            needs.add("filter error")
        if case.get("costBudget") or ANY_STRING in str(case.get("messageEvaluations")):
            needs.add("cost budget")
        name = case.pop("name", f"[{index}]")
        expected = {
            "decisions": case.pop("policyDecision", None) or [],
            "audit annotations": case.pop("auditAnnotations", None) or [],
        }
        out.add(AdmissionCase(file, function, name, "validate", case, expected, frozenset(needs)))
    return out


def _struct_rows(
    out: AdmissionExtraction, source: str, function: str, variable: str
) -> Iterable[tuple[int, dict[str, Node], dict[str, Any]]]:
    """(index, fields, their values) of each element of function's `[]struct{...}` table; an
    element that cannot be read is counted unparsed."""
    span = golang.function_body(source, function)
    table = golang.table(source, span, variable) if span else None
    if span is None or table is None:
        out.unparsed.append(Unparsed(function, "*", f"no table {variable} in {function}"))
        return
    values = GoObjects(golang.local_values(source, span))
    for index, element in enumerate(table.elements):
        try:
            fields = golang.fields(source, element)
            yield index, fields, {key: values(node) for key, node in fields.items()}
        except (golang.GoSyntaxError, golang.UnknownValue, KeyError) as exc:
            out.unparsed.append(Unparsed(function, f"[{index}]", str(exc)))


# -- tables not read yet -------------------------------------------------------------------------


def not_read(function: str, variable: str, why: str) -> Callable[[str, str], AdmissionExtraction]:
    """A table this reader does not run yet: each of its cases counted unparsed, with why."""

    def read(file: str, source: str) -> AdmissionExtraction:
        out, values = AdmissionExtraction(file), Values()
        span = golang.function_body(source, function)
        table = golang.table(source, span, variable) if span else None
        if table is None:
            out.unparsed.append(Unparsed(function, "*", f"no table {variable} in {function}"))
            return out
        for index, element in enumerate(table.elements):
            try:
                name = _string_field(values, golang.fields(source, element), index)
            except (golang.GoSyntaxError, golang.UnknownValue):
                name = f"[{index}]"
            out.unparsed.append(Unparsed(function, name, why))
        return out

    return read


def _string_field(values: Values, fields: Mapping[str, Node], index: int) -> str:
    for key in ("name", "description"):
        if key in fields:
            value = values(fields[key])
            if isinstance(value, str):
                return value
    return f"[{index}]"


def not_read_functions(why: str) -> Callable[[str, str], AdmissionExtraction]:
    """A file of Go tests that are not tables (admission_test.go): each Test function counted
    unparsed, with why."""

    def read(file: str, source: str) -> AdmissionExtraction:
        out = AdmissionExtraction(file)
        for match in re.finditer(r"^func (Test\w+)\(", source, re.M):
            out.unparsed.append(Unparsed(match.group(1), "*", why))
        return out

    return read


ADMISSION_SOURCES: Sequence[AdmissionSource] = (
    AdmissionSource(_PLUGIN + "webhook/predicates/rules/rules_test.go", read_rules),
    AdmissionSource(_PLUGIN + "webhook/matchconditions/matcher_test.go", read_match_conditions),
    AdmissionSource(
        _PLUGIN + "webhook/generic/webhook_test.go",
        not_read(
            "TestShouldCallHook",
            "testcases",
            "not read yet: webhook configurations built by Go helpers, with equivalent-"
            "resource conversion through a Go scheme",
        ),
    ),
    AdmissionSource(
        _PLUGIN + "policy/matching/matching_test.go",
        not_read(
            "TestMatcher",
            "testcases",
            "not read yet: matchResources with equivalent-resource conversion through a Go "
            "scheme and fake namespace listers",
        ),
    ),
    AdmissionSource(
        _PLUGIN + "policy/validating/validator_test.go",
        read_validate,
    ),
    AdmissionSource(
        _PLUGIN + "policy/validating/admission_test.go",
        not_read_functions(
            "not read yet: the plugin end to end on Go fakes (informers, a fake authorizer), "
            "not a table"
        ),
    ),
)


def extract_admission(source: AdmissionSource, text: str) -> AdmissionExtraction:
    try:
        return source.read(source.file, text)
    except golang.GoSyntaxError as exc:
        extraction = AdmissionExtraction(source.file)
        extraction.unparsed.append(Unparsed("*", "*", str(exc)))
        return extraction
