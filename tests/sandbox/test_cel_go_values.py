"""What cel-go keeps and cel-cpp loses, as a policy sees it: a timestamp's offset, Go's zero time
for optional.ofNonZeroValue, and a map keyed both by 1 and by true (upstream's cases:
validation_test.go conversions and optionals, cel-go ext/strings_test.go "map support (all key
types)")."""

from __future__ import annotations

import datetime

import pytest

from volcano_guard_sandbox.apiserver import cel_eval, policy_validation
from volcano_guard_sandbox.apiserver.matching import evaluate

ONE_HOUR_EAST = datetime.timezone(datetime.timedelta(hours=1))


def _policy_admits(expression: str, variables: list[dict[str, str]] | None = None) -> str:
    spec = {
        "validations": [{"expression": expression}],
        "variables": variables or [],
        "failurePolicy": "Fail",
    }
    result = policy_validation.validate(spec, policy_validation.PolicyInputs({}))
    (decision,) = result.decisions
    return decision.action if decision.evaluation != "error" else decision.message


@pytest.mark.parametrize(
    "expression",
    [
        "string(timestamp('2011-08-18T19:03:37.01+01:00')) == '2011-08-18T19:03:37.01+01:00'",
        "string(timestamp('2011-08-18T19:03:37.10-05:30')) == '2011-08-18T19:03:37.1-05:30'",
        "string(timestamp('2011-08-18T19:03:37+00:00')) == '2011-08-18T19:03:37Z'",
        "string(timestamp('2011-08-18T23:30:00+01:00') + duration('1h'))"
        " == '2011-08-19T00:30:00+01:00'",
        "timestamp('2011-08-18T19:03:37+01:00') == timestamp('2011-08-18T18:03:37Z')",
        "timestamp('2011-08-18T19:03:37+01:00').getHours() == 18",  # UTC without a zone
        "'%s'.format([timestamp('2011-08-18T19:03:37+01:00')]) == '2011-08-18T19:03:37+01:00'",
    ],
)
def test_a_timestamp_keeps_the_offset_it_was_written_with_as_cel_go(expression):
    assert _policy_admits(expression) == "admit"


def test_a_variable_holding_a_timestamp_reaches_cel_cpp_as_a_timestamp():
    """An expression cel_eval leaves to cel-cpp (format of a type value) reads a variable
    cel_eval computed: the timestamp goes to the binding as its protobuf message."""
    variables = [{"name": "t", "expression": "timestamp('2011-08-18T19:03:37+01:00')"}]
    expression = "'%s'.format([type(variables.t)]) != '' && variables.t.getHours() == 18"
    written = datetime.datetime(2011, 8, 18, 19, 3, 37, tzinfo=ONE_HOUR_EAST)
    data = {"variables": cel_eval.LazyVariables({"t": written}, {})}
    assert cel_eval.evaluate_costed(policy_validation.program, expression, data) is None
    assert _policy_admits(expression, variables) == "admit"


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("optional.ofNonZeroValue(timestamp('0001-01-01T00:00:00Z')) == optional.none()", True),
        ("optional.ofNonZeroValue(timestamp('0001-01-01T01:00:00+01:00')).hasValue()", False),
        ("optional.ofNonZeroValue(timestamp('1970-01-01T00:00:00Z')).hasValue()", True),
        ("optional.ofNonZeroValue(duration('0s')) == optional.none()", True),
        ("optional.ofNonZeroValue([]).orValue([1]) == [1]", True),
        ("optional.of(2).or(optional.of(3)).value()", 2),
        ("optional.none().or(optional.of(3)).value()", 3),
        ("optional.of(0) != optional.none()", True),
        ("{'a': 1}.?a == optional.of(1) && !{'a': 1}.?b.hasValue()", True),
        ("[1, 2][?1].orValue(0) + [1][?5].orValue(0)", 2),
        ("{'a': {'b': 1}}.?a.b.value() == 1 && !{'a': {'c': 1}}.?a.b.hasValue()", True),
        ("[?optional.none(), ?optional.of(2), 3] == [2, 3]", True),
        ("{?'a': optional.none(), ?'b': optional.of(2), 'c': 3} == {'b': 2, 'c': 3}", True),
    ],
)
def test_optionals_are_evaluated_with_cel_gos_zero_values_and_cost(expression, value):
    outcome = cel_eval.evaluate_costed(policy_validation.program, expression, {})
    assert outcome is not None, "left to cel-cpp, which counts no cost"
    assert (outcome.value, outcome.error) == (value, "")
    assert evaluate(policy_validation.program, expression, {}) == (value, "")


def test_the_value_of_an_empty_optional_is_cel_gos_error():
    expression = "optional.none().value() == 1"
    outcome = cel_eval.evaluate_costed(policy_validation.program, expression, {})
    assert outcome is not None and outcome.error == "optional.none() dereference"
    value, error = evaluate(policy_validation.program, expression, {})
    assert value is None and error.endswith("optional.none() dereference")


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("'%s'.format([{1: 'a', true: 'b'}])", '{1:"a", true:"b"}'),
        (
            "'%s'.format([{true: 'b', 1: 'a', 0: 'c', false: 'd'}])",
            '{0:"c", 1:"a", false:"d", true:"b"}',
        ),
        ("'%s'.format([{1: object.a, true: object.b}])", '{1:"x", true:"y"}'),  # not constant
    ],
)
def test_a_map_keyed_by_1_and_true_holds_two_entries_as_in_cel_go(expression, value):
    """base.go's homogeneous-literal check exempts format's arguments, where such a map can be
    written; Python's dict would take 1 and true as one key."""
    variables = {"object": {"a": "x", "b": "y"}}
    outcome = cel_eval.evaluate_costed(policy_validation.program, expression, variables)
    assert outcome is not None and (outcome.value, outcome.error) == (value, "")
    assert evaluate(policy_validation.program, expression, variables) == (value, "")


def test_format_of_a_dyn_that_is_not_a_list_is_no_such_overload():
    """Found by the slow fuzz as `'%s'.format(object)`: cel-go's format takes a traits.Lister."""
    program, expression = policy_validation.program, "'%s'.format(object)"
    outcome = cel_eval.evaluate_costed(program, expression, {"object": None})
    assert outcome is not None and outcome.error.startswith("no such overload")
    value, error = evaluate(program, expression, {"object": None})
    assert value is None and "overload" in error.lower()


def test_format_of_an_optional_is_cel_gos_error_not_a_crash():
    """`'%s'.format([optional.none()])` handed to cel-cpp crashed the process (the slow fuzz,
    a segfault): cel_eval formats it, as cel-go refuses it."""
    expression = "'%s'.format([optional.none()]) == ''"
    outcome = cel_eval.evaluate_costed(policy_validation.program, expression, {})
    assert outcome is not None
    assert outcome.error == (
        "error during formatting: string clause can only be used on strings, bools, bytes, "
        "ints, doubles, maps, lists, types, durations, and timestamps, was given optional_type"
    )
    value, error = evaluate(policy_validation.program, expression, {})  # not again in cel-cpp
    assert value is None and error.endswith("was given optional_type")


def test_a_match_condition_formatting_an_optional_is_decided_not_a_crash():
    """On main this crashed the sandbox's process (a segfault in cel-expr-python, found by the
    slow fuzz): a policy's matchCondition is evaluated on every matching request."""
    condition = "'%s %d'.format([optional.none()]) == ''"
    spec = {"validations": [], "matchConditions": [{"name": "c", "expression": condition}]}
    for _ in range(50):  # the crash did not come on every call
        result = policy_validation.validate(spec, policy_validation.PolicyInputs(object={}))
    (decision,) = result.decisions
    assert decision.evaluation == "error" and "optional_type" in decision.message
