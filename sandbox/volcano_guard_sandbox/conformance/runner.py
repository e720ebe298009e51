"""Upstream's CEL cases run in the sandbox, each passed, failed, not modelled or unparsed.

A value is compared with CEL's equality (an int equals the double of its value, lists and maps
element-wise, quantities by value). An error matches when the sandbox's words contain
upstream's, or both name the same reason (REASONS: cel-go and cel-cpp word a division by zero
differently); a compile error must be a compile error, a runtime error a runtime error.
"""

from __future__ import annotations

import datetime
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal, Protocol

from volcano_guard.base.quantity import QuantityError, parse_quantity
from volcano_guard_sandbox.conformance import golang, sandbox_cel
from volcano_guard_sandbox.conformance.cases import (
    SOURCES,
    Case,
    Source,
    Unparsed,
    extract,
)

Verdict = Literal["passed", "failed", "not modelled", "unparsed"]
MIXED_LITERAL = "cel-go test environment: mixed literals"

# What the sandbox deliberately leaves out, by the need a case carries (cases.py), and why.
NOT_MODELLED: Mapping[str, str] = {
    "library:ip": "IP addresses: library.IP comes in 1.30 for stored expressions only; a new "
    "expression compiles at compatibility version 1.29 (environment/base.go), which lacks it",
    "library:cidr": "CIDRs: library.CIDR comes in 1.30 for stored expressions only, as ip",
    "authorizer": "authorizer checks: the sandbox has no authorizer to ask",
    "stored-expressions test library": "upstream's test-only library of stored expressions",
    "locale": "a locale other than en_US: a policy's strings library has the default one",
    "test-protobuf": "cel-go's test protobuf messages, in no policy's environment",
    "format-check option": "cel-go's format check at program time (OptCheckStringFormat), "
    "which Kubernetes does not enable: the case does not say what 1.30 answers",
    "crd:": "a CRD's structural schema around `self` (x-kubernetes-validations only)",
    MIXED_LITERAL: "a list or map literal of mixed types, which cel-go's own test environment "
    "admits and Kubernetes' (base.go 1.29, cel.ValidateHomogeneousAggregateLiterals) refuses "
    "when written, as the sandbox does",
}


def not_modelled_reason(case: Case) -> str:
    for need in sorted(case.needs):
        for prefix, reason in NOT_MODELLED.items():
            if need == prefix or (prefix.endswith(":") and need.startswith(prefix)):
                return f"{reason} ({need})" if prefix.endswith(":") else reason
    return ""


@dataclass(frozen=True)
class Result:
    file: str
    id: str
    verdict: Verdict
    expression: str = ""
    expected: str = ""
    got: str = ""
    category: str = ""


# -- comparison ----------------------------------------------------------------------------------


def _number(value: Any) -> bool:
    return isinstance(value, int | float | Decimal) and not isinstance(value, bool)


def _quantity_value(value: Any) -> Decimal | None:
    if isinstance(value, golang.Quantity):
        text = value.text
    elif type(value).__name__ == "Quantity" and hasattr(value, "value"):
        text = value.value
    else:
        return None
    try:
        return parse_quantity(text)
    except QuantityError:
        return None


def cel_equal(expected: Any, actual: Any) -> bool:
    """CEL's == between an expected Go value and the sandbox's plain value."""
    if isinstance(expected, golang.Unsigned):
        expected = expected.value
    if (quantity := _quantity_value(expected)) is not None:
        return quantity == _quantity_value(actual)
    if _number(expected) and _number(actual):
        if isinstance(expected, float) and math.isnan(expected):
            return isinstance(actual, float) and math.isnan(actual)
        return bool(expected == actual)
    if isinstance(expected, bool | str | type(None)):
        return type(expected) is type(actual) and expected == actual
    if isinstance(expected, bytes | bytearray):
        return isinstance(actual, bytes | bytearray) and bytes(expected) == bytes(actual)
    if isinstance(expected, list):
        return (
            isinstance(actual, list)
            and len(expected) == len(actual)
            and all(cel_equal(e, a) for e, a in zip(expected, actual, strict=True))
        )
    if isinstance(expected, dict):
        return (
            isinstance(actual, dict)
            and len(expected) == len(actual)
            and all(k in actual and cel_equal(v, actual[k]) for k, v in expected.items())
        )
    if isinstance(expected, datetime.timedelta | datetime.datetime):
        return bool(expected == actual)
    return False


# A reason as cel-go words it, and as the sandbox (cel-cpp, kubernetes_cel) words it.
REASONS: Mapping[str, tuple[str, str]] = {
    "division by zero": (r"division by zero", r"divi\w* by zero"),
    "modulus by zero": (r"modulus by zero", r"modulus by zero|divi\w* by zero"),
    "integer overflow": (r"overflow", r"overflow"),
    "no such key": (r"no such key", r"no such key|key not found"),
    "no such field": (r"no such field", r"no such field|not found"),
    "no matching overload": (
        r"no matching overload|no such overload",
        # cel-cpp calls a member function with no overload of that arity undeclared
        r"no matching overload|no such overload|undeclared reference to '\w+'",
    ),
    "undeclared reference": (r"undeclared reference", r"undeclared reference"),
    "undefined field": (r"undefined field", r"undefined field"),
    "syntax error": (r"Syntax error|mismatched input", r"Syntax error"),
    "index out of range": (
        r"index out of (range|bounds)|invalid substring range",
        r"out of (range|bounds)|index error|greater than \S+size|less than (0|<start>)",
    ),
    "invalid regex": (
        r"error parsing regexp|invalid matches argument",
        r"regex|regular expression|error parsing regexp|invalid matches argument",
    ),
    "invalid duration": (r"invalid duration", r"duration"),
    "mixed types in a literal": (r"expected type '\w+' but found", r"expected type|mixed"),
    "quantity syntax": (r"quantit|suffix", r"quantit|suffix"),
    "unrecognized formatting clause": (r"unrecognized formatting clause", r"unrecognized"),
    "format argument of the wrong type": (
        r"can only be used on|can be formatted as",
        r"can only be used on|expected a \w+ but got",
    ),
    "format string syntax": (
        r"unexpected end of string|precision specifier",
        r"end of format string|precision specifier",
    ),
    "integer conversion": (r"cannot convert", r"convert|range"),
}


def reason_of(message: str, column: int) -> str:
    for reason, words in REASONS.items():
        if re.search(words[column], message, re.I):
            return reason
    return ""


def error_matches(expected: str, regex: bool, actual: str) -> bool:
    if not expected:
        return True
    # A CRD rule's error is prefixed where the rule is compiled; the expression's own is not.
    expected = expected.removeprefix("compile error: ").removeprefix("compilation failed: ")
    if regex and re.search(expected, actual):
        return True
    if expected.lower() in actual.lower():
        return True
    reason = reason_of(expected, 0)
    return bool(reason) and re.search(REASONS[reason][1], actual, re.I) is not None


# -- running -------------------------------------------------------------------------------------


def _variables(variables: Mapping[str, Any]) -> dict[str, Any]:
    """Go's values as the sandbox takes them (a uint goes as the int of its value; a timestamp
    keeps its zone, as a CRD's date-time field does in cel-go)."""

    def plain(value: Any) -> Any:
        if isinstance(value, golang.Unsigned):
            return value.value
        if isinstance(value, list):
            return [plain(item) for item in value]
        if isinstance(value, dict):
            return {plain(k): plain(v) for k, v in value.items()}
        return value

    return {name: plain(value) for name, value in variables.items()}


def run_case(case: Case) -> Result:
    reason = not_modelled_reason(case)
    base = {"file": case.file, "id": case.id, "expression": case.expression}
    if reason:
        return Result(**base, verdict="not modelled", got=_refused(case), category=reason)
    expected = case.expected
    outcome = _outcome(case)
    passed = _passes(expected.kind, expected, outcome)
    if not passed and _refused_as_mixed(case, outcome):
        reason = NOT_MODELLED[MIXED_LITERAL]
        return Result(**base, verdict="not modelled", got="refused when written", category=reason)
    return Result(
        **base,
        verdict="passed" if passed else "failed",
        expected=_describe_expected(case),
        got=_describe(outcome),
        category="" if passed else category(case, outcome),
    )


def _refused_as_mixed(case: Case, outcome: sandbox_cel.Outcome) -> bool:
    """A cel-go table's case Kubernetes' homogeneous-literal validator refuses."""
    return case.file.startswith("cel-go/") and "expected type '" in outcome.compile_error


def _outcome(case: Case) -> sandbox_cel.Outcome:
    if case.policy:
        refused = sandbox_cel.policy_compile_error(
            case.expression, case.has_params, "authorizer" in case.needs
        )
        return sandbox_cel.Outcome(compile_error=refused, value=None if refused else COMPILES)
    return sandbox_cel.evaluate(case.expression, _variables(case.variables))


# Needs a 1.30 API server refuses in a new policy expression, as the sandbox must: for the
# others (a CRD's `self`, a locale, a cel-go test option) there is nothing to refuse.
REFUSED_WHEN_WRITTEN = frozenset(
    {"library:ip", "library:cidr", "authorizer", "test-protobuf", "stored-expressions test library"}
)


def _refused(case: Case) -> str:
    """Whether the sandbox refuses a not-modelled case's expression when it is written."""
    if not case.needs & REFUSED_WHEN_WRITTEN:
        return ""
    outcome = _outcome(case)
    return "refused when written" if outcome.compile_error else "compiles in the sandbox"


COMPILES = "compiles"  # a policy case's outcome when it compiles: nothing is evaluated


def _passes(kind: str, expected: Any, outcome: sandbox_cel.Outcome) -> bool:
    message, regex = expected.message, expected.regex
    if kind == "compiles":
        return not outcome.compile_error
    if kind == "compile_error":
        return bool(outcome.compile_error) and error_matches(message, regex, outcome.compile_error)
    if kind == "error":
        return bool(outcome.error) and error_matches(message, regex, outcome.error)
    if kind == "error_any":
        failure = outcome.compile_error or outcome.error
        return bool(failure) and error_matches(message, regex, failure)
    return (
        not outcome.compile_error and not outcome.error and cel_equal(expected.value, outcome.value)
    )


def _describe_expected(case: Case) -> str:
    expected = case.expected
    if expected.kind == "value":
        return f"value {expected.value!r}"
    if expected.kind == "compiles":
        return "compiles"
    return f"{expected.kind.replace('_', ' ')}: {expected.message}"


def _describe(outcome: sandbox_cel.Outcome) -> str:
    if outcome.compile_error:
        return "compile error: " + outcome.compile_error.splitlines()[0]
    if outcome.error:
        return "error: " + outcome.error.splitlines()[0]
    if outcome.value is COMPILES:
        return COMPILES
    return f"value {outcome.value!r}"


def category(case: Case, outcome: sandbox_cel.Outcome) -> str:
    """A failure's likely cause, so the work that fixes it can be found."""
    words = outcome.compile_error or outcome.error
    if "Non-CEL value type for 'Python function" in words:
        return "k8s.lists sum/min/max of durations and timestamps"
    if "unsupported syntax '.?'" in words or "optional" in words:
        return "optionals ('.?', optional.*)"
    if match := re.search(r"undeclared reference to '(\w+)'", words):
        if case.expected.kind == "compile_error":
            return "refused for another reason than upstream's"
        return f"function not offered: {_library_of(match.group(1), case.expression)}"
    if re.search(
        r"(indexOf|lastIndexOf)' applied to '\((list|dyn)|\(list\)\.(indexOf|lastIndexOf)", words
    ):
        return "function not offered: k8s.lists indexOf/lastIndexOf"
    if re.search(
        r"applied to '\((int, double|double, int|int, uint|uint, int|double, uint|uint, double)",
        words,
    ):
        return "cross-type numeric comparison"
    if case.expected.kind == "compile_error" and not outcome.compile_error:
        return f"admitted where 1.30 refuses when compiled: {_check_of(case.expected.message)}"
    if case.expected.kind == "compiles":
        return "refused where 1.30 compiles"
    if ".format(" in case.expression:
        return "string format"
    if outcome.compile_error:
        return "refused where 1.30 evaluates"
    if case.expected.kind in ("error", "error_any") and not outcome.error:
        return "evaluates where 1.30 fails"
    if outcome.error and case.expected.kind == "value":
        return "fails where 1.30 evaluates"
    if case.expected.kind in ("error", "error_any"):
        return "error for another reason than upstream's"
    return "a different value"


# What refuses an expression in 1.30 when it is written, by upstream's words.
_CHECKS = (
    (r"invalid (duration|timestamp)", "literal validators (duration, timestamp)"),
    (r"invalid matches argument|error parsing regexp", "literal validators (regex)"),
    (r"expected type '\w+' but found", "homogeneous aggregate literals"),
    (r"undefined field", "typed request and namespaceObject"),
    (r"no matching overload for '(sum|min|max|isSorted)'", "k8s.lists element types"),
    (r"slice", "ext.Lists absent"),
)


def _check_of(message: str) -> str:
    return next((name for words, name in _CHECKS if re.search(words, message)), "other")


_LIBRARIES = {
    "url": "k8s.url",
    "isURL": "k8s.url",
    "sets": "ext.Sets",
    "contains": "ext.Sets",
    "intersects": "ext.Sets",
    "equivalent": "ext.Sets",
    "indexOf": "k8s.lists indexOf/lastIndexOf",
    "lastIndexOf": "k8s.lists indexOf/lastIndexOf",
}


def _library_of(name: str, expression: str) -> str:
    return _LIBRARIES.get(name, name)


# -- files ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FileReport:
    file: str
    results: tuple[Result, ...]

    def count(self, verdict: Verdict) -> int:
        return sum(1 for r in self.results if r.verdict == verdict)


class Extracted(Protocol):
    """A file's cases and what its reader could not parse (cases.Extraction, or another
    reader's, with the run_case that runs its cases)."""

    @property
    def file(self) -> str: ...

    @property
    def cases(self) -> Sequence[Any]: ...

    @property
    def unparsed(self) -> Sequence[Unparsed]: ...


def run_extraction(extraction: Extracted, run: Callable[[Any], Result] | None = None) -> FileReport:
    results = [(run or run_case)(case) for case in extraction.cases]
    results += [
        Result(extraction.file, f"{u.function}/{u.name}", "unparsed", category=u.why)
        for u in extraction.unparsed
    ]
    return FileReport(extraction.file, tuple(results))


def run_folder(folder: Path, sources: Sequence[Source] = SOURCES) -> list[FileReport]:
    """Every source under folder (`<project>/<revision>/<path>`); a missing file is an
    OSError naming it."""
    reports = []
    for source in sources:
        path = folder / source.file
        text = path.read_text(encoding="utf-8")
        reports.append(run_extraction(extract(source, text)))
    return reports


VERDICTS: tuple[Verdict, ...] = ("passed", "failed", "not modelled", "unparsed")


def summary(reports: Sequence[FileReport]) -> list[str]:
    """Per file, the cases of each verdict; then the not-modelled cases by reason."""
    width = max([len("total"), *(len(r.file) for r in reports)])
    lines = [f"{'file':<{width}}  " + "  ".join(VERDICTS)]
    totals: Counter[str] = Counter()
    for report in reports:
        counts: dict[str, int] = {verdict: report.count(verdict) for verdict in VERDICTS}
        totals.update(counts)
        lines.append(_row(report.file, width, counts))
    lines.append(_row("total", width, totals))
    not_modelled = Counter(
        (r.category, r.got)
        for report in reports
        for r in report.results
        if r.verdict == "not modelled"
    )
    lines.append("not modelled, by reason:")
    for (reason, refused), count in sorted(not_modelled.items(), key=lambda i: -i[1]):
        lines.append(f"  {count:>4}  {reason}" + (f" [{refused}]" if refused else ""))
    return lines


def _row(name: str, width: int, counts: Mapping[str, int]) -> str:
    cells = "  ".join(f"{counts[verdict]:>{len(verdict)}}" for verdict in VERDICTS)
    return f"{name:<{width}}  {cells}"


def failures(reports: Iterable[FileReport]) -> list[str]:
    """The failing cases by category, most frequent first."""
    failed = [r for report in reports for r in report.results if r.verdict == "failed"]
    by_category: dict[str, list[Result]] = {}
    for result in failed:
        by_category.setdefault(result.category, []).append(result)
    lines = []
    for name, results in sorted(by_category.items(), key=lambda item: (-len(item[1]), item[0])):
        lines.append(f"{name}: {len(results)}")
        for result in results:
            lines.append(f"  {result.id}")
            lines.append(f"    expression: {result.expression}")
            lines.append(f"    expected:   {result.expected}")
            lines.append(f"    got:        {result.got}")
    return lines
