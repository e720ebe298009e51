"""The sandbox's Kubernetes CEL libraries, pinned to their source: the k8s.quantity library's
declarations (overload ids, member or global, parameter and result types) and every example its
documentation gives (k8s.io/apiserver pkg/cel/library/quantity.go at the 1.30 release); the
examples of the lists and regex libraries, as Go evaluates them; and the strings extension."""

from __future__ import annotations

import re

import pytest
from cel_expr_python import cel

from tests.upstream import upstream_file
from volcano_guard_sandbox.apiserver.kubernetes_cel import (
    QUANTITY_OVERLOADS,
    QUANTITY_TYPE,
    environment,
)

APISERVER_1_30 = "v0.30.14"
QUANTITY_GO = "pkg/cel/library/quantity.go"
GO_TYPES = {
    "apiservercel.QuantityType": QUANTITY_TYPE,
    "cel.StringType": "string",
    "cel.IntType": "int",
    "cel.BoolType": "bool",
    "cel.DoubleType": "double",
}
# The documentation's examples that do not type-check, and why: add and sub are declared for a
# Quantity or an int, never a string; CEL's `_==_` takes two values of one type (cel-go declares
# it `(A, A) -> bool` too), and the example compares a double with an int.
NOT_DECLARED = {
    'quantity("50k").add("20k") == quantity("70k")': "no matching overload for 'add'",
    'quantity("50k").sub("20k") == quantity("30k")': "no matching overload for 'sub'",
    'quantity("50k").sub(20000).asApproximateFloat() == 30000': "no matching overload for '_==_'",
}


def quantity_source() -> str:
    return upstream_file("kubernetes-apiserver", APISERVER_1_30, QUANTITY_GO)


def upstream_declarations() -> set[tuple[str, str, bool, tuple[str, ...], str]]:
    """(name, overload id, member, parameter types, result type) from quantityLibraryDecls."""
    block = re.search(
        r"quantityLibraryDecls = map\[string\]\[\]cel.FunctionOpt\{(.*?)^\}",
        quantity_source(),
        re.S | re.M,
    )
    assert block, "quantityLibraryDecls is not in the source"
    declared = set()
    for name, body in re.findall(r'^\t"(\w+)": \{(.*?)^\t\},', block.group(1), re.S | re.M):
        for kind, overload, parameters, result in re.findall(
            r'cel\.(Member)?Overload\("(\w+)", \[\]\*cel\.Type\{([^}]*)\}, ([\w.]+),', body
        ):
            types = tuple(GO_TYPES[p.strip()] for p in parameters.split(","))
            declared.add((name, overload, kind == "Member", types, GO_TYPES[result]))
    return declared


def test_the_quantity_library_declares_what_the_apiserver_declares():
    ours = {
        (name, overload, member, tuple(t.name() for t in parameters), result.name())
        for name, overload, parameters, result, member, _ in QUANTITY_OVERLOADS
    }
    normalized = {
        (
            n,
            o,
            m,
            tuple(t.lower() if t != QUANTITY_TYPE else t for t in p),
            r.lower() if r != QUANTITY_TYPE else r,
        )
        for n, o, m, p, r in ours
    }
    assert normalized == upstream_declarations()


def documented_examples() -> list[tuple[str, str]]:
    """(expression, what the documentation says it gives) for each example in quantity.go."""
    return re.findall(
        r"^//\s+((?:isQuantity|quantity)\(.*?\)[^/]*?)\s*// (.+)$", quantity_source(), re.M
    )


def evaluate(expression: str) -> cel.Value:
    return environment({}).compile(expression).eval(data={})


def test_every_documented_example_evaluates_as_documented():
    examples = documented_examples()
    assert len(examples) >= 25
    checked = 0
    for expression, says in examples:
        if expression in NOT_DECLARED:
            with pytest.raises(RuntimeError, match=re.escape(NOT_DECLARED[expression])):
                evaluate(expression)
            continue
        value = evaluate(expression)
        if says == "returns a Quantity":
            assert value.type().name() == QUANTITY_TYPE, expression
        elif says.startswith("error"):
            assert value.type() == cel.Type.ERROR, expression
        else:
            expected = {"returns true": True, "returns false": False}.get(says)
            if expected is None:
                expected = int(says.removeprefix("returns "))
            assert value.type() != cel.Type.ERROR, (expression, value.value())
            assert value.value() == expected, (expression, says, value.value())
        checked += 1
    assert checked == len(examples) - len(NOT_DECLARED)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("sign(quantity('-1.5Gi'))", -1),
        ("sign(quantity('0'))", 0),
        ("quantity('1Ki').add(quantity('24')) == quantity('1048')", True),
        ("quantity('1e400').asApproximateFloat() > 1e308", True),
        ("quantity('9223372036854775807').isInteger()", True),
        ("quantity('9223372036854775808').isInteger()", False),
        ("quantity('1.5').isInteger()", False),
        ("quantity('-0.5m').isLessThan(quantity('0'))", True),
    ],
)
def test_quantities_compare_and_convert_exactly(expression, expected):
    assert evaluate(expression).value() == expected


def test_sign_is_a_global_function_in_1_30_not_a_member():
    with pytest.raises(RuntimeError, match="undeclared reference to 'sign'"):
        evaluate("quantity('1').sign()")


def test_a_match_condition_may_use_quantities_as_in_the_apiserver():
    from volcano_guard_sandbox.apiserver.matching import Attributes, User, conditions_match

    condition = (
        "object.spec.containers.all(c, has(c.resources.requests) && "
        "quantity(c.resources.requests.cpu).isGreaterThan(quantity('500m')))"
    )
    webhook = {"matchConditions": [{"name": "big", "expression": condition}]}

    def pod(cpu: str) -> Attributes:
        spec = {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}
        return Attributes(
            "CREATE",
            "",
            "v1",
            "pods",
            ("", "v1", "Pod"),
            "ns",
            "p",
            User("u"),
            object={"spec": spec},
        )

    assert conditions_match(webhook, pod("2"))
    assert not conditions_match(webhook, pod("100m"))


# -- k8s.lists and k8s.regex: the examples of their documentation, as Go evaluates them ----------

LISTS_GO, REGEX_GO = "pkg/cel/library/lists.go", "pkg/cel/library/regex.go"
ERROR = "error"


def library_examples(path: str) -> list[tuple[str, str]]:
    """(expression, what the documentation says) for each `//	expr // says` line. Called by
    tests only, never at collection: without the source it skips, and a clone has none."""
    source = upstream_file("kubernetes-apiserver", APISERVER_1_30, path)
    return re.findall(r"^//\t(\S.*?)\s*// (?:returns? |return )?(.+)$", source, re.M)


# The examples of lists.go and regex.go, as (expression, what the documentation says), in the
# source's order: transcribed, so that the examples run on any clone; a test checks that the
# source still says exactly these.
LISTS_EXAMPLES = (
    ("[1, 2, 3].isSorted()", "true"),
    ("['a', 'b', 'b', 'c'].isSorted()", "true"),
    ("[2.0, 1.0].isSorted()", "false"),
    ("[1].isSorted()", "true"),
    ("[].isSorted()", "true"),
    ("[1, 3].sum()", "4"),
    ("[1.0, 3.0].sum()", "4.0"),
    ("['1m', '1s'].sum()", "'1m1s'"),
    ("emptyIntList.sum()", "0"),
    ("emptyDoubleList.sum()", "0.0"),
    ("[].sum()", "0"),
    ("[1, 3].min()", "1"),
    ("[1, 3].max()", "3"),
    ("[].min()", "error"),
    ("[1].min()", "1"),
    ("([0] + emptyList).min()", "0"),
    ("[1, 2, 2, 3].indexOf(2)", "1"),
    ("['a', 'b', 'b', 'c'].lastIndexOf('b')", "2"),
    ("[1.0].indexOf(1.1)", "-1"),
    ("[].indexOf('string')", "-1"),
)
REGEX_EXAMPLES = (
    ("\"abc 123\".find('[0-9]*')", "'123'"),
    ("\"abc 123\".find('xyz')", "''"),
    ("\"123 abc 456\".findAll('[0-9]*')", "['123', '456']"),
    ("\"123 abc 456\".findAll('[0-9]*', 1)", "['123']"),
    ("\"123 abc 456\".findAll('xyz')", "[]"),
)


def evaluated(expression: str) -> object:
    value = environment({}).compile(expression).eval(data={})
    return ERROR if value.type() == cel.Type.ERROR else value.plain_value()


# What the documentation says, in CEL, where it says it in words or Go; and the examples that
# are not CEL (emptyIntList is a Go variable of the tests; strings are not durations).
LISTS_SAID = {
    "true": True,
    "false": False,
    "4": 4,
    "4.0": 4.0,
    "0": 0,
    "0.0": 0.0,
    "1": 1,
    "3": 3,
    "2": 2,
    "-1": -1,
    "error": ERROR,
}
LISTS_NOT_CEL = {
    "['1m', '1s'].sum()",
    "emptyIntList.sum()",
    "emptyDoubleList.sum()",
    "([0] + emptyList).min()",
}


@pytest.mark.parametrize(
    ("expression", "said"),
    [example for example in LISTS_EXAMPLES if example[0] not in LISTS_NOT_CEL],
)
def test_every_lists_example_gives_what_its_documentation_says(expression, said):
    assert evaluated(expression) == LISTS_SAID[said.strip()]


def test_the_lists_examples_are_those_lists_go_documents():
    assert library_examples(LISTS_GO) == list(LISTS_EXAMPLES)
    assert {expression for expression, _ in LISTS_EXAMPLES} >= LISTS_NOT_CEL


# Go's regexp finds the leftmost match, and an empty one counts: `[0-9]*` matches "" at the start
# of "abc 123" (FindString gives ""), and between the digits of "123 abc 456" findAll returns the
# empty matches that do not abut a match (regexp.go allMatches). The documentation's '123' and
# ['123', '456'] are what `[0-9]+` gives; both are pinned.
REGEX_GO_SEMANTICS = {
    "\"abc 123\".find('[0-9]*')": "",
    "\"123 abc 456\".findAll('[0-9]*')": ["123", "", "", "", "", "456"],
}


@pytest.mark.parametrize(("expression", "said"), REGEX_EXAMPLES)
def test_every_regex_example_gives_what_go_gives(expression, said):
    if expression in REGEX_GO_SEMANTICS:
        assert evaluated(expression) == REGEX_GO_SEMANTICS[expression]
        assert evaluated(expression.replace("[0-9]*", "[0-9]+")) == eval(said)
    else:
        assert evaluated(expression) == eval(said)  # a Python literal: '' or [...]


def test_the_regex_examples_are_those_regex_go_documents():
    assert library_examples(REGEX_GO) == list(REGEX_EXAMPLES)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("'a1b22c333'.findAll('[0-9]+', 2)", ["1", "22"]),
        ("'aaa'.findAll('a*?')", ["", "", "", ""]),  # empty matches, none abutting a match
        ("'x'.find(dyn('(?=x)'))", ERROR),  # RE2 has no look-around
        ("'x'.find(dyn('('))", ERROR),  # a pattern known only when evaluated
        ("'hello'.charAt(4)", "o"),  # the strings extension, version 2
        ("'hello hello hello'.split(' ', 2)", ["hello", "hello hello"]),
        ("['a', 'b'].join('-')", "a-b"),
        ("'%d pods on %s'.format([3, 'gpu-1'])", "3 pods on gpu-1"),
        ("[3, 1, 2].max()", 3),
    ],
)
def test_regex_strings_and_lists_beyond_the_examples(expression, expected):
    assert evaluated(expression) == expected


def test_a_list_of_two_element_types_is_refused_when_written():
    """base.go's cel.ValidateHomogeneousAggregateLiterals (1.29): not even isSorted runs."""
    with pytest.raises(RuntimeError, match="expected type 'int' but found 'string'"):
        environment({}).compile("[1, 'a'].isSorted()")


@pytest.mark.parametrize(
    "expression", ["'x'.find('(?=x)')", "'x'.findAll('(', 1)", "'x'.find(r'a++')"]
)
def test_a_constant_pattern_go_refuses_is_refused_when_written(expression):
    with pytest.raises(RuntimeError, match="program instantiation failed: error parsing regexp"):
        environment({}).compile(expression)


def test_a_strings_function_newer_than_1_30_does_not_compile():
    with pytest.raises(RuntimeError, match="undeclared reference to 'reverse'"):
        environment({}).compile("'abc'.reverse()")  # strings version 3 (1.32)


def test_an_extension_passed_to_the_environment_reaches_checker_and_runtime():
    """environment(..., extensions=[...]) is how another library joins both of its CEL
    environments: cel-go's optionals (base.go 1.28, cel.OptionalTypes) check and run."""
    from cel_expr_python.ext.ext_optional import ExtOptional

    env = environment({"object": cel.Type.DYN}, extensions=[ExtOptional()])
    program = env.compile("object.?spec.?replicas.orValue(1) == 1 && [1u].sum() == 1u")
    assert program.eval(data={"object": {"spec": {}}}).value() is True
