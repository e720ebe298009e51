import contextlib
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from volcano_guard.base.quantity import QuantityError, canonical_quantity, parse_quantity


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("100m", Decimal("0.1")),
        ("1.5Gi", Decimal(3 * 2**29)),
        ("2e3", Decimal(2000)),
        ("1Ki", Decimal(1024)),
        ("1E-3", Decimal("0.001")),
        (".5", Decimal("0.5")),
        ("1.", Decimal(1)),
        ("+2k", Decimal(2000)),
        ("-1", Decimal(-1)),
        ("0", Decimal(0)),
        ("128974848", Decimal(128974848)),
        ("129e6", Decimal(129000000)),
        ("123Mi", Decimal(123 * 2**20)),
        ("1Ei", Decimal(2**60)),
        ("5n", Decimal("0.000000005")),
        ("7u", Decimal("0.000007")),
        (2, Decimal(2)),
        (0.5, Decimal("0.5")),
    ],
)
def test_parses_kubernetes_quantities_exactly(text, value):
    assert parse_quantity(text) == value


# apimachinery pkg/api/resource quantity_test.go TestQuantityParse, "Things that saturate/round"
# and "Things written by trolls": ParseQuantity rounds away from zero to a nano and caps a
# binary-suffixed value at 2^63-1 (maxAllowed).
@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("3.001n", "4e-9"),
        ("1.1E-9", "2e-9"),
        ("0.0000000001", "1e-9"),
        ("0.0000000005", "1e-9"),
        ("0.00000000050", "1e-9"),
        ("0.5e-9", "1e-9"),
        ("0.9n", "1e-9"),
        ("0.00000012345", "124e-9"),
        ("0.00000012354", "124e-9"),
        ("9Ei", "9223372036854775807"),
        ("9223372036854775807Ki", "9223372036854775807"),
        ("12E", "12e18"),
        ("0.000000000001Ki", "2e-9"),
        ("-0.0000000001", "-1e-9"),  # the magnitude rounds, then the sign returns
        ("-9Ei", "-9223372036854775807"),
        ("1e1000000", "1e1000000"),  # a decimal value is never capped
    ],
)
def test_parses_as_kubernetes_holds_a_quantity_rounded_to_a_nano_binary_capped(text, value):
    assert parse_quantity(text) == Decimal(value)


@pytest.mark.parametrize(
    "text",
    [
        "",
        " 1",
        "1 ",
        "1.5 Gi",
        "Gi",
        "1Gb",
        "1e",
        "1ki",
        "--1",
        "1.5.5",
        "0x10",
        "1,5",
        "abc",
        "1e1.5",
        "\u0661",
    ],
)
def test_rejects_text_that_is_not_a_quantity(text):
    with pytest.raises(QuantityError):
        parse_quantity(text)


@pytest.mark.parametrize("value", [None, True, [], {}, float("nan"), float("inf")])
def test_rejects_values_of_the_wrong_type(value):
    with pytest.raises(QuantityError):
        parse_quantity(value)


def test_huge_exponent_is_refused_quickly_not_computed():
    with pytest.raises(QuantityError, match="out of range"):
        parse_quantity("1e999999999")


def test_overlong_text_is_refused():
    with pytest.raises(QuantityError, match="longer"):
        parse_quantity("1" * 500)


def test_binary_and_decimal_suffixes_compare_by_value():
    assert parse_quantity("1Gi") > parse_quantity("1G")
    assert parse_quantity("1000m") == parse_quantity("1")
    assert parse_quantity("0.5") == parse_quantity("500m")


@given(st.text(max_size=40))
def test_arbitrary_text_either_parses_or_raises_quantity_error(text):
    with contextlib.suppress(QuantityError):
        parse_quantity(text)


@given(st.integers(min_value=0, max_value=10**15), st.sampled_from(["", "k", "M", "Ki", "Mi"]))
def test_integer_with_suffix_round_trips(number, suffix):
    scale = {"": 1, "k": 10**3, "M": 10**6, "Ki": 2**10, "Mi": 2**20}[suffix]
    capped = 2**63 - 1 if suffix.endswith("i") else None  # a binary suffix: maxAllowed
    expected = number * scale if capped is None else min(number * scale, capped)
    assert parse_quantity(f"{number}{suffix}") == expected


# apimachinery pkg/api/resource quantity_test.go TestQuantityParseEmit's table (and its negated
# run), and what CanonicalizeBytes makes of the suffix kinds and of whole multiples of 1000.
@pytest.mark.parametrize(
    ("text", "printed"),
    [
        ("1Ki", "1Ki"),
        ("1Mi", "1Mi"),
        ("1Gi", "1Gi"),
        ("1024Mi", "1Gi"),
        ("1000M", "1G"),
        (".001Ki", "1024m"),
        (".000001Ki", "1024u"),
        (".000000001Ki", "1024n"),
        (".000000000001Ki", "2n"),
        ("1.5", "1500m"),
        ("2000m", "2"),
        ("3000", "3k"),
        ("1500", "1500"),
        ("0.5Gi", "512Mi"),
        ("1.5Ki", "1536"),
        ("1023Ki", "1023Ki"),
        ("1e3", "1e3"),
        ("80e-3", "80e-3"),
        ("1E", "1E"),
    ],
)
def test_a_quantity_is_printed_as_kubernetes_prints_it(text, printed):
    assert canonical_quantity(text) == printed
    assert canonical_quantity("-" + text) == "-" + printed


def test_zero_is_printed_without_a_sign_or_suffix():
    assert [canonical_quantity(text) for text in ("0", "-0", "0Gi", "0e3")] == ["0"] * 4
