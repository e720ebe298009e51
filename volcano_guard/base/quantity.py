"""Kubernetes resource quantities (`100m`, `1.5Gi`, `2e3`), parsed exactly.

Follows the grammar of k8s.io/apimachinery/pkg/api/resource: a signed decimal number, then one
suffix: binary SI (Ki..Ei), decimal SI (n, u, m, "", k, M, G, T, P, E) or a decimal exponent
(e/E and a signed integer). JSON numbers are accepted as the apiserver accepts them.
"""

from __future__ import annotations

import re
from decimal import MAX_EMAX, MIN_EMIN, Context, Decimal
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


class QuantityError(ValueError):
    """The value is not a Kubernetes quantity."""


def parse_quantity(value: object) -> Decimal:
    """Return the quantity's exact value; raise QuantityError naming what is wrong."""
    if type(value) is str:  # nearly always: checked first
        return _parse_text(value)
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise QuantityError(f"expected a quantity string or number, got {type(value).__name__}")
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise QuantityError("not a finite number")
        return Decimal(repr(value))
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
        return EXACT.multiply(number, Decimal(1024) ** _BINARY[suffix])
    if suffix in _DECIMAL:
        return EXACT.scaleb(number, _DECIMAL[suffix])
    exponent = int(suffix[1:])
    if abs(exponent) > 10**6:
        raise QuantityError(f"exponent {exponent} is out of range")
    return EXACT.scaleb(number, exponent)
