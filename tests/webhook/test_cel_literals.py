"""A config value rendered into the guard's CEL stays that value, whatever it holds."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from volcano_guard.webhook.cel import string, strings
from volcano_guard_sandbox.apiserver import cel_eval, policy_validation

HOSTILE = [
    "volcano'; true || '",
    "back\\slash\\",
    "new\nline",
    "carriage\rreturn\ttab\x00nul\x7fdel",
    "\\x41 is not A",
    "'''triple'''",
    '"double" ${x}',
    "é ünïcödé \u2028 😀",
    "a/b~c",
]


def evaluated(expression: str) -> object:
    node = cel_eval.plan_of(policy_validation.program, expression)
    assert node is not None
    return cel_eval.run(node, {}).value


@pytest.mark.parametrize("value", HOSTILE)
def test_a_hostile_string_is_one_literal_of_itself(value):
    """A newline in a scheduler name ended the quoted literal: every policy it was rendered
    into failed to compile."""
    assert evaluated(string(value)) == value
    assert evaluated(f"{string(value)} in {strings(HOSTILE)}") is True


@settings(max_examples=200, deadline=None)
@given(st.text(st.characters(exclude_categories=["Cs"]), max_size=20))
def test_any_text_is_one_literal_of_itself(value):
    assert evaluated(string(value)) == value
