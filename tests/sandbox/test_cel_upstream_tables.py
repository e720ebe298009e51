"""The sandbox's CEL libraries held to upstream's own test tables, read from the source inside each
test: cel-go v0.17.8's ext/strings_test.go (TestStrings, TestStringFormat, TestLiteralOutput) and
ext/sets_test.go (TestSets), the cel-go of Kubernetes 1.30; apiextensions-apiserver v0.30.14's
schema/cel/validation_test.go (the blocks for numeric comparisons, lists, regexes, URLs and
quantities); and the environment's version table (pkg/cel/environment/base.go).

Each test runs every case of its table and fails listing the cases that differ; a case left out
is left out by a rule named beside it (a locale the API server does not use, cel-go's test
protobuf types) and counted, so a table that grows is noticed."""

from __future__ import annotations

import datetime
import functools
import json
import math
import re
from typing import Any

import pytest
from cel_expr_python import cel
from google.protobuf import duration_pb2, timestamp_pb2

from tests.upstream import upstream_file
from volcano_guard_sandbox.apiserver.cel_environment import (
    LIBRARIES,
    offered,
    written_at,
)
from volcano_guard_sandbox.apiserver.kubernetes_cel import environment
from volcano_guard_sandbox.conformance import golang

CEL_GO, APISERVER, APIEXTENSIONS = "v0.17.8", "v0.30.14", "v0.30.14"
ERROR = object()


def duration(value: datetime.timedelta) -> duration_pb2.Duration:
    """A duration as the sandbox's CEL takes one in its data: google.protobuf.Duration."""
    message = duration_pb2.Duration()
    message.FromTimedelta(value)
    return message


def timestamp(value: datetime.datetime) -> timestamp_pb2.Timestamp:
    message = timestamp_pb2.Timestamp()
    message.FromDatetime(value)
    return message


def strings_test() -> str:
    return upstream_file("cel-go", CEL_GO, "ext/strings_test.go")


go_string = golang.unquote  # one Go string literal's value


GO_LITERAL = r'`[^`]*`|"(?:[^"\\\n]|\\.)*"'


@functools.cache
def dynamic_environment(names: frozenset[str]) -> Any:
    return environment({name: cel.Type.DYN for name in names})


def evaluate(expression: str, data: dict[str, Any] | None = None) -> Any:
    # One environment for every table (each takes a tenth of a second to build).
    names = {"self", "x"} | {name for case in DYNAMIC_ARGUMENTS.values() for name in case}
    assert set(data or {}) <= names
    env = dynamic_environment(frozenset(names))
    value = env.compile(expression).eval(data=data or {})
    if value.type() == cel.Type.ERROR:
        return ERROR, str(value.value())
    return value.plain_value()


def outcome(expression: str, data: dict[str, Any] | None = None) -> tuple[str, Any]:
    """("value", v), ("error", text) at evaluation, or ("refused", text) when written."""
    try:
        result = evaluate(expression, data)
    except RuntimeError as exc:
        return "refused", str(exc)
    if isinstance(result, tuple) and result and result[0] is ERROR:
        return "error", result[1]
    return "value", result


# -- cel-go ext/strings_test.go ------------------------------------------------------------------


def test_every_strings_case_of_cel_go_evaluates_as_cel_go():
    """stringTests: each expression is true, or fails with the error named. A parse-only case
    (a receiver or argument of the wrong type) is a type error: kube-apiserver type-checks
    every expression, so it is refused when written."""
    block = strings_test().split("var stringTests = []struct {", 1)[1].split("\n}\n", 1)[0]
    cases = re.findall(
        r"\{\s*expr:\s*(" + GO_LITERAL + r"),?\s*(?:err:\s*(" + GO_LITERAL + r"),?\s*)?"
        r"(?:parseOnly:\s*(true),?\s*)?\}",
        block,
    )
    assert len(cases) == block.count("expr:") >= 110, len(cases)
    wrong = []
    for expression_literal, error_literal, parse_only in cases:
        expression = go_string(expression_literal)
        kind, result = outcome(expression)
        if parse_only:  # cel-cpp words a call with one argument too many as undeclared
            ok = kind == "refused" and re.search(
                "no matching overload|undeclared reference", result
            )
        elif error_literal:
            ok = kind == "error" and go_string(error_literal) in result
        else:
            ok = (kind, result) == ("value", True)
        if not ok:
            wrong.append((expression, kind, result))
    assert not wrong, f"{len(wrong)} of {len(cases)} differ: {wrong}"


# TestStringFormat's dynArgs, as the sandbox's values (the Go literals, transcribed; the names
# are checked against the table). A uint reaches the sandbox as an int: it prints the same.
DYNAMIC_ARGUMENTS: dict[str, dict[str, Any]] = {
    "dyntype support for string formatting clause": {"dynStr": "a string"},
    "dyntype support for numbers with string formatting clause": {
        "dynIntStr": 32,
        "dynDoubleStr": 56.8,
    },
    "dyntype support for integer formatting clause": {"dynInt": 128},
    "dyntype support for integer formatting clause (unsigned)": {"dynUnsignedInt": 256},
    "dyntype support for hex formatting clause": {"dynHexInt": 22},
    "dyntype support for hex formatting clause (uppercase)": {"dynHexInt": 26},
    "dyntype support for unsigned hex formatting clause": {"dynUnsignedHexInt": 500},
    "dyntype support for fixed-point formatting clause": {"dynDouble": 4.5},
    "dyntype support for fixed-point formatting clause (comma separator locale)": {
        "dynDouble": 4.5
    },
    "dyntype support for scientific notation": {"dynE": 2.71828},
    "dyntype NaN/infinity support for fixed-point": {"dynNaN": math.nan, "dynInf": math.inf},
    "dyntype support for timestamp": {"dynTime": timestamp(datetime.datetime(2009, 11, 10, 23, 0))},
    "dyntype support for duration": {
        "dynDuration": duration(datetime.timedelta(hours=2, seconds=1547))
    },
    "dyntype support for lists": {"dynList": [6, 4.2, "a string"]},
    "dyntype support for maps": {
        "dynMap": {"strKey": "x", True: 42, 6: duration(datetime.timedelta(seconds=422))}
    },
}
# The compile-time checks (cel.OptCheckStringFormat) are cel-go's option, not the API server's:
# there the same format strings fail when evaluated, with the runtime's words, or (too many
# arguments) format what they can.
AT_RUNTIME = {
    "compile-time cardinality check (too many for string)": ("value", "abc def"),
    "compile-time %d check": ("error", "decimal clause can only be used on integers"),
    # ParseFormatString asks for the argument before it looks past the %.
    "compile-time syntax check (unexpected end of string)": ("error", "index 0 out of range"),
}
# cel-expr-python hands a map to Python as a dict, where the keys 1 and true are one key: this
# table holds cel-cpp's runtime; the evaluator a policy runs on keeps them (test_cel_go_values).
NOT_MODELLED_FORMAT = {"map support (all key types)": "a map keyed by both 1 and true"}


def format_cases() -> list[dict[str, Any]]:
    block = strings_test().split("func TestStringFormat(", 1)[1].split("\n\tfor _, tt := range", 1)
    assert block[0].count("\t\t\tname:") == block[0].count("\n\t\t{\n")
    cases = []
    for body in re.split(r"\n\t\t\{\n", block[0])[1:]:
        case: dict[str, Any] = {
            key: go_string(value)
            for key, value in re.findall(r"\n\t\t\t(\w+):\s+(" + GO_LITERAL + ")", "\n" + body)
        }
        case["skipCompileCheck"] = "skipCompileCheck: true" in body
        case["dyn"] = "dynArgs:" in body
        cases.append(case)
    return cases


def test_every_format_case_of_cel_go_formats_as_cel_go():
    """TestStringFormat in the API server's locale (en_US, as none is set): the same output, or
    the same error text, for every case but those in another locale or on cel-go's test
    protobuf messages."""
    cases = format_cases()
    assert len(cases) >= 80, len(cases)
    names = {c["name"] for c in cases}
    assert set(DYNAMIC_ARGUMENTS) <= names
    skipped, wrong, checked = [], [], 0
    for case in cases:
        if case.get("locale", "en_US") != "en_US":
            skipped.append((case["name"], "locale " + case["locale"]))
            continue
        if "TestAllTypes" in case.get("formatArgs", "") or "msg." in case.get("formatArgs", ""):
            skipped.append((case["name"], "cel-go's test protobuf messages"))
            continue
        if case["name"] in NOT_MODELLED_FORMAT:
            skipped.append((case["name"], NOT_MODELLED_FORMAT[case["name"]]))
            continue
        data = DYNAMIC_ARGUMENTS.get(case["name"], {}) if case["dyn"] else {}
        assert bool(data) == case["dyn"], case["name"]
        literal = '"' + case["format"].replace("\\", "\\\\").replace('"', '\\"') + '"'
        expression = f"{literal}.format([{case.get('formatArgs', '')}])"
        got = outcome(expression, data)
        if case["name"] in AT_RUNTIME:
            kind, expected = AT_RUNTIME[case["name"]]
            ok = got[0] == kind and (expected == got[1] if kind == "value" else expected in got[1])
        elif case.get("err"):
            expected_error = case["err"]
            ok = got[0] == "error" and expected_error in got[1]
        else:
            ok = got == ("value", case["expectedOutput"])
        checked += 1
        if not ok:
            wrong.append((case["name"], expression, got))
    assert not wrong, f"{len(wrong)} of {checked} differ: {wrong}"
    assert len(skipped) == 10, skipped  # 3 locales, 6 on test protobuf messages, 1 map


def test_a_formatted_literal_reads_back_as_the_same_value():
    """TestLiteralOutput: `%s` of a map and of a list is a CEL literal equal to the value. The
    literals mix types, which Kubernetes' validators allow only as `format`'s arguments: the
    read-back comparison is evaluated unchecked."""
    source = strings_test().split("func TestLiteralOutput(", 1)[1]
    literals = [go_string(v) for v in re.findall(r"formatLiteral:\s+(" + GO_LITERAL + ")", source)]
    assert len(literals) == 2
    for literal in literals:
        kind, text = outcome(f'"%s".format([{literal}])')
        assert kind == "value", (literal, text)
        unchecked = dynamic_environment(frozenset()).compile(
            f"{text} == {literal}", disable_check=True
        )
        assert unchecked.eval(data={}).plain_value() is True, (literal, text)


# -- cel-go ext/sets_test.go ---------------------------------------------------------------------


def test_every_sets_case_of_cel_go_is_true():
    source = upstream_file("cel-go", CEL_GO, "ext/sets_test.go")
    expressions = [go_string(e) for e in re.findall(r"expr:\s+(" + GO_LITERAL + ")", source)]
    assert len(expressions) >= 40, len(expressions)
    data = {"x": [5, 4, 3, 2, 1]}  # the `in` of the two cases that read x: []int64{5, 4, 3, 2, 1}
    assert source.count("[]int64{5, 4, 3, 2, 1}") == 2
    outcomes = {e: outcome(e, data) for e in expressions}
    # cel-go's test environment admits list literals of mixed numeric types; Kubernetes' base
    # environment (base.go 1.29, cel.ValidateHomogeneousAggregateLiterals) refuses them.
    mixed = [
        e for e, (kind, text) in outcomes.items() if kind == "refused" and "expected type '" in text
    ]
    wrong = [(e, got) for e, got in outcomes.items() if got != ("value", True) and e not in mixed]
    assert not wrong, f"{len(wrong)} of {len(expressions)} differ: {wrong}"
    assert len(mixed) == 18, mixed


def test_sets_of_two_element_types_do_not_compile():
    kind, text = outcome("sets.contains([1], ['a'])")
    assert kind == "refused" and "no matching overload for 'sets.contains'" in text


# -- apiextensions-apiserver schema/cel/validation_test.go --------------------------------------


def validation_block(name: str) -> str:
    source = upstream_file(
        "kubernetes-apiextensions-apiserver",
        APIEXTENSIONS,
        "pkg/apiserver/schema/cel/validation_test.go",
    )
    start = source.index(f'{{name: "{name}",')
    end = source.index("\n\t\t{name:", start + 1)
    return source[start:end]


def valid_and_errors(block: str) -> tuple[list[str], dict[str, str]]:
    valid_block = block.split("valid: []string{", 1)[1].split("\n\t\t\t},", 1)[0]
    uncommented = re.sub(r"(?m)^\s*//.*$|(?<=,)[ \t]*//.*$", "", valid_block)
    valid = [go_string(v) for v in re.findall(GO_LITERAL, uncommented)]
    errors: dict[str, str] = {}
    if "errors: map[string]string{" in block:
        error_block = block.split("errors: map[string]string{", 1)[1].split("\n\t\t\t},", 1)[0]
        for key, value in re.findall(
            r"(" + GO_LITERAL + r"):\s*(" + GO_LITERAL + ")",
            re.sub(r"(?m)^\s*//.*$|(?<=,)[ \t]*//.*$", "", error_block),
        ):
            errors[go_string(key)] = go_string(value)
    return valid, errors


# `self` is dynamic here, where the CRD's schema types it: an empty list of dyn sums to the int 0
# in both (`dyn([]).sum() == 0`); typed `list(duration)`, it is duration('0') in both (pinned by
# test_an_empty_typed_list_sums_to_its_types_zero).
KNOWN_DIFFERENCES = {"self.emptyDurations.sum() == duration('0')": ("value", False)}
# The block's error rules that fail when evaluated (the others are refused when written).
EVALUATION_ERRORS = {
    ("stdlib list functions", rule)
    for rule in (
        "self.emptyInts.min() == 1",
        "self.emptyInts.max() == 3",
        "self.emptyDoubles.min() == 1.0",
        "self.emptyDoubles.max() == 3.0",
        "self.emptyStrings.min() == 'a'",
        "self.emptyStrings.max() == 'c'",
    )
}


def run_block(name: str, self_value: Any, error_words: dict[str, str] | None = None) -> int:
    """Every valid rule of the block is true of self; every error rule fails (refused or at
    evaluation) with the words upstream names (or, where the sandbox's checker words them
    otherwise, the words given)."""
    valid, errors = valid_and_errors(validation_block(name))
    wrong: list[tuple[Any, ...]] = []
    for rule in valid:
        got = outcome(rule, {"self": self_value})
        if got != KNOWN_DIFFERENCES.get(rule, ("value", True)):
            wrong.append((rule, got))
    for rule, words in errors.items():
        words = (error_words or {}).get(rule, words)
        kind, text = outcome(rule, {"self": self_value})
        expected = "error" if (name, rule) in EVALUATION_ERRORS else "refused"
        if kind != expected or words not in str(text):
            wrong.append((rule, kind, text, words))
    assert not wrong, f"{len(wrong)} of {len(valid) + len(errors)} differ: {wrong}"
    return len(valid) + len(errors)


def test_the_numeric_comparisons_of_the_crd_tables_hold():
    """`5 < 10.0`, `self.val1 < self.val4`: cross-type numeric comparisons (1.28 on)."""
    block = validation_block("numeric comparisons")
    assert "integerType, integerType, integerType, numberType" in block
    self_value = {f"val{i}": v for i, v in enumerate([5, 10, 15, 10.0, 10.0, 10.0] + [10.0] * 3, 1)}
    assert run_block("numeric comparisons", self_value) >= 60


def go_duration(text: str) -> duration_pb2.Duration:
    units = {"h": 3600, "m": 60, "s": 1}
    seconds = sum(int(n) * units[u] for n, u in re.findall(r"(\d+)([hms])", text))
    return duration(datetime.timedelta(seconds=seconds))


LIST_ELEMENTS: dict[str, Any] = {
    "integerType": int,
    "doubleType": float,
    "stringType": str,
    "durationFormat": go_duration,
    "dateFormat": lambda d: timestamp(datetime.datetime.fromisoformat(d)),
}


def list_functions_object() -> dict[str, Any]:
    """The block's obj, each list converted by its schema as a CRD's values are."""
    block = validation_block("stdlib list functions")
    obj_block, schema_block = block.split("schema:", 1)
    element_types = dict(re.findall(r'"(\w+)":\s+listType\(&(\w+)\)', schema_block))
    self_value: dict[str, Any] = {}
    for field, items in re.findall(r'"(\w+)":\s+\[\]interface\{\}\{([^\n]*)\},', obj_block):
        raw = re.findall(r'int64\((\d+)\)|float64\((\d+)\)|"([^"]*)"', items)
        values = [next(v for v in value if v) for value in raw]
        self_value[field] = [LIST_ELEMENTS[element_types[field]](v) for v in values]
    self_value["objs"] = [{"f1": "a", "f2": f2} for f2 in "abbc"]
    assert '"f2": "c"' in obj_block
    return self_value


# The sandbox's type checker (cel-cpp's) words a call with no overload as
# "found no matching overload for 'sum' applied to '(list(string))'": cel-go's `list(string).()`.
CHECKER_WORDS = {
    "['a', 'b'].sum() == 'c'": "found no matching overload for 'sum' applied to '(list(string))'",
    "[[1], [2]].min() == [1]": (
        "found no matching overload for 'min' applied to '(list(list(int)))'"
    ),
    "[{'a': 1}, {'b': 2}].max() == {'b': 2}": (
        "found no matching overload for 'max' applied to '(list(map(string, int)))'"
    ),
}


def test_the_list_functions_of_the_crd_tables_hold():
    assert run_block("stdlib list functions", list_functions_object(), CHECKER_WORDS) >= 80


# An invalid constant pattern is refused when written, as the API server refuses it: "compile
# error: program instantiation failed: error parsing regexp: ...", its reason in Python's words.
REGEX_WORDS = {
    "self.str.find(')') == ''": "program instantiation failed: error parsing regexp",
    "self.str.findAll(')') == []": "program instantiation failed: error parsing regexp",
    "self.str.findAll(')', 1) == []": "program instantiation failed: error parsing regexp",
}


def test_the_regex_functions_of_the_crd_tables_hold():
    assert (
        run_block("stdlib regex functions", {"str": "this is a 123 string 456"}, REGEX_WORDS) >= 15
    )


def test_the_url_functions_of_the_crd_tables_hold():
    url = "https://user:pass@kubernetes.io:80/docs/home?k1=a&k2=b&k2=c#anchor"
    assert url in validation_block("URL parsing")
    assert run_block("URL parsing", {"url": url}) >= 30


def test_the_quantity_functions_of_the_crd_tables_hold():
    assert 'objs("20", "200M")' in validation_block("quantity")
    assert run_block("quantity", {"val1": "20", "val2": "200M"}) >= 11


def url_examples() -> list[tuple[str, str]]:
    source = upstream_file("kubernetes-apiserver", APISERVER, "pkg/cel/library/urls.go")
    return re.findall(r"^//\t((?:url|isURL)\(.*?\)[^/]*?)\s*// (.+)$", source, re.M)


def test_every_url_example_of_urls_go_gives_what_it_documents():
    examples = url_examples()
    assert len(examples) >= 25
    for expression, says in examples:
        kind, value = outcome(expression)
        if says == "error":
            assert kind == "error" and "URL parse error" in value, (expression, value)
        elif says == "returns a URL":
            assert kind == "value", (expression, value)
        else:
            expected = says.removeprefix("returns ")
            assert outcome(f"{expression} == {expected}") == ("value", True), (expression, value)


# -- pkg/cel/environment/base.go: what each version offers a new expression ---------------------


def base_go(revision: str) -> list[tuple[tuple[int, int], str]]:
    """(introduced version, the options' text) for each entry of baseOpts."""
    source = upstream_file("kubernetes-apiserver", revision, "pkg/cel/environment/base.go")
    entries = re.findall(
        r"IntroducedVersion: version\.MajorMinor\((\d+), (\d+)\),(.*?)\n\t\},", source, re.S
    )
    return [((int(major), int(minor)), body) for major, minor, body in entries]


# base.go's option, as it names it, and the sandbox's library of it.
BASE_GO_NAMES = {
    "library.URLs": "library.URLs",
    "library.Regex": "library.Regex",
    "library.Lists": "library.Lists",
    "library.Authz": "library.Authz)",
    "library.Quantity": "library.Quantity",
    "ext.Strings(ext.StringsVersion(2))": "ext.Strings",
    "ext.Sets": "ext.Sets",
    "library.IP": "library.IP",
    "library.CIDR": "library.CIDR",
    "library.Format": "library.Format",
    "library.AuthzSelectors": "library.AuthzSelectors",
    "ext.TwoVarComprehensions": "ext.TwoVarComprehensions",
    "library.SemverLib": "library.SemverLib",
    "ext.Lists(ext.ListsVersion(3))": "ext.Lists",
}


@pytest.mark.parametrize("revision", ["v0.30.14", "v0.32.9", "v0.36.3"])
def test_each_library_is_introduced_at_the_version_base_go_says(revision):
    entries = base_go(revision)
    found = 0
    for introduced, body in entries:
        for option, ours in BASE_GO_NAMES.items():
            if re.search(rf"{re.escape(option)}(?!\w)", body) and "RemovedVersion" not in body:
                (library,) = [lib for lib in LIBRARIES if ours in lib.name]
                assert library.introduced == introduced, (option, introduced)
                found += 1
    assert found >= {"v0.30.14": 9, "v0.32.9": 12, "v0.36.3": 14}[revision]


def test_a_1_30_server_offers_new_expressions_what_1_29_introduced():
    assert written_at((1, 30)) == (1, 29)
    names = {library.name for library in offered(written_at((1, 30)))}
    assert any("ext.Sets" in n for n in names)
    assert not any("library.IP" in n for n in names)
    assert any("library.IP" in n for n in {lib.name for lib in offered(written_at((1, 31)))})


@pytest.mark.parametrize(
    ("version", "expression", "words"),
    [
        ((1, 30), "isIP('1.2.3.4')", "keeps it for stored expressions only"),
        ((1, 31), "isIP('1.2.3.4')", "the sandbox does not model k8s.ip"),
        ((1, 30), "authorizer.group('').check('get').allowed()", "needs the API server's"),
        ((1, 36), "[1, 2].reverse() == [2, 1]", "the lists extension, version 3"),
        ((1, 34), "isSemver('1.0.0')", "the sandbox does not model k8s.semver"),
    ],
)
def test_what_the_sandbox_does_not_model_is_refused_saying_so(version, expression, words):
    with pytest.raises(RuntimeError, match=re.escape(words)):
        environment({}, version=written_at(version)).compile(expression)


def test_a_library_newer_than_the_version_is_refused_as_the_api_server_refuses_it():
    with pytest.raises(RuntimeError) as refused:
        environment({}, version=written_at((1, 33))).compile("isSemver('1.0.0')")  # new in 1.33
    assert "undeclared reference to 'isSemver'" in str(refused.value)
    assert "keeps it for stored expressions only" in str(refused.value)
    with pytest.raises(RuntimeError) as refused:
        environment({}, version=written_at((1, 32))).compile("isSemver('1.0.0')")
    assert "does not model" not in str(refused.value)


def test_an_environment_outside_1_29_to_1_36_is_refused():
    with pytest.raises(ValueError, match=r"1\.28 is not a CEL environment version"):
        environment({}, version=(1, 28))


# -- cross-type numeric comparisons and the lists library's declarations -------------------------

NUMBERS = {"int": ("1", "2"), "uint": ("1u", "2u"), "double": ("1.0", "2.0")}
ORDERINGS = {"<": True, "<=": True, ">": False, ">=": False}


@pytest.mark.parametrize("left", sorted(NUMBERS))
@pytest.mark.parametrize("right", sorted(NUMBERS))
def test_every_ordering_compares_ints_uints_and_doubles(left, right):
    """cel.CrossTypeNumericComparisons (base.go, 1.28): every ordering operator takes any two
    numeric types, with cel-go's overload ids (less_int64_double, ...)."""
    for operator, smaller_first in ORDERINGS.items():
        one, two = NUMBERS[left][0], NUMBERS[right][1]
        assert outcome(f"{one} {operator} {two}") == ("value", smaller_first), (operator, one, two)


def test_equality_of_two_numeric_types_is_checked_as_cel_go_checks_it():
    """`_==_` stays (A, A): `1 == 1.0` is refused when written, as cel-go refuses it; a dynamic
    value compares by numeric value (heterogeneous equality, cel-go's runtime too)."""
    kind, text = outcome("1 == 1.0")
    assert kind == "refused" and "no matching overload for '_==_'" in text
    assert outcome("dyn(1) == 1.0") == ("value", True)
    assert outcome("dyn(1u) != 1") == ("value", False)
    assert outcome("size('abc') < 63.0") == ("value", True)


def test_the_lists_library_declares_lists_go_overloads():
    from volcano_guard_sandbox.apiserver.kubernetes_cel import LISTS_OVERLOADS

    source = upstream_file("kubernetes-apiserver", APISERVER, "pkg/cel/library/lists.go")

    def type_names(table: str) -> list[str]:
        block = source.split(f"var {table} = []namedCELType{{", 1)[1].split("\n}", 1)[0]
        return re.findall(r'typeName: "(\w+)"', block)

    comparable, summable = type_names("comparableTypes"), type_names("summableTypes")
    expected = {f"list_{t}_is_sorted_bool" for t in comparable}
    expected |= {f"list_{t}_sum_{t}" for t in summable}
    expected |= {f"list_{t}_{f}_{t}" for t in comparable for f in ("min", "max")}
    expected |= set(re.findall(r'MemberOverload\("(list_a_\w+)"', source))
    assert {overload[1] for overload in LISTS_OVERLOADS} == expected


@pytest.mark.parametrize(
    ("element", "zero"),
    [("DURATION", "duration('0')"), ("DOUBLE", "0.0"), ("INT", "0"), ("UINT", "0u")],
)
def test_an_empty_typed_list_sums_to_its_types_zero(element, zero):
    """lists.go zeroValuesOfSummableTypes: the checker's overload picks the zero, of its type."""
    env = environment({"items": cel.Type.List(getattr(cel.Type, element))})
    expression = f"items.sum() == {zero} && type(items.sum()) == type({zero})"
    assert env.compile(expression).eval(data={"items": []}).value() is True


def test_a_list_of_uints_sums_and_compares_to_a_uint():
    """A uint reaches the sandbox's Python as an int; the typed overloads give a uint back."""
    expression = "type([1u, 2u].sum()) == uint && type([1u, 5u].max()) == uint"
    assert outcome(expression) == ("value", True)
    assert outcome("[1u, 5u].min() == 1u") == ("value", True)


@pytest.mark.parametrize(
    ("expression", "words"),
    [
        ("duration('1x') > duration('1s')", "invalid duration argument"),
        (
            "timestamp('yesterday') < timestamp('2000-01-01T00:00:00Z')",
            "invalid timestamp argument",
        ),
        ("'a'.matches('x++')", "invalid matches argument"),
        ("matches('a', '(')", "program instantiation failed: error parsing regexp"),
    ],
)
def test_a_literal_base_go_validates_is_refused_when_written(expression, words):
    """base.go 1.29: cel.ValidateDurationLiterals, ValidateTimestampLiterals and
    ValidateRegexLiterals (a member `matches`); a global `matches` is refused when the
    program is built, as compile.go builds it on write."""
    kind, text = outcome(expression)
    assert kind == "refused" and words in text, text
    assert outcome("duration('1h') > duration('1s')") == ("value", True)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        # x/text's printer: a negative exponent with a superscript minus, two digits at least
        ("'%e'.format([-0.00012])", "-1.200000\u202f\u00d7\u202f10\u207b\u2070\u2074"),
        # cel-go's "%<precision>e" is a width: padded to 20 runes, six digits still
        ("'%.20e'.format([1052.03])", "     1.052030\u202f\u00d7\u202f10\u2070\u00b3"),
        ("'%.2f'.format([-1234567.891])", "-1,234,567.89"),  # en_US groups thousands
        ("'%s'.format([1234567.0])", "1.234567e+06"),  # Go's %g
        ("'%s'.format([[double('inf'), b'\\xff']])", '["+Inf", b"\\xff"]'),
    ],
)
def test_format_prints_numbers_as_cel_go_and_x_text_print_them(expression, expected):
    assert outcome(expression) == ("value", expected)


def test_every_quote_case_of_cel_go_reads_back_as_its_string():
    """TestQuoteUnquote: strings.quote of the string, read back as a CEL string literal, is the
    string (the cases that skip CEL, or quoting, test cel-go's Go helpers, not CEL)."""
    source = strings_test().split("func TestQuoteUnquote(", 1)[1].split("\n\tfor _, tt := range", 1)
    cases = re.split(r"\n\t\t\{\n", source[0])[1:]
    checked = 0
    for body in cases:
        if "disableQuote: true" in body or "disableCELEval: true" in body:
            continue
        (literal,) = re.findall(r"testStr:\s+(" + GO_LITERAL + ")", body)
        text = go_string(literal)
        kind, quoted = outcome(f"strings.quote({json.dumps(text, ensure_ascii=False)})")
        assert kind == "value", (text, quoted)
        assert outcome(quoted) == ("value", text), (text, quoted)
        checked += 1
    assert checked == len(cases) - 3 >= 15  # 2 without quoting, 1 without CEL
