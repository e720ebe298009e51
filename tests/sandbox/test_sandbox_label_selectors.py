"""The sandbox refuses (422) a label selector that kube-apiserver 1.30 refuses on write, in a
webhook configuration, a ValidatingAdmissionPolicy's matchConstraints and a binding's
matchResources and paramRef: the selector Go could not parse at admission is never stored.

The good and bad names and values are apimachinery v0.30.14's own test tables, transcribed:
pkg/util/validation/validation_test.go (TestIsQualifiedName, TestIsValidLabelValue) and
pkg/apis/meta/v1/validation/validation_test.go (TestValidateLabels,
TestLabelSelectorMatchExpression)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.sandbox.admission_chain import VALIDATING
from tests.sandbox.test_sandbox_policies import BINDINGS, POD_RULES, POLICIES, binding, policy
from volcano_guard_sandbox.apiserver.label_selectors import (
    label_value_errors,
    qualified_name_errors,
    selector_errors,
)

# validation_test.go TestIsQualifiedName
QUALIFIED_NAMES = [
    "simple",
    "now-with-dashes",
    "1-starts-with-num",
    "1234",
    "simple/simple",
    "now-with-dashes/simple",
    "now-with-dashes/now-with-dashes",
    "now.with.dots/simple",
    "now-with.dashes-and.dots/simple",
    "1-num.2-num/3-num",
    "1234/5678",
    "1.2.3.4/5678",
    "Uppercase_Is_OK_123",
    "example.com/Uppercase_Is_OK_123",
    "requests.storage-foo",
    "a" * 63,
    "a" * 253 + "/" + "b" * 63,
]
NOT_QUALIFIED_NAMES = [
    "nospecialchars%^=@",
    "cantendwithadash-",
    "-cantstartwithadash-",
    "only/one/slash",
    "Example.com/abc",
    "example_com/abc",
    "example.com/",
    "/simple",
    "a" * 64,
    "a" * 254 + "/abc",
]
# validation_test.go TestIsValidLabelValue
LABEL_VALUES = [
    "simple",
    "now-with-dashes",
    "1-starts-with-num",
    "end-with-num-1",
    "1234",
    "a" * 63,
    "",
]
NOT_LABEL_VALUES = [
    "nospecialchars%^=@",
    "Tama-nui-te-rā.is.Māori.sun",
    "\\backslashes\\are\\bad",
    "-starts-with-dash",
    "ends-with-dash-",
    ".starts.with.dot",
    "ends.with.dot.",
    "a" * 64,
]
NAME_PART = "name part must consist of"
QUALIFIED = "a qualified name must consist of"
LABEL = "a valid label must be an empty string or consist of"
TOO_LONG = "must be no more than"


CHECKS = [(qualified_name_errors, QUALIFIED_NAMES, NOT_QUALIFIED_NAMES)]
CHECKS += [(label_value_errors, LABEL_VALUES, NOT_LABEL_VALUES)]


@pytest.mark.parametrize(
    ("check", "text", "valid"),
    [
        (check, text, valid)
        for check, good, bad in CHECKS
        for valid, texts in ((True, good), (False, bad))
        for text in texts
    ],
)
def test_names_and_values_are_checked_as_apimachinery_checks_them(check, text, valid):
    assert (check(text) == []) is valid


# meta/v1 validation_test.go TestValidateLabels: one error each, with these words.
@pytest.mark.parametrize(
    ("labels", "words"),
    [
        ({"nospecialchars^=@": "bar"}, NAME_PART),
        ({"cantendwithadash-": "bar"}, NAME_PART),
        ({"only/one/slash": "bar"}, QUALIFIED),
        ({"a" * 254: "bar"}, TOO_LONG),
        ({"toolongvalue": "a" * 64}, TOO_LONG),
        ({"backslashesinvalue": "some\\bad\\value"}, LABEL),
        ({"nocommasallowed": "bad,value"}, LABEL),
        ({"strangecharsinvalue": "?#$notsogood"}, LABEL),
    ],
)
def test_match_labels_are_validated_as_labels(labels, words):
    (error,) = selector_errors({"matchLabels": labels}, "field")
    assert error.startswith("field.matchLabels: Invalid value: ") and words in error


def test_good_match_labels_pass():
    good = {"simple": "bar", "1.2.3.4/5678": "bar", "UpperCaseAreOK123": "bar"}
    assert selector_errors({"matchLabels": {**good, "goodvalue": "123_-.BaR"}}, "field") == []


# meta/v1 validation_test.go TestLabelSelectorMatchExpression, and the operator's rules of
# ValidateLabelSelectorRequirement.
@pytest.mark.parametrize(
    ("requirement", "expected"),
    [
        ({"key": "key", "operator": "In", "values": ["value"]}, []),
        ({"key": "k", "operator": "Exists"}, []),
        (
            {"key": "-key", "operator": "In", "values": ["value"]},
            ['s.matchExpressions[0].key: Invalid value: "-key": name part must consist of'],
        ),
        (
            {"key": "key", "operator": "abc", "values": ["value"]},
            ['s.matchExpressions[0].operator: Invalid value: "abc": not a valid selector operator'],
        ),
        (
            {"key": "key", "operator": "In", "values": ["-value"]},
            ['s.matchExpressions[0].values[0]: Invalid value: "-value": ' + LABEL],
        ),
        (
            {"key": "key", "operator": "NotIn", "values": []},
            [
                "s.matchExpressions[0].values: Required value: must be specified when "
                "`operator` is 'In' or 'NotIn'"
            ],
        ),
        (
            {"key": "key", "operator": "DoesNotExist", "values": ["a"]},
            [
                "s.matchExpressions[0].values: Forbidden: may not be specified when "
                "`operator` is 'Exists' or 'DoesNotExist'"
            ],
        ),
    ],
)
def test_a_match_expression_is_validated_as_its_operator_needs(requirement, expected):
    errors = selector_errors({"matchExpressions": [requirement]}, "s")
    assert len(errors) == len(expected)
    assert all(error.startswith(words) for error, words in zip(errors, expected, strict=True))


BAD_VALUE = {"matchExpressions": [{"key": "key", "operator": "In", "values": ["bad value"]}]}
BAD_VALUE_ERROR = (
    'matchExpressions[0].values[0]: Invalid value: "bad value": a valid label must be an empty '
    "string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with "
    "an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for "
    "validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)


def _refusal(status: int, body: Any) -> str:
    assert (status, body["reason"]) == (422, "Invalid"), body
    return str(body["message"])


async def test_a_webhook_configuration_with_a_bad_selector_value_is_refused(box):
    hook = box.hook("bad.example.com", objectSelector=BAD_VALUE)
    config = {"metadata": {"name": "bad"}, "webhooks": [hook]}
    message = _refusal(*(await box.call("POST", VALIDATING, config))[:2])
    assert f"webhooks[0].objectSelector.{BAD_VALUE_ERROR}" in message
    assert (await box.call("GET", f"{VALIDATING}/bad"))[0] == 404


async def test_a_policy_with_a_bad_namespace_selector_is_refused(box):
    constraints = {**POD_RULES, "namespaceSelector": BAD_VALUE}
    status, body, _ = await box.call("POST", POLICIES, policy(matchConstraints=constraints))
    assert f"spec.matchConstraints.namespaceSelector.{BAD_VALUE_ERROR}" in _refusal(status, body)


async def test_a_binding_with_a_bad_selector_is_refused_and_a_good_one_stored(box):
    bad = binding(matchResources={"objectSelector": BAD_VALUE})
    message = _refusal(*(await box.call("POST", BINDINGS, bad))[:2])
    # upstream's field path, misspelt as validation.go spells it
    assert f"spec.matchResouces.objectSelector.{BAD_VALUE_ERROR}" in message
    ref = {"selector": {"matchLabels": {"bad key": "x"}}, "parameterNotFoundAction": "Deny"}
    message = _refusal(*(await box.call("POST", BINDINGS, binding(paramRef=ref)))[:2])
    assert 'spec.paramRef.selector.matchLabels: Invalid value: "bad key": name part' in message
    good = {"objectSelector": {"matchLabels": {"example.com/team": "a"}}}
    assert (await box.call("POST", BINDINGS, binding(matchResources=good)))[0] == 201
