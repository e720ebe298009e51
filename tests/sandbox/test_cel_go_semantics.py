"""Where cel-go v0.17.8 and cel-cpp answer differently, the sandbox answers as cel-go, in both of
its evaluators (cel-cpp's runtime, and cel_eval, which counts cost)."""

from __future__ import annotations

import pytest
from cel_expr_python import cel

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
