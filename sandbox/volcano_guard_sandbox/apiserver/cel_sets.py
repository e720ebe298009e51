"""cel-go's sets extension (ext/sets.go, `ext.Sets()`, in the base environment since 1.29), in
Python: `sets.contains`, `sets.equivalent` and `sets.intersects` over two lists of one element
type, with CEL's heterogeneous equality (cel-go's Lister.Contains: `1`, `1u` and `1.0` are
equal; `"1"` and `1` are not; lists and maps compare element by element)."""

from __future__ import annotations

import datetime
from typing import Any

from cel_expr_python import cel


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def cel_equal(left: Any, right: Any) -> bool:
    """CEL's `==` on two values: numbers by value across int, uint and double; else one kind."""
    if _number(left) and _number(right):
        return bool(left == right)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(map(cel_equal, left, right))
    if isinstance(left, dict) and isinstance(right, dict):
        return len(left) == len(right) and all(
            any(cel_equal(key, other) and cel_equal(value, right[other]) for other in right)
            for key, value in left.items()
        )
    if isinstance(left, bytes | bytearray) and isinstance(right, bytes | bytearray):
        return bytes(left) == bytes(right)
    kinds = (bool, str, datetime.datetime, datetime.timedelta, type(None), cel.Type)
    for kind in kinds:
        if isinstance(left, kind) or isinstance(right, kind):
            return isinstance(left, kind) and isinstance(right, kind) and bool(left == right)
    return bool(left == right)


def _contains(items: list[Any], value: Any) -> bool:
    return any(cel_equal(item, value) for item in items)


def sets_contains(items: list[Any], sublist: list[Any]) -> bool:
    return all(_contains(items, value) for value in sublist)


def sets_equivalent(left: list[Any], right: list[Any]) -> bool:
    return sets_contains(left, right) and sets_contains(right, left)


def sets_intersects(left: list[Any], right: list[Any]) -> bool:
    return any(_contains(right, value) for value in left)


# cel-go declares list(T) twice: two lists of one element type (T, a type parameter).
_LIST = cel.Type.List(cel.Type("T"))
SETS_OVERLOADS: tuple[tuple[str, str, tuple[cel.Type, ...], cel.Type, bool, Any], ...] = (
    (
        "sets.contains",
        "list_sets_contains_list",
        (_LIST, _LIST),
        cel.Type.BOOL,
        False,
        sets_contains,
    ),
    (
        "sets.equivalent",
        "list_sets_equivalent_list",
        (_LIST, _LIST),
        cel.Type.BOOL,
        False,
        sets_equivalent,
    ),
    (
        "sets.intersects",
        "list_sets_intersects_list",
        (_LIST, _LIST),
        cel.Type.BOOL,
        False,
        sets_intersects,
    ),
)
