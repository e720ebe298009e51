"""Kubernetes' CEL libraries on CEL's C++ runtime (cel-expr-python), for the sandbox's admission.

kube-apiserver compiles every admission expression in one base environment
(k8s.io/apiserver pkg/cel/environment/base.go). This module declares the libraries of it the
sandbox implements, each transcribed from its source:

- `k8s.quantity` (pkg/cel/library/quantity.go; in the environment since 1.28): `quantity()`,
  `isQuantity()`, and a Quantity's `isGreaterThan`, `isLessThan`, `compareTo`,
  `asApproximateFloat`, `asInteger`, `isInteger`, `add` and `sub` (members), and `sign` (a
  global function in the 1.30 declarations, though its documentation writes it as a member).

cel-expr-python has no opaque values, so a Quantity is the protobuf message
`kubernetes.Quantity`, the type name the apiserver gives it. The message holds the quantity's
exact value in normal form, so `==` compares values as resource.Quantity's Equal does
(`quantity("200M") == quantity("0.2G")`). Values are exact decimals (base.quantity), where the
apiserver's resource.Quantity rounds a fraction below 10^-9 up.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from cel_expr_python import cel
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from volcano_guard.base.quantity import EXACT, QuantityError, parse_quantity

QUANTITY_TYPE = "kubernetes.Quantity"
_INT64 = (-(2**63), 2**63 - 1)


def _descriptor_pool() -> descriptor_pool.DescriptorPool:
    """A pool holding the one message the libraries need: kubernetes.Quantity {string value}."""
    file = descriptor_pb2.FileDescriptorProto(name="volcano_guard_kubernetes_cel.proto",
                                              package="kubernetes", syntax="proto3")
    message = file.message_type.add(name="Quantity")
    message.field.add(name="value", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                      label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return pool


POOL = _descriptor_pool()
_Quantity = message_factory.GetMessageClass(POOL.FindMessageTypeByName(QUANTITY_TYPE))


def _quantity(value: Decimal) -> Any:
    return _Quantity(value=str(value.normalize(EXACT)) if value else "0")


def _value(quantity: Any) -> Decimal:
    return Decimal(quantity.value)


def string_to_quantity(text: str) -> Any:
    try:
        return _quantity(parse_quantity(text))
    except QuantityError as exc:  # an error value in CEL, as resource.ParseQuantity's error
        raise ValueError(f"quantities must match the regular expression: {exc}") from None


def is_quantity(text: str) -> bool:
    try:
        parse_quantity(text)
    except QuantityError:
        return False
    return True


def _compare(left: Any, right: Any) -> int:
    a, b = _value(left), _value(right)
    return (a > b) - (a < b)


def _as_integer(quantity: Any) -> int | None:
    value = _value(quantity)
    if value != value.to_integral_value() or not _INT64[0] <= value <= _INT64[1]:
        return None
    return int(value)


def as_integer(quantity: Any) -> int:
    integer = _as_integer(quantity)
    if integer is None:
        raise ValueError("cannot convert value to integer")
    return integer


def _sign(value: Decimal) -> int:
    return (value > 0) - (value < 0)


# (name, overload id, parameter types, return type, member, implementation), in the order and
# with the ids of quantityLibraryDecls.
_Q = cel.Type(QUANTITY_TYPE)
_T = cel.Type
QUANTITY_OVERLOADS: tuple[tuple[str, str, tuple[cel.Type, ...], cel.Type, bool, Any], ...] = (
    ("quantity", "string_to_quantity", (_T.STRING,), _Q, False, string_to_quantity),
    ("isQuantity", "is_quantity_string", (_T.STRING,), _T.BOOL, False, is_quantity),
    ("sign", "quantity_sign", (_Q,), _T.INT, False, lambda q: _sign(_value(q))),
    ("isGreaterThan", "quantity_is_greater_than", (_Q, _Q), _T.BOOL, True,
     lambda q, other: _compare(q, other) == 1),
    ("isLessThan", "quantity_is_less_than", (_Q, _Q), _T.BOOL, True,
     lambda q, other: _compare(q, other) == -1),
    ("compareTo", "quantity_compare_to", (_Q, _Q), _T.INT, True, _compare),
    ("asApproximateFloat", "quantity_get_float", (_Q,), _T.DOUBLE, True,
     lambda q: float(_value(q))),
    ("asInteger", "quantity_get_int", (_Q,), _T.INT, True, as_integer),
    ("isInteger", "quantity_is_integer", (_Q,), _T.BOOL, True,
     lambda q: _as_integer(q) is not None),
    ("add", "quantity_add", (_Q, _Q), _Q, True,
     lambda q, other: _quantity(EXACT.add(_value(q), _value(other)))),
    ("add", "quantity_add_int", (_Q, _T.INT), _Q, True,
     lambda q, n: _quantity(EXACT.add(_value(q), Decimal(n)))),
    ("sub", "quantity_sub", (_Q, _Q), _Q, True,
     lambda q, other: _quantity(EXACT.subtract(_value(q), _value(other)))),
    ("sub", "quantity_sub_int", (_Q, _T.INT), _Q, True,
     lambda q, n: _quantity(EXACT.subtract(_value(q), Decimal(n)))),
)


def quantity_library() -> cel.CelExtension:
    """The k8s.quantity library as a cel-expr-python extension."""
    by_name: dict[str, list[cel.Overload]] = {}
    for name, overload_id, parameters, result, member, implementation in QUANTITY_OVERLOADS:
        by_name.setdefault(name, []).append(cel.Overload(
            overload_id, result, list(parameters), is_member=member, impl=implementation))
    return cel.CelExtension("k8s.quantity", [cel.FunctionDecl(name, overloads)
                                             for name, overloads in by_name.items()])


def environment(variables: Mapping[str, cel.Type]) -> cel.Env:
    """A CEL environment with the given variables and the Kubernetes libraries above."""
    return cel.NewEnv(POOL, variables=dict(variables), extensions=[quantity_library()])
