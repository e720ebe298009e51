"""The sandbox checks admission expressions on write with kube-apiserver 1.30's types: `request`
and `namespaceObject` typed (k8s.io/apiserver pkg/admission/plugin/cel/compile.go), `variables`
typed as composition.go infers them, the AST validators of pkg/cel/environment/base.go (mixed
list and map literals, regex, duration and timestamp literals) and each field's output type.

The expression tables are upstream's own (compile_test.go, filter_test.go, composition_test.go of
v0.30.14), read inside the tests; a case the sandbox does not model is listed below with its
reason and must still be refused, never admitted."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.sandbox.admission_chain import PODS, Box, pod
from tests.upstream import upstream_file
from volcano_guard_sandbox.apiserver.cel_check import (
    BOOL,
    NOT_MODELLED_AUTHORIZER,
    STRING_OR_NULL,
    Declarations,
    check,
    policy_errors,
)
from volcano_guard_sandbox.apiserver.matching import configuration_errors
from volcano_guard_sandbox.apiserver.policy_validation import PolicyInputs, validate

APISERVER = ("kubernetes-apiserver", "v0.30.14")
PLUGIN_CEL = "pkg/admission/plugin/cel"
GROUP = "/apis/admissionregistration.k8s.io/v1"

# compile_test.go expressions the sandbox refuses for a reason of its own: (reason, cases).
NOT_MODELLED = {
    "authorizer.group('') != null": "authorizer checks (refused, saying so)",
    "test() == true": "library.Test, a test-only library of the stored environment",
}


def _go_source(path: str) -> str:
    return upstream_file(*APISERVER, f"{PLUGIN_CEL}/{path}")


def _end_of_block(text: str, start: int) -> int:
    """The index after the brace that closes the one at text[start], skipping Go strings."""
    depth, index = 0, start
    while index < len(text):
        char = text[index]
        if char in '"`':
            index = _end_of_string(text, index)
            continue
        depth += {"{": 1, "}": -1}.get(char, 0)
        index += 1
        if depth == 0:
            return index
    raise ValueError("unbalanced braces")


def _end_of_string(text: str, start: int) -> int:
    quote, index = text[start], start + 1
    while text[index] != quote:
        index += 2 if quote == '"' and text[index] == "\\" else 1
    return index + 1


def _go_strings(text: str) -> list[str]:
    """The string literals of text, decoded."""
    found, index = [], 0
    while index < len(text):
        if text[index] in '"`':
            end = _end_of_string(text, index)
            literal = text[index:end]
            found.append(json.loads(literal) if literal[0] == '"' else literal[1:-1])
            index = end
        else:
            index += 1
    return found


def _go_cases(source: str, function: str) -> list[str]:
    """The text of each `{...}` case of the first table literal in func function."""
    body = source[source.index(f"func {function}(") :]
    table = body.index("{", body.index("}{", body.index("[]struct")))
    table_text = body[table + 1 : _end_of_block(body, table) - 1]
    cases, index = [], 0
    while (index := table_text.find("{", index)) != -1:
        end = _end_of_block(table_text, index)
        cases.append(table_text[index:end])
        index = end
    return cases


def _go_field(case: str, name: str) -> str:
    """The composite literal or value of field name in a case's text ("" when absent)."""
    indent = re.search(r"\n(\t+)\w+:", case)  # the case's own fields, not nested ones
    match = indent and re.search(rf"\n{indent.group(1)}{name}:\s*", case)
    if not match:
        return ""
    start = match.end()
    brace = case.find("{", start)
    if brace != -1 and "\n" not in case[start:brace]:
        return case[start : _end_of_block(case, brace)]
    return case[start : case.index("\n", start)].rstrip(",")


def _says(error: str, wanted: str) -> bool:
    """cel-go's words in error, or cel-cpp's: it names an undeclared reference with the field
    selected from it ("undeclared reference to 'params.x'" for cel-go's 'params')."""
    qualified = wanted.startswith("undeclared reference to '") and wanted.endswith("'")
    return wanted in error or (qualified and wanted[:-1] + "." in error)


def _problems(expression: str, declarations: Declarations, expected_error: str | None) -> list[str]:
    """What the sandbox does unlike 1.30 with expression as a validation and, in string(), as an
    audit annotation (compile_test.go checks both)."""
    problems = []
    for text, returns in ((expression, BOOL), (f"string({expression})", STRING_OR_NULL)):
        error = check(text, declarations, returns).error
        if expected_error is not None:
            if not _says(error, expected_error):
                problems.append(f"{text}: wanted {expected_error!r}, got {error!r}")
        elif expression in NOT_MODELLED:
            if not error:
                problems.append(f"{text}: admitted, though the sandbox does not model it")
        elif error:
            problems.append(f"{text}: refused: {error}")
    return problems


def test_the_compile_table_of_1_30_is_refused_and_admitted_as_upstream() -> None:
    cases = _go_cases(_go_source("compile_test.go"), "TestCompileValidatingPolicyExpression")
    problems: list[str] = []
    checked = 0
    for case in cases:
        declarations = Declarations(
            params=_go_field(case, "hasParams") == "true",
            authorizer=_go_field(case, "hasAuthorizer") == "true",
        )
        for expression in _go_strings(_go_field(case, "expressions")):
            problems += _problems(expression, declarations, None)
            checked += 1
        pairs = _go_strings(_go_field(case, "errorExpressions"))
        for expression, wanted in zip(pairs[::2], pairs[1::2], strict=True):
            problems += _problems(expression, declarations, wanted)
            checked += 1
    assert (len(cases), checked) == (16, 59)  # the v0.30.14 table, every case read
    assert problems == []


def test_the_filter_compile_table_of_1_30_is_refused_and_admitted_as_upstream() -> None:
    source = _go_source("filter_test.go")
    problems: list[str] = []
    for case in _go_cases(source, "TestCompile"):
        pairs = _go_strings(_go_field(case, "errorExpressions"))
        wanted = dict(zip(pairs[::2], pairs[1::2], strict=True))
        for expression in _go_strings(_go_field(case, "validation")):
            problems += _problems(expression, Declarations(), wanted.get(expression))
    # TestFilter "test namespaceObject": two fields namespaceObject's type does not declare.
    (namespace_case,) = [c for c in _go_cases(source, "TestFilter") if "test namespaceObject" in c]
    expressions = _go_strings(_go_field(namespace_case, "validations"))
    undefined = re.findall(r"undefined field '\w+'", _go_field(namespace_case, "results"))
    assert len(expressions) == 8 and len(undefined) == 2
    for expression in expressions:
        field = re.search(r"metadata\.(managedFields|ownerReferences)", expression)
        want = f"undefined field '{field.group(1)}'" if field else None
        problems += _problems(expression, Declarations(), want)
    assert problems == []


def test_variables_are_typed_as_the_composition_table_of_1_30_types_them() -> None:
    """composition_test.go TestCompositedPolicies: a compile-time error ("found no matching
    overload") where 1.30 reports one, in the variable or the expression; the other cases, whose
    errors come at evaluation (out of bounds, cost), compile."""
    problems: list[str] = []
    cases = _go_cases(_go_source("composition_test.go"), "TestCompositedPolicies")
    compile_time = [case for case in cases if "no matching overload" in case]
    assert (len(cases), len(compile_time)) == (12, 3)
    for case in cases:
        names_and_expressions = _go_strings(_go_field(case, "variables"))
        spec = {
            "variables": [
                {"name": name, "expression": expression}
                for name, expression in zip(
                    names_and_expressions[::2], names_and_expressions[1::2], strict=True
                )
            ],
            "validations": [{"expression": _go_strings(_go_field(case, "expression"))[0]}],
        }
        wanted = (_go_strings(_go_field(case, "expectedErrorMessage")) or [""])[0]
        errors = "\n".join(policy_errors(spec))
        if "no matching overload" in wanted:
            if wanted not in errors:
                problems.append(f"{spec}: wanted {wanted!r}, got {errors!r}")
        elif errors:
            problems.append(f"{spec}: refused: {errors}")
    assert problems == []


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        (  # the cases
            {"validations": [{"expression": "request.foo1 == 'nope'"}]},
            "undefined field 'foo1'",
        ),
        (
            {"validations": [{"expression": "namespaceObject.metadata.foo2 == 'nope'"}]},
            "undefined field 'foo2'",
        ),
        (
            {"validations": [{"expression": "[1, 'a'].size() == 2"}]},
            "expected type 'int' but found 'string'",
        ),
        ({"validations": [{"expression": "'x'.matches(')')"}]}, "invalid matches argument"),
        (
            {
                "variables": [{"name": "team", "expression": "object.metadata.labels.team"}],
                "validations": [{"expression": "variables.nope == 'a'"}],
            },
            "undefined field 'nope'",
        ),
        (  # a variable sees only those declared before it
            {
                "variables": [
                    {"name": "first", "expression": "variables.second"},
                    {"name": "second", "expression": "1"},
                ],
                "validations": [{"expression": "variables.first == 1"}],
            },
            "spec.variables[0].expression: Invalid value",
        ),
        (  # typed by its output: a string variable is not compared with an int
            {
                "variables": [{"name": "name", "expression": "request.name"}],
                "validations": [{"expression": "variables.name == 1"}],
            },
            "'(string, int)'",
        ),
        (  # matchConditions are compiled without variables
            {
                "variables": [{"name": "a", "expression": "1"}],
                "matchConditions": [{"name": "m", "expression": "variables.a == 1"}],
                "validations": [{"expression": "true"}],
            },
            "undeclared reference to 'variables",
        ),
        (
            {"validations": [{"expression": "duration('1y') > duration('1s')"}]},
            "invalid duration argument",
        ),
        (
            {"validations": [{"expression": "timestamp('2020-13-01T00:00:00Z') != null"}]},
            "invalid timestamp argument",
        ),
        (
            {"validations": [{"expression": "object.spec"}]},
            'spec.validations[0].expression: Invalid value: "object.spec": must evaluate to bool',
        ),
        (
            {"validations": [{"expression": "true", "messageExpression": "object.x"}]},
            "must evaluate to string",
        ),
        (
            {"validations": [{"expression": "true", "messageExpression": "authorizer.x"}]},
            "undeclared reference to 'authorizer",  # 1.30 declares none for messages
        ),
        (
            {"validations": [{"expression": "authorizer.group('').resource('pods') != null"}]},
            NOT_MODELLED_AUTHORIZER,
        ),
        (
            {"variables": [{"name": "not-an-identifier", "expression": "1"}]},
            'spec.variables[0].name: Invalid value: "not-an-identifier": '
            "name is not a valid CEL identifier",
        ),
    ],
)
def test_a_policy_1_30_refuses_on_write_is_refused(spec: dict[str, Any], said: str) -> None:
    assert said in "\n".join(policy_errors(spec))


@pytest.mark.parametrize(
    "expression",
    [
        "'%s is %d'.format(['a', 1]) != ''",  # format's list may mix types
        "object.?spec.?replicas.orValue(1) > 0",  # optionals, in 1.30 since 1.28
        "[?optional.none(), 1].size() == 1",
        "namespaceObject.metadata.UID != '' && 'a' in namespaceObject.metadata.labels",
        "request.userInfo.groups.exists(g, g == 'devs') || request.dryRun",
    ],
)
def test_what_1_30_admits_is_admitted(expression: str) -> None:
    assert check(expression, Declarations(authorizer=True), BOOL).error == ""


def test_an_optional_is_evaluated_against_the_request_as_written() -> None:
    spec = {
        "variables": [{"name": "replicas", "expression": "object.?spec.?replicas.orValue(1)"}],
        "validations": [{"expression": "variables.replicas < 3", "message": "too many"}],
    }
    assert policy_errors(spec) == []
    small, large = ({"spec": {"replicas": n}} for n in (2, 5))
    assert validate(spec, PolicyInputs(object={})).decisions[0].action == "admit"
    assert validate(spec, PolicyInputs(object=small)).decisions[0].action == "admit"
    assert validate(spec, PolicyInputs(object=large)).decisions[0].message == "too many"


def test_a_webhook_match_condition_is_checked_with_1_30_types() -> None:
    def configuration(expression: str) -> dict[str, Any]:
        return {"webhooks": [{"matchConditions": [{"name": "m", "expression": expression}]}]}

    assert configuration_errors(configuration("request.userInfo.username != 'x'")) == []
    assert configuration_errors(configuration("namespaceObject == null")) == []
    (misspelt,) = configuration_errors(configuration("request.userInfo.foo5 == 'x'"))
    assert misspelt.startswith("webhooks[0].matchConditions[0].expression: Invalid value: ")
    assert "undefined field 'foo5'" in misspelt
    (not_bool,) = configuration_errors(configuration("object.metadata.name"))
    assert not_bool.endswith("must evaluate to bool")


async def test_a_misspelt_field_is_refused_when_the_policy_is_written(box: Box) -> None:
    policy: dict[str, Any] = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "misspelt"},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": []},
            "validations": [{"expression": "request.userInfo.usrname != 'mallory'"}],
        },
    }
    status, body, warnings = await box.call("POST", f"{GROUP}/validatingadmissionpolicies", policy)
    assert (status, body["reason"]) == (422, "Invalid")
    assert "spec.validations[0].expression: Invalid value: " in body["message"]
    assert "undefined field 'usrname'" in body["message"]
    policy["spec"]["validations"] = [{"expression": "request.userInfo.username != 'mallory'"}]
    status, body, warnings = await box.call("POST", f"{GROUP}/validatingadmissionpolicies", policy)
    assert (status, warnings) == (201, [])  # 1.30 writes no warnings for a policy
    assert (await box.call("POST", PODS, pod("p1")))[0] == 201
