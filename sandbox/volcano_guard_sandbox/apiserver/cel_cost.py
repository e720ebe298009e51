"""CEL's runtime cost as kube-apiserver 1.30 counts it (cel-go v0.17.8 interpreter/runtimecost.go,
common/cost.go, and Kubernetes' pkg/cel/library/cost.go CallCost), with the API server's limits
and error texts (pkg/apis/cel/config.go, pkg/admission/plugin/cel/filter.go).

The evaluator that charges these costs is cel_eval; this module holds the numbers.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from typing import Any

PER_CALL_LIMIT = 1_000_000  # celconfig.PerCallLimit: one expression's evaluation
RUNTIME_BUDGET = 10_000_000  # celconfig.RuntimeCELCostBudget: a policy binding's evaluation
MATCH_CONDITIONS_BUDGET = 2_500_000  # celconfig.RuntimeCELCostBudgetMatchConditions

COST_LIMIT_EXCEEDED = "operation cancelled: actual cost limit exceeded"
OUT_OF_BUDGET = (
    "validation failed due to running out of cost budget, no further validation rules will be run"
)

LIST_CREATE = 10  # common.ListCreateBaseCost
MAP_CREATE = 30  # common.MapCreateBaseCost
STRUCT_CREATE = 40  # common.StructCreateBaseCost
STRING_FACTOR = 0.1  # common.StringTraversalCostFactor
REGEX_FACTOR = 0.25  # common.RegexStringLengthCostFactor


class CostLimitExceeded(Exception):
    """The per-call limit was passed: cel-go cancels the evaluation."""


def size(value: Any) -> int:
    """CostTracker.actualSize: a Sizer's size (strings in code points), else 1."""
    if isinstance(value, str | bytes | list | tuple | dict):
        return len(value)
    return 1


def _scaled(value: float) -> int:
    return math.ceil(value * STRING_FACTOR)


def traversal(value: Any) -> int:
    """library/cost.go traversalCost (truncates, where the others round up)."""
    if isinstance(value, str | bytes):
        return int(len(value) * STRING_FACTOR)
    if isinstance(value, list | tuple):
        return sum(traversal(item) for item in value)
    if isinstance(value, Mapping):
        return sum(traversal(key) + traversal(item) for key, item in value.items())
    return 1


def _regex(text: Any, pattern: Any) -> int:
    string_cost = math.ceil((1 + size(text)) * STRING_FACTOR)
    return string_cost * math.ceil(size(pattern) * REGEX_FACTOR)


def _library_cost(function: str, overload: str, args: list[Any], result: Any) -> int | None:
    """library/cost.go CostEstimator.CallCost, for the libraries the sandbox models."""
    if function in ("isSorted", "sum", "max", "min", "indexOf", "lastIndexOf"):
        return traversal(args[0]) if args else 0
    if function in ("url", "lowerAscii", "upperAscii", "substring", "trim", "quantity"):
        return _scaled(size(args[0])) if args else None
    if function == "jsonpatch.escapeKey":
        return _scaled(size(args[0])) if args else None
    if function in ("isQuantity", "cidr", "isIP", "isCIDR"):
        return _scaled(size(args[0])) if args else None
    if function in ("replace", "split"):
        return _scaled(size(args[0]) * 2) if args else None
    if function == "join":
        return _scaled(size(result) * 2) if args else None
    if function in ("find", "findAll"):
        return _regex(args[0], args[1]) if len(args) >= 2 else None
    if function in (
        "sign",
        "asInteger",
        "isInteger",
        "asApproximateFloat",
        "isGreaterThan",
        "isLessThan",
        "compareTo",
        "add",
        "sub",
    ):
        return 1
    return None


_TRAVERSE_FIRST = {
    "starts_with_string",
    "ends_with_string",
    "string_to_bytes",
    "bytes_to_string",
    "strings_quote",
    "string_format",
}
_MIN_OF_TWO = {
    "less_string",
    "greater_string",
    "less_equals_string",
    "greater_equals_string",
    "less_bytes",
    "greater_bytes",
    "less_equals_bytes",
    "greater_equals_bytes",
    "equals",
    "not_equals",
}


# cel-go v0.17.8 ext/sets.go trackSetsCost: 1 + the product of the sizes, times a factor
# (equivalence may compare both ways).
_SETS_FACTORS = {
    "list_sets_contains_list": 1,
    "list_sets_intersects_list": 1,
    "list_sets_equivalent_list": 2,
}


def call_cost(function: str, overload: str, args: list[Any], result: Any) -> int:
    """CostTracker.costCall: an overload's own tracker (the sets extension's), then
    Kubernetes' estimator, then cel-go's defaults."""
    if overload in _SETS_FACTORS and len(args) == 2:
        return 1 + int(size(args[0]) * size(args[1]) * _SETS_FACTORS[overload])
    library = _library_cost(function, overload, args, result)
    if library is not None:
        return library
    return _standard_cost(overload, args)


_LIBRARY_FUNCTIONS = {
    *("isSorted", "sum", "max", "min", "indexOf", "lastIndexOf", "url", "lowerAscii"),
    *("upperAscii", "substring", "trim", "quantity", "isQuantity", "cidr", "isIP", "isCIDR"),
    *("replace", "split", "join", "find", "findAll", "sign", "asInteger", "isInteger"),
    *("asApproximateFloat", "isGreaterThan", "isLessThan", "compareTo", "add", "sub"),
    "jsonpatch.escapeKey",
}


def cost_function(function: str) -> Any:
    """call_cost for one function, chosen once: (overload, args, result) -> cost."""
    function = function.partition("@")[0]  # a call renamed to one overload: `sum@list_sum_int`
    if function in _LIBRARY_FUNCTIONS or function.startswith("sets."):
        return lambda overload, args, result: call_cost(function, overload, args, result)
    return lambda overload, args, result: _standard_cost(overload, args)


def _standard_cost(overload: str, args: list[Any]) -> int:
    """cel-go's defaults (runtimecost.go costCall's switch)."""
    if overload in _TRAVERSE_FIRST:
        return _scaled(size(args[0]))
    if overload == "in_list":
        return size(args[1])
    if overload in _MIN_OF_TWO:
        return _scaled(min(size(args[0]), size(args[1])))
    if overload in ("add_string", "add_bytes"):
        return _scaled(size(args[0]) + size(args[1]))
    if overload == "matches_string":
        return _regex(args[0], args[1])
    if overload == "contains_string":
        return _scaled(size(args[0])) * _scaled(size(args[1]))
    return 1


class Budget:
    """A remaining budget spent by the expressions of one filter (filter.go ForInput)."""

    def __init__(self, total: int) -> None:
        self.remaining = total
        self.spent = 0
        self.exhausted = False

    def charge(self, cost: int) -> bool:
        """Spend cost; False (and exhausted from then on) when it is more than remains."""
        self.spent += cost
        if cost > self.remaining:
            self.exhausted = True
            return False
        self.remaining -= cost
        return True


BUDGET: ContextVar[Budget | None] = ContextVar("cel_budget", default=None)


@contextlib.contextmanager
def budget(total: int) -> Iterator[Budget]:
    """The budget the expressions evaluated inside share (one filter's ForInput)."""
    current = Budget(total)
    token = BUDGET.set(current)
    try:
        yield current
    finally:
        BUDGET.reset(token)
