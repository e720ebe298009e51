"""The sandbox's Kubernetes CEL libraries, pinned to their source: the k8s.quantity library's
declarations (overload ids, member or global, parameter and result types) and every example its
documentation gives (k8s.io/apiserver pkg/cel/library/quantity.go at the 1.30 release)."""

from __future__ import annotations

import re

import pytest
from cel_expr_python import cel

from tests.upstream import upstream_file
from volcano_guard.sandbox.kubernetes_cel import QUANTITY_OVERLOADS, QUANTITY_TYPE, environment

APISERVER_1_30 = "v0.30.14"
QUANTITY_GO = "pkg/cel/library/quantity.go"
GO_TYPES = {"apiservercel.QuantityType": QUANTITY_TYPE, "cel.StringType": "string",
            "cel.IntType": "int", "cel.BoolType": "bool", "cel.DoubleType": "double"}
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
    block = re.search(r"quantityLibraryDecls = map\[string\]\[\]cel.FunctionOpt\{(.*?)^\}",
                      quantity_source(), re.S | re.M)
    assert block, "quantityLibraryDecls is not in the source"
    declared = set()
    for name, body in re.findall(r'^\t"(\w+)": \{(.*?)^\t\},', block.group(1), re.S | re.M):
        for kind, overload, parameters, result in re.findall(
                r'cel\.(Member)?Overload\("(\w+)", \[\]\*cel\.Type\{([^}]*)\}, ([\w.]+),', body):
            types = tuple(GO_TYPES[p.strip()] for p in parameters.split(","))
            declared.add((name, overload, kind == "Member", types, GO_TYPES[result]))
    return declared


def test_the_quantity_library_declares_what_the_apiserver_declares():
    ours = {(name, overload, member, tuple(t.name() for t in parameters), result.name())
            for name, overload, parameters, result, member, _ in QUANTITY_OVERLOADS}
    normalized = {(n, o, m, tuple(t.lower() if t != QUANTITY_TYPE else t for t in p),
                   r.lower() if r != QUANTITY_TYPE else r) for n, o, m, p, r in ours}
    assert normalized == upstream_declarations()


def documented_examples() -> list[tuple[str, str]]:
    """(expression, what the documentation says it gives) for each example in quantity.go."""
    return re.findall(r"^//\s+((?:isQuantity|quantity)\(.*?\)[^/]*?)\s*// (.+)$",
                      quantity_source(), re.M)


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


@pytest.mark.parametrize(("expression", "expected"), [
    ("sign(quantity('-1.5Gi'))", -1),
    ("sign(quantity('0'))", 0),
    ("quantity('1Ki').add(quantity('24')) == quantity('1048')", True),
    ("quantity('1e400').asApproximateFloat() > 1e308", True),
    ("quantity('9223372036854775807').isInteger()", True),
    ("quantity('9223372036854775808').isInteger()", False),
    ("quantity('1.5').isInteger()", False),
    ("quantity('-0.5m').isLessThan(quantity('0'))", True),
])
def test_quantities_compare_and_convert_exactly(expression, expected):
    assert evaluate(expression).value() == expected


def test_sign_is_a_global_function_in_1_30_not_a_member():
    with pytest.raises(RuntimeError, match="undeclared reference to 'sign'"):
        evaluate("quantity('1').sign()")


def test_a_match_condition_may_use_quantities_as_in_the_apiserver():
    from volcano_guard.sandbox.matching import Attributes, User, conditions_match

    condition = ("object.spec.containers.all(c, has(c.resources.requests) && "
                 "quantity(c.resources.requests.cpu).isGreaterThan(quantity('500m')))")
    webhook = {"matchConditions": [{"name": "big", "expression": condition}]}

    def pod(cpu: str) -> Attributes:
        spec = {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}
        return Attributes("CREATE", "", "v1", "pods", ("", "v1", "Pod"), "ns", "p", User("u"),
                          object={"spec": spec})

    assert conditions_match(webhook, pod("2"))
    assert not conditions_match(webhook, pod("100m"))
