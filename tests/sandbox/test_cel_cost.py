"""The sandbox counts CEL cost as kube-apiserver 1.30 does: the actual costs Kubernetes pins in
its own tests (k8s.io/apiserver pkg/cel/library/cost_test.go, the runtime cost of each case; and
apiextensions-apiserver's celcoststability_test.go), the per-call limit with cel-go's error, the
per-evaluation and matchConditions budgets with the API server's, and no iteration cap: a valid
Volcano Job cel-cpp alone gives up on is admitted with the guard's policies."""

from __future__ import annotations

import re
from typing import Any

import pytest
from cel_expr_python import cel

from tests.upstream import upstream_file
from volcano_guard_sandbox.apiserver import cel_cost, cel_eval, matching, policy_validation
from volcano_guard_sandbox.apiserver.kubernetes_cel import environment
from volcano_guard_sandbox.conformance import golang

APISERVER_1_30 = "v0.30.14"
COST_TEST = "pkg/cel/library/cost_test.go"
_ENV = environment({"self": cel.Type.DYN})


def cost_of(expression: str, data: dict[str, Any] | None = None, optimize: bool = True) -> Any:
    """The Outcome (value, error, cost), or None when the sandbox does not model it."""
    try:
        serialized = _ENV.compile(expression).serialize()
        return cel_eval.run(cel_eval.plan(serialized, optimize), data or {})
    except (RuntimeError, cel_eval.NotModelled):
        return None


go_string = golang.unquote  # one Go string literal's value


def library_cost_cases() -> list[tuple[str, int]]:
    """(expression, expected runtime cost) for every case of cost_test.go that names both: the
    `expr:`/`expectRuntimeCost:` tables and the list tables (a literal and its operations)."""
    source = upstream_file("kubernetes-apiserver", APISERVER_1_30, COST_TEST)
    literals = dict(re.findall(r'^\t(\w+Literal)\s+= ((?:"[^"\n]*"(?: \+\s*)?)+)', source, re.M))
    constants = {
        name: "".join(go_string(part) for part in re.findall(r'"[^"\n]*"', value))
        for name, value in literals.items()
    }
    cases = [
        (go_string(expr), int(cost))
        for expr, cost in re.findall(
            r'expr:\s+("(?:[^"\\\n]|\\.)*"|`[^`]*`),.*?expectRuntimeCost:\s+(\d+)', source, re.S
        )
    ]
    for block in re.findall(
        r"opts: \[\]string\{(.*?)\},\s*(?://[^\n]*\n\s*)?costs: (.*?)\n\t\t\},", source, re.S
    ):
        operations = [go_string(o) for o in re.findall(r'"[^"]*"', block[0])]
        for literal, param, cost in re.findall(
            r"comparableLiteral:\s+(\w+),(?:\s*param:\s+(\"[^\"]*\"),)?"
            r".*?expectedRuntimeCost: (\d+)",
            block[1],
            re.S,
        ):
            for operation in operations:
                operation = operation % go_string(param) if "%s" in operation else operation
                cases.append((constants[literal] + operation, int(cost)))
    return cases


def compared(cases: list[tuple[str, dict[str, Any], int]], optimize: bool = True) -> list[Any]:
    """Each case the sandbox models whose cost differs: (expression, expected, cost, error).
    Prints how many agree and how many are not modelled (do not compile in the sandbox)."""
    agree, differ, not_modelled = 0, [], 0
    for expression, data, expected in cases:
        outcome = cost_of(expression, data, optimize)
        if outcome is None:
            not_modelled += 1
        elif outcome.cost == expected:
            agree += 1
        else:
            differ.append((expression, expected, outcome.cost, outcome.error))
    print(f"{agree} agree, {len(differ)} differ, {not_modelled} not modelled")
    assert agree >= len(cases) // 2
    return differ


def test_the_actual_costs_kubernetes_pins_are_the_sandboxs():
    cases = library_cost_cases()
    assert len(cases) > 90
    # testCost's program has no OptOptimize: its literals are built, not folded
    assert compared([(e, {}, cost) for e, cost in cases], optimize=False) == []


APIEXTENSIONS_1_30 = "v0.30.14"
COST_STABILITY = "pkg/apiserver/schema/cel/celcoststability_test.go"
# The schema types whose values are plain JSON in CEL, and what CEL makes of a number in them.
PLAIN_SCHEMAS = {
    "integerType": int,
    "int32Type": int,
    "int64Type": int,
    "numberType": float,
    "floatType": float,
    "doubleType": float,
    "stringType": str,
    "booleanType": bool,
    "listType(&integerType)": list,
}
GO_CONSTANTS = {
    "math.MaxInt64": 2**63 - 1,
    "math.MaxInt32": 2**31 - 1,
    "math.MaxFloat64": 1.7976931348623157e308,
    "math.MaxFloat32": 3.4028234663852886e38,
}


def go_arguments(text: str) -> list[str]:
    """Top-level comma-separated arguments of a Go call."""
    parts, depth, current = [], 0, ""
    for char in text:
        depth += (char in "({[") - (char in ")}]")
        if char == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    return [*parts, current.strip()] if current.strip() else parts


def go_value(text: str) -> Any:
    if text in GO_CONSTANTS:
        return GO_CONSTANTS[text]
    if text in ("true", "false"):
        return text == "true"
    if text.startswith('"'):
        return go_string(text)
    if match := re.fullmatch(r"(?:int64|float64)\((.*)\)", text):
        return go_value(match.group(1))
    if match := re.fullmatch(r"\[\]interface\{\}\{(.*)\}", text):
        return [go_value(item) for item in go_arguments(match.group(1))]
    return float(text) if "." in text else int(text)


def go_text(text: str) -> str:
    """A Go string expression: a literal, or fmt.Sprintf of a %d or %f and a constant."""
    if match := re.fullmatch(r'fmt\.Sprintf\("%([df])", (.*)\)', text):
        value = go_value(match.group(2))
        return str(value) if match.group(1) == "d" else f"{value:f}"
    return go_string(text)


_GO_SCALAR = re.compile(r'"(?:[^"\\\n]|\\.)*"|-?\d+(?:\.\d+)?|true|false|nil')
_GO_LISTS = (("map[string]interface{}{", dict), ("[]interface{}{", list))


def go_literal(text: str, position: int) -> tuple[Any, int]:
    """(value, where it ends) of a Go literal of maps, slices, strings, numbers, bools, nil;
    ValueError on anything else."""
    position = len(text) - len(text[position:].lstrip())
    for prefix, kind in _GO_LISTS:
        if text.startswith(prefix, position):
            return _go_composite(text, position + len(prefix), kind)
    token = _GO_SCALAR.match(text, position)
    if token is None:
        raise ValueError(text[position : position + 20])
    value = token.group()
    scalars = {"true": True, "false": False, "nil": None}
    if value in scalars:
        return scalars[value], token.end()
    if value.startswith('"'):
        return go_string(value), token.end()
    return (float(value) if "." in value else int(value)), token.end()


def _go_composite(text: str, position: int, kind: type) -> tuple[Any, int]:
    items: Any = kind()
    while True:
        position = len(text) - len(text[position:].lstrip(" \t\n,"))
        if text[position] == "}":
            return items, position + 1
        value, position = go_literal(text, position)
        if kind is dict:
            position = text.index(":", position) + 1
            items[value], position = go_literal(text, position)
        else:
            items.append(value)


def stability_cases() -> list[tuple[str, dict[str, Any], int]]:
    """(expression, self, actual cost) of TestCelCostStability's cases whose object is plain
    JSON (objs(...) of numbers, strings, booleans, lists of integers with plain schemas)."""
    source = upstream_file("kubernetes-apiextensions-apiserver", APIEXTENSIONS_1_30, COST_STABILITY)
    runtime = source.split("func TestCelEstimatedCostStability")[0]
    cases = []
    for block in runtime.split("{name: ")[1:]:
        obj = re.search(r"obj:\s+objs\((.*)\),\n", block)
        schema = re.search(r"schema:\s+schemas\((.*)\),\n", block)
        if not obj or not schema:
            cases += _literal_object_cases(block)
            continue
        kinds = go_arguments(schema.group(1))
        if any(kind not in PLAIN_SCHEMAS for kind in kinds):
            continue
        values = [go_value(v) for v in go_arguments(obj.group(1))]
        self_value = {
            f"val{i + 1}": PLAIN_SCHEMAS[kind](value) if PLAIN_SCHEMAS[kind] is float else value
            for i, (kind, value) in enumerate(zip(kinds, values, strict=True))
        }
        for expression, cost in re.findall(
            r'^\t+("(?:[^"\\\n]|\\.)*"|`[^`]*`|ValsEqualThemselvesAndDataLiteral\(.*\)):\s+(\d+),',
            block,
            re.M,
        ):
            if expression.startswith("ValsEqual"):
                arguments = expression[len("ValsEqualThemselvesAndDataLiteral(") : -1]
                left, right, literal = (go_text(a) for a in go_arguments(arguments))
                expression = f"{left} == {literal} && {literal} == {left} && {left} == {right}"
            else:
                expression = go_string(expression)
            cases.append((expression, self_value, int(cost)))
    return cases


def _literal_object_cases(block: str) -> list[tuple[str, dict[str, Any], int]]:
    """The cases of a block whose object is a Go literal (`obj: map[string]interface{}{...}`),
    evaluated as the JSON it is (the schema only types it)."""
    start = block.find("obj: map[string]interface{}{")
    if start < 0:
        return []
    try:
        obj, _ = go_literal(block, start + len("obj:"))
    except (ValueError, IndexError):
        return []
    expected = block.split("expectCost", 1)[1]
    return [
        (go_string(expression), obj, int(cost))
        for expression, cost in re.findall(r'^\t+("(?:[^"\\\n]|\\.)*"):\s+(\d+),', expected, re.M)
    ]


def test_the_costs_apiextensions_pins_for_plain_objects_are_the_sandboxs():
    cases = stability_cases()
    assert len(cases) > 200
    assert compared([(e, {"self": obj}, cost) for e, obj, cost in cases]) == []


def cpp_value(expression: str, data: dict[str, Any]) -> Any:
    """What cel-cpp alone gives: the plain value, or "error"."""
    try:
        value = _ENV.compile(expression).eval(data=data)
    except RuntimeError:  # its iteration cap
        return "error"
    return "error" if value.type() == cel.Type.ERROR else value.plain_value()


def costed_value(expression: str, data: dict[str, Any]) -> Any:
    outcome = cost_of(expression, data)
    assert outcome is not None, f"not modelled: {expression}"
    return "error" if outcome.error else outcome.value


def test_the_evaluator_gives_cel_cpps_values_for_the_library_tests_expressions():
    from tests.sandbox import test_kubernetes_cel as library_tests

    expressions = [e for e, _ in library_tests.LISTS_EXAMPLES + library_tests.REGEX_EXAMPLES]
    expressions += [e for e, _ in library_tests.documented_examples()]
    compiling = []
    for expression in expressions:
        try:
            _ENV.compile(expression)
        except RuntimeError:
            continue
        compiling.append(expression)
        assert costed_value(expression, {}) == cpp_value(expression, {}), expression
    assert len(compiling) >= 25


# A string and a regex whose match costs 951,000 (cel-go: ceil((1 + 9,500) x 0.1) x
# ceil(4,000 x 0.25)): under the per-call limit of 1,000,000, eleven of them over the
# evaluation's 10,000,000 and three over the matchConditions' 2,500,000.
COSTLY = {"s": "a" * 9500, "r": "x" * 4000}
COSTLY_MATCH = "!object.s.matches(object.r)"


def test_a_comprehension_past_cel_cpps_10000_iterations_is_evaluated_within_the_cost_limit():
    items = {"items": list(range(20_000))}
    expression = "object.items.all(x, x >= 0)"
    assert cpp_value(expression.replace("object", "self"), {"self": items}) == "error"
    result = policy_validation.validate(
        {"validations": [{"expression": expression}]}, policy_validation.PolicyInputs(items)
    )
    assert result.decisions == (policy_validation.PolicyDecision("admit", "admit"),)


def test_one_expression_over_the_per_call_limit_errors_as_cel_go_cancels_it():
    expression = "(object.s + object.s).matches(object.r)"  # 1,901 x 1,000
    outcome = cost_of(expression.replace("object", "self"), {"self": COSTLY})
    assert outcome.error == cel_cost.COST_LIMIT_EXCEEDED
    result = policy_validation.validate(
        {"validations": [{"expression": expression}]}, policy_validation.PolicyInputs(COSTLY)
    )
    (decision,) = result.decisions
    assert (decision.action, decision.evaluation) == ("deny", "error")
    assert decision.message == (
        f"expression '{expression}' resulted in error: operation cancelled: actual cost limit"
        " exceeded"
    )


def test_validations_past_the_evaluations_budget_fail_as_the_api_server_fails_them():
    spec = {"validations": [{"expression": COSTLY_MATCH}] * 10}
    inputs = policy_validation.PolicyInputs(COSTLY)
    assert all(d.action == "admit" for d in policy_validation.validate(spec, inputs).decisions)
    spec = {"validations": [{"expression": COSTLY_MATCH}] * 11, "failurePolicy": "Fail"}
    assert policy_validation.validate(spec, inputs).decisions == (
        policy_validation.PolicyDecision("deny", "error", cel_cost.OUT_OF_BUDGET),
    )


def test_match_conditions_share_their_own_smaller_budget():
    conditions = [{"name": f"c{i}", "expression": COSTLY_MATCH} for i in range(3)]
    variables = {"object": COSTLY, "oldObject": None, "request": {}}
    assert matching.evaluate_conditions(conditions[:2], policy_validation.program, variables) == (
        True,
        [],
    )
    assert matching.evaluate_conditions(conditions, policy_validation.program, variables) == (
        True,
        [cel_cost.OUT_OF_BUDGET],
    )
    webhook = {"failurePolicy": "Fail", "matchConditions": conditions}
    attributes = matching.Attributes(
        "CREATE", "", "v1", "pods", ("", "v1", "Pod"), "ns", "p", matching.User("u"), object=COSTLY
    )
    with pytest.raises(matching.ConditionError, match="running out of cost budget"):
        matching.conditions_match(webhook, attributes)


def test_audit_annotations_have_a_budget_of_their_own():
    annotation = {"key": "k", "valueExpression": f"{COSTLY_MATCH} ? 'costly' : 'cheap'"}
    spec = {
        "validations": [{"expression": COSTLY_MATCH}] * 10,
        "auditAnnotations": [annotation] * 10,
    }
    inputs = policy_validation.PolicyInputs(COSTLY)
    result = policy_validation.validate(spec, inputs)
    assert [a.value for a in result.audit_annotations] == ["costly"] * 10
    spec["auditAnnotations"] = [annotation] * 11
    assert policy_validation.validate(spec, inputs).decisions == (
        policy_validation.PolicyDecision("deny", "error", cel_cost.OUT_OF_BUDGET),
    )


def test_a_false_match_condition_still_spends_the_budget_of_those_after_it():
    conditions = [{"name": "no", "expression": "false"}]
    conditions += [{"name": f"c{i}", "expression": COSTLY_MATCH} for i in range(3)]
    variables = {"object": COSTLY, "oldObject": None, "request": {}}
    assert matching.evaluate_conditions(conditions, policy_validation.program, variables) == (
        True,
        [cel_cost.OUT_OF_BUDGET],
    )
