"""Kubernetes resource quantities (`100m`, `1.5Gi`, `2e3`), parsed exactly.

Follows the grammar of k8s.io/apimachinery/pkg/api/resource: a signed decimal number, then one
suffix: binary SI (Ki..Ei), decimal SI (n, u, m, "", k, M, G, T, P, E) or a decimal exponent
(e/E and a signed integer). JSON numbers are accepted as the apiserver accepts them.
"""

from __future__ import annotations

import re
from decimal import MAX_EMAX, MIN_EMIN, ROUND_UP, Context, Decimal
from functools import lru_cache

_PATTERN = re.compile(
    r"(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?"
)
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_MAX_TEXT = 128  # far longer than any real quantity; bounds the work done on hostile input
# Exact arithmetic for every value a Quantity can hold, however large its exponent.
EXACT = Context(prec=200, Emax=MAX_EMAX, Emin=MIN_EMIN)
NANO = Decimal("1e-9")
_MAX_INT64 = Decimal(2**63 - 1)  # a binary-suffixed quantity's cap (ParseQuantity maxAllowed)


class QuantityError(ValueError):
    """The value is not a Kubernetes quantity."""


def parse_quantity(value: object) -> Decimal:
    """Return the quantity's value as Kubernetes holds it (apimachinery pkg/api/resource
    ParseQuantity): exact, except rounded away from zero to a nano and, with a binary suffix,
    capped at 2^63-1 in magnitude. Raise QuantityError naming what is wrong."""
    if type(value) is str:  # nearly always: checked first
        return _parse_text(value)
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise QuantityError(f"expected a quantity string or number, got {type(value).__name__}")
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise QuantityError("not a finite number")
        return _to_nano(Decimal(repr(value)))
    if isinstance(value, int):
        return Decimal(value)
    return _parse_text(value)


@lru_cache(maxsize=4096)  # pods repeat a few quantities ("4", "16Gi") over and over
def _parse_text(text: str) -> Decimal:
    if not text:
        raise QuantityError("quantity is empty")
    if len(text) > _MAX_TEXT:
        raise QuantityError(f"quantity is longer than {_MAX_TEXT} characters")
    match = _PATTERN.fullmatch(text)
    if match is None:
        raise QuantityError(
            "not a Kubernetes quantity (a number with an optional suffix, e.g. 500m, 2, "
            "1.5Gi, 512Mi, 2e3)"
        )
    number = Decimal(match["number"])
    suffix = match["suffix"] or ""
    if suffix in _BINARY:
        value = _to_nano(EXACT.multiply(number, Decimal(1024) ** _BINARY[suffix]))
        return value if abs(value) <= _MAX_INT64 else _MAX_INT64.copy_sign(value)
    if suffix in _DECIMAL:
        return _to_nano(EXACT.scaleb(number, _DECIMAL[suffix]))
    exponent = int(suffix[1:])
    if abs(exponent) > 10**6:
        raise QuantityError(f"exponent {exponent} is out of range")
    return _to_nano(EXACT.scaleb(number, exponent))


def _to_nano(value: Decimal) -> Decimal:
    """Rounded away from zero to a nano, where it is finer ("if you want some resources, you
    should get some resources")."""
    if value.as_tuple().exponent >= -9:  # type: ignore[operator]  # finite: an int
        return value
    return value.quantize(NANO, rounding=ROUND_UP, context=EXACT)


_SI_SUFFIXES = {exponent: suffix for suffix, exponent in _DECIMAL.items()}
_BINARY_SUFFIXES = {power: suffix for suffix, power in _BINARY.items()}


def canonical_quantity(text: str) -> str:
    """The quantity as Kubernetes prints it (resource.Quantity.String(), CanonicalizeBytes):
    rounded away from zero to a nano; a binary suffix kept for a whole number of at least
    1024 (the largest power of 1024 that divides it), else the decimal suffix or exponent form
    of the largest power of 1000 that leaves a whole mantissa. Raises QuantityError."""
    value = parse_quantity(text)
    match = _PATTERN.fullmatch(text.strip()) if isinstance(text, str) else None
    suffix = (match["suffix"] or "") if match else ""
    value = value.normalize(EXACT)  # parse_quantity rounded it to a nano
    if value == 0:
        return "0"
    sign, magnitude = ("-" if value < 0 else ""), abs(value)
    if suffix in _BINARY and magnitude >= 1024 and magnitude == magnitude.to_integral_value():
        mantissa, power = int(magnitude), 0
        while power < 6 and mantissa % 1024 == 0:
            mantissa, power = mantissa // 1024, power + 1
        return f"{sign}{mantissa}{_BINARY_SUFFIXES.get(power, '')}"
    digits, exponent = _whole_mantissa(magnitude)
    if len(suffix) > 1 and suffix[0] in "eE":  # a decimal exponent, not the suffix E
        return f"{sign}{digits}" + (f"e{exponent}" if exponent else "")
    while exponent > 18:  # past E: a longer mantissa
        digits, exponent = digits * 1000, exponent - 3
    return f"{sign}{digits}{_SI_SUFFIXES[exponent]}"


def _whole_mantissa(magnitude: Decimal) -> tuple[int, int]:
    """(m, e) with magnitude == m * 10**e, e a multiple of 3 and as large as can be."""
    _, digit_tuple, exponent = magnitude.normalize(EXACT).as_tuple()
    mantissa = int("".join(map(str, digit_tuple)))
    assert isinstance(exponent, int)
    shift = exponent % 3  # down to a multiple of 3: multiply the mantissa by 10 or 100
    return mantissa * 10**shift, exponent - shift
