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
from dataclasses import dataclass, field
from typing import Any

from volcano_guard_sandbox.conformance import golang, plugin_scenarios
from volcano_guard_sandbox.conformance.cases import Unparsed, uniquely_named
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
        self.cases.append(uniquely_named(case, {c.id for c in self.cases}))


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
    **{f"{p}.Exact": "Exact" for p in ("adreg", "v1")},
    **{f"{p}.Equivalent": "Equivalent" for p in ("adreg", "v1")},
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
    for index, _, case in _struct_rows(out, source, function, "cases"):
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
        name = case.get("name", f"[{index}]")
        out.add(AdmissionCase(file, function, name, "match conditions", inputs, expected, needs))
    return out


# -- policy/validating/validator_test.go ---------------------------------------------------------


def read_validate(file: str, source: str) -> AdmissionExtraction:
    """TestValidate: a validator over fake filters (validations, messageExpressions, audit
    annotations: each result true, false, a string, null or an error) and a fake matcher; its
    decisions (action, a message containing the expected one, reason) and audit annotations."""
    out, function = AdmissionExtraction(file), "TestValidate"
    for index, _, case in _struct_rows(out, source, function, "cases"):
        needs = set()
        if case.get("throwError"):
            needs.add("filter error")
        name = case.pop("name", f"[{index}]")
        expected = {
            "decisions": case.pop("policyDecision", None) or [],
            "audit annotations": case.pop("auditAnnotations", None) or [],
        }
        out.add(AdmissionCase(file, function, name, "validate", case, expected, frozenset(needs)))
    return out


def _struct_rows(
    out: AdmissionExtraction,
    source: str,
    function: str,
    variable: str,
    values: Callable[[tuple[int, int]], Values] | None = None,
    skip: frozenset[str] = frozenset(),
) -> Iterable[tuple[int, dict[str, Node], dict[str, Any]]]:
    """(index, fields, their values) of each element of function's `[]struct{...}` table, the
    fields in skip left unread; an element that cannot be read is counted unparsed. values
    makes the reader of the function's span (GoObjects over its one-line locals by default)."""
    span = golang.function_body(source, function)
    table = golang.table(source, span, variable) if span else None
    if span is None or table is None:
        out.unparsed.append(Unparsed(function, "*", f"no table {variable} in {function}"))
        return
    read = values(span) if values else GoObjects(golang.local_values(source, span))
    for index, element in enumerate(table.elements):
        try:
            fields = golang.fields(source, element)
            yield (
                index,
                fields,
                {key: read(node) for key, node in fields.items() if key not in skip},
            )
        except (golang.GoSyntaxError, golang.UnknownValue, KeyError) as exc:
            out.unparsed.append(Unparsed(function, f"[{index}]", str(exc)))


def _with_helpers(
    source: str, helpers: Mapping[str, Callable[..., Any]]
) -> Callable[[tuple[int, int]], Values]:
    return lambda span: GoObjects(golang.local_values(source, span), helpers)


# -- policy/matching/matching_test.go ------------------------------------------------------------


def _attributes_record(
    obj: Any,
    old: Any,
    kind: Mapping[str, str],
    namespace: str,
    name: str,
    resource: Mapping[str, str],
    subresource: str,
    operation: str,
    *_: Any,
) -> dict[str, Any]:
    """admission.NewAttributesRecord(object, oldObject, gvk, namespace, name, gvr, subresource,
    operation, options, dryRun, userInfo), as rules_test's helpers give attributes."""
    return {
        "group": resource["group"],
        "version": resource["version"],
        "resource": resource["resource"],
        "subresource": subresource,
        "name": name,
        "operation": operation,
        "kind": kind["kind"],
        "kind group": kind["group"],
        "kind version": kind["version"],
        "namespace": namespace,
        "object": None if obj is None else {},
        "oldObject": None if old is None else {},
    }


_RECORD_HELPERS: Mapping[str, Callable[..., Any]] = {
    "gvr": lambda g, v, r: {"group": g, "version": v, "resource": r},
    "gvk": lambda g, v, k: {"group": g, "version": v, "kind": k},
    "admission.NewAttributesRecord": _attributes_record,
}


def _matching_needs(criteria: Mapping[str, Any]) -> set[str]:
    """What a matchResources or a webhook needs that the sandbox does not model."""
    needs = set()
    if criteria.get("MatchPolicy") == "Equivalent":
        needs.add("equivalent resources")
    if not {"NamespaceSelector", "ObjectSelector"} <= set(criteria):
        needs.add("nil selector")
    return needs


def read_policy_matcher(file: str, source: str) -> AdmissionExtraction:
    """TestMatcher: whether a policy's matchResources (selectors, resourceRules with
    resourceNames, excludeResourceRules, matchPolicy) match the attributes, or the error."""
    out, function = AdmissionExtraction(file), "TestMatcher"
    for index, _, case in _struct_rows(
        out, source, function, "testcases", _with_helpers(source, _RECORD_HELPERS)
    ):
        criteria = case.get("criteria") or {}
        needs = _matching_needs(criteria)
        expected = {"matches": bool(case.get("expectMatches")), "error": case.get("expectErr")}
        inputs = {"criteria": criteria, "attributes": case.get("attrs") or {}}
        name = case.get("name", f"[{index}]")
        out.add(
            AdmissionCase(
                file, function, name, "match resources", inputs, expected, frozenset(needs)
            )
        )
    return out


# -- webhook/generic/webhook_test.go -------------------------------------------------------------


def read_should_call(file: str, source: str) -> AdmissionExtraction:
    """TestShouldCallHook: whether a webhook is called for the attributes (selectors, rules,
    matchPolicy, and matchConditions whose result a fake gives: matchResult or matchError)."""
    out, function = AdmissionExtraction(file), "TestShouldCallHook"
    for index, _, case in _struct_rows(
        out, source, function, "testcases", _with_helpers(source, _RECORD_HELPERS)
    ):
        webhook = case.get("webhook") or {}
        needs = _matching_needs(webhook)
        expected = {"call": bool(case.get("expectCall")), "error": case.get("expectErr", "")}
        inputs = {
            "webhook": webhook,
            "attributes": case.get("attrs") or {},
            "match result": bool(case.get("matchResult")),
            "match error": case.get("matchError"),
        }
        name = case.get("name", f"[{index}]")
        out.add(
            AdmissionCase(file, function, name, "should call", inputs, expected, frozenset(needs))
        )
    return out


# -- plugin/cel/filter_test.go TestFilter ---------------------------------------------------------

# Go field names whose JSON name is not the field's with its first letter lowered.
_JSON_NAMES = {"ObjectMeta": "metadata", "IP": "ip", "UID": "uid", "APIVersion": "apiVersion"}
_INLINE = ("TypeMeta",)  # embedded: its fields are the object's own


def go_json(value: Any) -> Any:
    """A Go API object read by GoObjects as the JSON the API serves (what CEL sees)."""
    if isinstance(value, list):
        return [go_json(item) for item in value]
    if not isinstance(value, dict):
        return value
    if "__type__" not in value:
        return {key: go_json(item) for key, item in value.items()}
    if value["__type__"].endswith("Unstructured"):
        return go_json(value.get("Object") or {})
    found: dict[str, Any] = {}
    for key, item in value.items():
        if key == "__type__":
            continue
        if key in _INLINE:
            found |= go_json(item)
        else:
            found[_JSON_NAMES.get(key, key[:1].lower() + key[1:])] = go_json(item)
    return found


_FILTER_CONSTANTS = {"corev1.FinalizerKubernetes": "kubernetes", "corev1.NamespaceActive": "Active"}


def _endpoints(name: str | None) -> dict[str, Any]:
    endpoints: dict[str, Any] = {"subsets": [{"addresses": [{"ip": "127.0.0.0"}]}]}
    if name:
        endpoints["metadata"] = {"name": name}
    return endpoints


def _valid_attribute(obj: Any, is_delete: bool) -> dict[str, Any]:
    """filter_test.go newValidAttribute: a CREATE of default/foo of no kind, its object an
    Endpoints unless given; for a delete, only an old Endpoints (the operation stays CREATE)."""
    obj, old = (
        (None, _endpoints(None)) if is_delete else (go_json(obj) or _endpoints("endpoints1"), None)
    )
    return {
        "operation": "CREATE",
        "namespace": "default",
        "name": "foo",
        "object": obj,
        "oldObject": old,
    }


def _endpoint_attributes(operation: str, subresource: str) -> Callable[[], dict[str, Any]]:
    """filter_test.go endpointCreateAttributes and endpointStatusUpdateAttributes."""

    def build() -> dict[str, Any]:
        obj = {"kind": "Endpoints", "apiVersion": "v1", **_endpoints("endpoints1")}
        return {
            "operation": operation,
            "group": "",
            "version": "v1",
            "resource": "endpoints",
            "subresource": subresource,
            "kind": "Endpoints",
            "namespace": "default",
            "name": "endpoints1",
            "object": obj,
            "oldObject": obj if operation == "UPDATE" else None,
        }

    return build


def _block_locals(source: str, span: tuple[int, int]) -> dict[str, Node]:
    """`name := <composite over many lines>` and `var name *T` (nil) of a function body."""
    found: dict[str, Node] = {}
    for match in re.finditer(r"^\t(\w+) := ", source[span[0] : span[1]], re.M):
        start = span[0] + match.end()
        try:
            parser = golang.Parser(source, golang.tokens(source, start, span[1]))
            found[match.group(1)] = parser.expression()
        except golang.GoSyntaxError:
            continue
    for match in re.finditer(r"^\tvar (\w+) \*", source[span[0] : span[1]], re.M):
        found[match.group(1)] = golang.Literal(None)
    return found


class _FilterValues(GoObjects):
    def name(self, dotted: str) -> Any:
        if dotted in _FILTER_CONSTANTS:
            return _FILTER_CONSTANTS[dotted]
        return super().name(dotted)


def read_filter_cases(file: str, source: str) -> AdmissionExtraction:
    """TestFilter: each validation's expression evaluated against the attributes, params and
    namespace object: its result (a bool) or an error containing the expected words."""
    out, function = AdmissionExtraction(file), "TestFilter"
    helpers: dict[str, Callable[..., Any]] = {
        "newValidAttribute": _valid_attribute,
        "endpointCreateAttributes": _endpoint_attributes("CREATE", ""),
        "endpointStatusUpdateAttributes": _endpoint_attributes("UPDATE", "status"),
        "runtime.Object": lambda value: value,
    }
    # An authorizer is a Go fake (its value is never read): only whether there is one.
    for index, fields, case in _struct_rows(
        out,
        source,
        function,
        "cases",
        lambda span: _FilterValues(_block_locals(source, span), helpers),
        skip=frozenset({"authorizer"}),
    ):
        needs = set()
        if "authorizer" in fields:
            needs.add("authorizer")
        inputs = {
            "expressions": [v.get("Expression", "") for v in case.get("validations") or []],
            "attributes": case.get("attributes") or {},
            "params": go_json(case.get("params")),
            "has params": bool(case.get("hasParamKind")),
            "namespace": go_json(case.get("namespaceObject")),
            "per call limit": case.get("testPerCallLimit") or 0,
        }
        name = case.get("name", f"[{index}]")
        expected = case.get("results") or []
        out.add(AdmissionCase(file, function, name, "filter", inputs, expected, frozenset(needs)))
    return out


# -- tables not read yet -------------------------------------------------------------------------


def not_read_functions(why: str) -> Callable[[str, str], AdmissionExtraction]:
    """A file of Go tests that are not tables (admission_test.go): each Test function counted
    unparsed, with why."""

    def read(file: str, source: str) -> AdmissionExtraction:
        out = AdmissionExtraction(file)
        for match in re.finditer(r"^func (Test\w+)\(", source, re.M):
            out.unparsed.append(Unparsed(match.group(1), "*", why))
        return out

    return read


def read_transcribed(file: str, source: str) -> AdmissionExtraction:
    """admission_test.go drives the plugin through Go fakes, not a table: each Test function is
    a case its transcription (plugin_scenarios) runs; one without a transcription is unparsed."""
    out = AdmissionExtraction(file)
    for match in re.finditer(r"^func (Test\w+)\(", source, re.M):
        function = match.group(1)
        scenario = plugin_scenarios.SCENARIOS.get(function)
        if scenario is None:
            out.unparsed.append(Unparsed(function, "*", "not transcribed (plugin_scenarios)"))
            continue
        needs = frozenset({scenario.need} - {""})
        out.add(AdmissionCase(file, function, scenario.behaviour, "transcribed", {}, None, needs))
    return out


ADMISSION_SOURCES: Sequence[AdmissionSource] = (
    AdmissionSource(_PLUGIN + "cel/filter_test.go", read_filter_cases),
    AdmissionSource(_PLUGIN + "webhook/predicates/rules/rules_test.go", read_rules),
    AdmissionSource(_PLUGIN + "webhook/matchconditions/matcher_test.go", read_match_conditions),
    AdmissionSource(
        _PLUGIN + "webhook/generic/webhook_test.go",
        read_should_call,
    ),
    AdmissionSource(
        _PLUGIN + "policy/matching/matching_test.go",
        read_policy_matcher,
    ),
    AdmissionSource(
        _PLUGIN + "policy/validating/validator_test.go",
        read_validate,
    ),
    AdmissionSource(_PLUGIN + "policy/validating/admission_test.go", read_transcribed),
)


def extract_admission(source: AdmissionSource, text: str) -> AdmissionExtraction:
    try:
        return source.read(source.file, text)
    except golang.GoSyntaxError as exc:
        extraction = AdmissionExtraction(source.file)
        extraction.unparsed.append(Unparsed("*", "*", str(exc)))
        return extraction
