"""Where cel-go v0.17.8 and cel-cpp answer differently, the sandbox answers as cel-go, in both of
its evaluators (cel-cpp's runtime, and cel_eval, which counts cost)."""

from __future__ import annotations

import pytest
from cel_expr_python import cel
from google.protobuf import timestamp_pb2

from volcano_guard_sandbox.apiserver import cel_eval
from volcano_guard_sandbox.apiserver.kubernetes_cel import environment


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("duration('1h2m3s4ms').getMilliseconds()", 3_723_004),  # cel-cpp: 4
        ("duration('-1.5s').getMilliseconds()", -1500),  # Go truncates toward zero
        ("dyn(duration('2s')).getMilliseconds()", 2000),  # the checker cannot narrow dyn
        ("timestamp('2011-08-18T19:03:37.01Z').getMilliseconds()", 10),  # the part, as before
        ("dyn(timestamp('2011-08-18T19:03:37.01Z')).getMilliseconds()", 10),
        ("timestamp('2011-08-18T19:03:37.01Z').getMilliseconds('+01:00')", 10),
    ],
)
def test_get_milliseconds_of_a_duration_is_the_whole_duration_as_cel_go(expression, value):
    env = environment({"x": cel.Type.DYN})
    assert env.compile(expression).eval(data={}).value() == value
    outcome = cel_eval.evaluate_costed(env.compile, expression, {})
    assert outcome is not None and (outcome.value, outcome.error) == (value, "")


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("x.getMilliseconds()", 10),
        ("x == timestamp('2011-08-18T19:03:37.01Z')", True),
        ("[x].indexOf(timestamp('2011-08-18T19:03:37.01Z'))", 0),
        ("type(x) == google.protobuf.Timestamp", True),
    ],
)
def test_a_timestamp_given_as_cel_cpp_takes_it_is_a_timestamp_to_the_cost_evaluator(
    expression, value
):
    """A variable holding a protobuf Timestamp (how cel-cpp takes one, and how the conformance
    runner passes upstream's values) compares, indexes and names its type as a timestamp."""
    timestamp = timestamp_pb2.Timestamp()
    timestamp.FromJsonString("2011-08-18T19:03:37.010Z")
    env = environment({"x": cel.Type.DYN})
    outcome = cel_eval.evaluate_costed(env.compile, expression, {"x": timestamp})
    assert outcome is not None and (outcome.value, outcome.error) == (value, "")


@pytest.mark.parametrize(
    "expression",
    [
        "type(duration('1s')) == google.protobuf.Duration",
        "type(timestamp(0)) == google.protobuf.Timestamp",
    ],
)
def test_a_well_known_type_name_is_a_type_to_the_cost_evaluator(expression):
    """cel-go resolves google.protobuf.Duration and Timestamp as type values, as int or string."""
    env = environment({"x": cel.Type.DYN})
    assert env.compile(expression).eval(data={}).value() is True
    outcome = cel_eval.evaluate_costed(env.compile, expression, {})
    assert outcome is not None and (outcome.value, outcome.error) == (True, "")


@pytest.mark.parametrize("value", [None, "1s", 3, [1]])
def test_get_milliseconds_of_what_is_neither_is_no_such_overload_not_a_crash(value):
    """Found by the slow fuzz: `object.getMilliseconds()` with a null object raised."""
    env = environment({"x": cel.Type.DYN})
    outcome = cel_eval.evaluate_costed(env.compile, "x.getMilliseconds()", {"x": value})
    assert outcome is not None and "no such overload" in outcome.error
