"""Kubernetes' CEL libraries on CEL's C++ runtime (cel-expr-python), for the sandbox's admission.

kube-apiserver compiles every admission expression in one base environment
(k8s.io/apiserver pkg/cel/environment/base.go). This module declares the libraries of it the
sandbox implements, each transcribed from its source:

- `k8s.quantity` (pkg/cel/library/quantity.go; in the environment since 1.28): `quantity()`,
  `isQuantity()`, and a Quantity's `isGreaterThan`, `isLessThan`, `compareTo`,
  `asApproximateFloat`, `asInteger`, `isInteger`, `add` and `sub` (members), and `sign` (a
  global function in the 1.30 declarations, though its documentation writes it as a member).
- `k8s.lists` (pkg/cel/library/lists.go; since 1.0): a list's `isSorted`, `sum`, `min`, `max`,
  `indexOf` and `lastIndexOf`, declared as lists.go declares them: one overload an element type
  (a list of strings has no `sum`: refused when written), durations and timestamps included,
  and `indexOf(list(A), A)` with a type parameter.
- `k8s.regex` (pkg/cel/library/regex.go; since 1.0): a string's `find` and `findAll`, with Go's
  regexp semantics for successive matches (regexp.go `allMatches`: an empty match right after a
  match is skipped) on Python's `re`. Patterns RE2 refuses (look-arounds, back-references) are
  refused as `Illegal regex`.

The strings extension (cel_strings), the sets extension (cel_sets) and k8s.url (cel_urls) are
modules of their own; cel_environment puts them together per Kubernetes version. Each function
is a plain Python callable, listed with its upstream overload id (QUANTITY_OVERLOADS,
LISTS_OVERLOADS, REGEX_OVERLOADS, cel_strings.STRINGS_OVERLOADS, cel_sets.SETS_OVERLOADS,
cel_urls.URL_OVERLOADS; cel_environment.implementations() maps every id to its callable).

cel-expr-python has no opaque values, so a Quantity is the protobuf message
`kubernetes.Quantity`, the type name the apiserver gives it. The message holds the quantity's
exact value in normal form, so `==` compares values as resource.Quantity's Equal does
(`quantity("200M") == quantity("0.2G")`). Values are exact decimals (base.quantity), where the
apiserver's resource.Quantity rounds a fraction below 10^-9 up.
"""

from __future__ import annotations

import datetime
import itertools
import re
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from cel_expr_python import cel
from google.protobuf import (
    descriptor_pb2,
    descriptor_pool,
    duration_pb2,
    message_factory,
    timestamp_pb2,
    wrappers_pb2,
)

from volcano_guard.base.quantity import EXACT, QuantityError, parse_quantity
from volcano_guard_sandbox.apiserver.cel_sets import cel_equal

QUANTITY_TYPE = "kubernetes.Quantity"
_INT64 = (-(2**63), 2**63 - 1)


def _descriptor_pool() -> descriptor_pool.DescriptorPool:
    """A pool holding the messages the libraries need: kubernetes.Quantity {string value} and
    kubernetes.URL {string value}."""
    file = descriptor_pb2.FileDescriptorProto(
        name="volcano_guard_kubernetes_cel.proto", package="kubernetes", syntax="proto3"
    )
    message = file.message_type.add(name="Quantity")
    message.field.add(
        name="value",
        number=1,
        type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
        label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
    )
    url = file.message_type.add(name="URL")  # urls.go: a URL, as the string it was made from
    url.field.add(
        name="value",
        number=1,
        type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
        label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return pool


POOL = _descriptor_pool()
_Quantity = message_factory.GetMessageClass(POOL.FindMessageTypeByName(QUANTITY_TYPE))
URL_TYPE = "kubernetes.URL"
URL_MESSAGE = message_factory.GetMessageClass(POOL.FindMessageTypeByName(URL_TYPE))


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
    (
        "isGreaterThan",
        "quantity_is_greater_than",
        (_Q, _Q),
        _T.BOOL,
        True,
        lambda q, other: _compare(q, other) == 1,
    ),
    (
        "isLessThan",
        "quantity_is_less_than",
        (_Q, _Q),
        _T.BOOL,
        True,
        lambda q, other: _compare(q, other) == -1,
    ),
    ("compareTo", "quantity_compare_to", (_Q, _Q), _T.INT, True, _compare),
    (
        "asApproximateFloat",
        "quantity_get_float",
        (_Q,),
        _T.DOUBLE,
        True,
        lambda q: float(_value(q)),
    ),
    ("asInteger", "quantity_get_int", (_Q,), _T.INT, True, as_integer),
    (
        "isInteger",
        "quantity_is_integer",
        (_Q,),
        _T.BOOL,
        True,
        lambda q: _as_integer(q) is not None,
    ),
    (
        "add",
        "quantity_add",
        (_Q, _Q),
        _Q,
        True,
        lambda q, other: _quantity(EXACT.add(_value(q), _value(other))),
    ),
    (
        "add",
        "quantity_add_int",
        (_Q, _T.INT),
        _Q,
        True,
        lambda q, n: _quantity(EXACT.add(_value(q), Decimal(n))),
    ),
    (
        "sub",
        "quantity_sub",
        (_Q, _Q),
        _Q,
        True,
        lambda q, other: _quantity(EXACT.subtract(_value(q), _value(other))),
    ),
    (
        "sub",
        "quantity_sub_int",
        (_Q, _T.INT),
        _Q,
        True,
        lambda q, n: _quantity(EXACT.subtract(_value(q), Decimal(n))),
    ),
)


def quantity_library() -> cel.CelExtension:
    """The k8s.quantity library as a cel-expr-python extension."""
    return extension("k8s.quantity", QUANTITY_OVERLOADS)


def extension(name: str, overloads: Any) -> cel.CelExtension:
    """Overloads as declared, with their implementations (when no two share argument kinds)."""
    by_name: dict[str, list[cel.Overload]] = {}
    for function, overload_id, parameters, result, member, implementation in overloads:
        by_name.setdefault(function, []).append(
            cel.Overload(
                overload_id, result, list(parameters), is_member=member, impl=implementation
            )
        )
    return cel.CelExtension(
        name, [cel.FunctionDecl(function, declared) for function, declared in by_name.items()]
    )


# -- k8s.lists ----------------------------------------------------------------------------------

_SUMMABLE = ("int", "uint", "double", "duration")
_COMPARABLE = ("int", "uint", "double", "bool", "duration", "timestamp", "string", "bytes")
_CEL_TYPES = {
    "int": _T.INT,
    "uint": _T.UINT,
    "double": _T.DOUBLE,
    "bool": _T.BOOL,
    "duration": _T.DURATION,
    "timestamp": _T.TIMESTAMP,
    "string": _T.STRING,
    "bytes": _T.BYTES,
}


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"  # int, uint and double compare with each other (cross-type numerics)
    return type(value).__name__


def _ordered(items: list[Any], name: str) -> list[Any]:
    """items, if CEL can compare them (one comparable type, numbers together); else an error.
    Type-checked expressions never get here with another list: only a dynamic value can."""
    kinds = {_kind(i) for i in items}
    comparable = {"number", "bool", "str", "bytes", "bytearray", "timedelta", "datetime"}
    if len(kinds) > 1 or not kinds <= comparable:
        raise ValueError(f"no such overload: {name} of a list of {sorted(kinds)}")
    return items


def as_cel(value: Any) -> Any:
    """A result CEL's runtime takes as what it is: durations and timestamps as their protobuf
    well-known types (a Python function declared to return dyn cannot return a timedelta)."""
    if isinstance(value, datetime.timedelta):
        message = duration_pb2.Duration()
        message.FromTimedelta(value)
        return message
    if isinstance(value, datetime.datetime):
        message = timestamp_pb2.Timestamp()
        message.FromDatetime(value)
        return message
    if isinstance(value, bytearray):
        return bytes(value)
    return value


def is_sorted(items: list[Any]) -> bool:
    """lists.go isSorted: false at the first element greater than the next."""
    ordered = _ordered(items, "isSorted")
    return all(not a > b for a, b in itertools.pairwise(ordered))


def list_sum(items: list[Any]) -> Any:
    """lists.go sum: from the element type's zero. The sandbox's runtime sees the values, not
    the list's declared type, so an empty list sums to the int 0 (which equals 0u and 0.0, but
    not duration('0'), as cel-go's typed zero does)."""
    if items and all(isinstance(i, datetime.timedelta) for i in items):
        return as_cel(sum(items, datetime.timedelta(0)))
    if any(_kind(i) != "number" for i in items):
        raise ValueError("no such overload: sum of a list that is not of numbers or durations")
    return sum(items)


# lists.go zeroValuesOfSummableTypes (a uint is an int in Python).
_ZEROS: dict[str, Any] = {
    "int": 0,
    "uint": 0,
    "double": 0.0,
    "duration": datetime.timedelta(0),
}


def _typed_sum(name: str) -> Any:
    """The sum of one summable type, from its zero: what the overload of that type returns for
    an empty list. CEL's C++ runtime calls list_sum (one function for every list kind)."""

    def typed_sum(items: list[Any]) -> Any:
        return _typed(name, list_sum(items) if items else as_cel(_ZEROS[name]))

    return typed_sum


def _typed(name: str, value: Any) -> Any:
    """A uint result as a uint: a Python int would reach CEL as an int."""
    return wrappers_pb2.UInt64Value(value=value) if name == "uint" else value


def _typed_extreme(name: str, pick: Any) -> Any:
    return lambda items: _typed(name, pick(items))


def _extreme(items: list[Any], name: str, pick: Any) -> Any:
    if not items:
        raise ValueError(f"{name} called on empty list")
    return as_cel(pick(_ordered(items, name)))


def list_min(items: list[Any]) -> Any:
    return _extreme(items, "min", min)


def list_max(items: list[Any]) -> Any:
    return _extreme(items, "max", max)


# The one function CEL's C++ runtime calls for a function whose per-type overloads differ.
LISTS_DISPATCH = {"sum": list_sum, "min": list_min, "max": list_max}


def list_index_of(items: list[Any], value: Any) -> int:
    """lists.go indexOf: the first element equal to value (CEL equality), else -1."""
    return next((i for i, item in enumerate(items) if cel_equal(item, value)), -1)


def list_last_index_of(items: list[Any], value: Any) -> int:
    found = [i for i, item in enumerate(items) if cel_equal(item, value)]
    return found[-1] if found else -1


def _typed_overloads() -> tuple[tuple[str, str, tuple[cel.Type, ...], cel.Type, bool, Any], ...]:
    """listsLibraryDecls: one overload an element type, with lists.go's overload ids."""
    overloads: list[tuple[str, str, tuple[cel.Type, ...], cel.Type, bool, Any]] = []
    sums = {name: _typed_sum(name) for name in _ZEROS}
    for name in _COMPARABLE:
        element = _CEL_TYPES[name]
        overloads.append(
            (
                "isSorted",
                f"list_{name}_is_sorted_bool",
                (cel.Type.List(element),),
                _T.BOOL,
                True,
                is_sorted,
            )
        )
    for name in _SUMMABLE:
        element = _CEL_TYPES[name]
        overloads.append(
            ("sum", f"list_{name}_sum_{name}", (cel.Type.List(element),), element, True, sums[name])
        )
    for function, implementation in (("max", list_max), ("min", list_min)):
        for name in _COMPARABLE:
            element = _CEL_TYPES[name]
            overloads.append(
                (
                    function,
                    f"list_{name}_{function}_{name}",
                    (cel.Type.List(element),),
                    element,
                    True,
                    _typed_extreme(name, implementation) if name == "uint" else implementation,
                )
            )
    return tuple(overloads)


# Type parameter A (lists.go paramA): cel_environment declares it to the type checker.
TYPE_PARAMETER_A = cel.Type("A")
LISTS_OVERLOADS = (
    *_typed_overloads(),
    (
        "indexOf",
        "list_a_index_of_int",
        (cel.Type.List(TYPE_PARAMETER_A), TYPE_PARAMETER_A),
        _T.INT,
        True,
        list_index_of,
    ),
    (
        "lastIndexOf",
        "list_a_last_index_of_int",
        (cel.Type.List(TYPE_PARAMETER_A), TYPE_PARAMETER_A),
        _T.INT,
        True,
        list_last_index_of,
    ),
)


# -- k8s.regex ----------------------------------------------------------------------------------

# Back-references, look-arounds, atomic groups and possessive quantifiers: Python's, not RE2's.
_NOT_RE2 = re.compile(r"\\(?:[1-9]|g<)|\(\?(?:=|!|<=|<!|>)|(?<!\\)[*+?}]\+")


def compile_regex(pattern: str) -> re.Pattern[str]:
    """The pattern as Go's regexp (RE2 syntax) would take it; ValueError in its words if not."""
    return _regex(pattern)


def _regex(pattern: str) -> re.Pattern[str]:
    if _NOT_RE2.search(pattern):
        raise ValueError(
            f"Illegal regex: error parsing regexp: invalid or unsupported Perl syntax: `{pattern}`"
        )
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"Illegal regex: error parsing regexp: {exc}") from None


def find(text: str, pattern: str) -> str:
    """regex.go find: Go's FindString, the leftmost match ("" for none)."""
    match = _regex(pattern).search(text)
    return match.group() if match else ""


def find_all(text: str, pattern: str, limit: int = -1) -> list[str]:
    """regex.go findAll: Go's FindAllString(text, limit), as regexp.go allMatches walks it."""
    compiled, found = _regex(pattern), list[str]()
    position, previous_end = 0, -1
    while (limit < 0 or len(found) < limit) and position <= len(text):
        match = compiled.search(text, position)
        if match is None:
            break
        accept = True
        if match.end() == position:  # an empty match: skip it right after a match
            accept = match.start() != previous_end
            position += 1
        else:
            position = match.end()
        previous_end = match.end()
        if accept:
            found.append(match.group())
    return found


_LIST_OF_STRINGS = cel.Type.List(_T.STRING)
REGEX_OVERLOADS = (
    ("find", "string_find_string", (_T.STRING, _T.STRING), _T.STRING, True, find),
    ("findAll", "string_find_all_string", (_T.STRING, _T.STRING), _LIST_OF_STRINGS, True, find_all),
    (
        "findAll",
        "string_find_all_string_int",
        (_T.STRING, _T.STRING, _T.INT),
        _LIST_OF_STRINGS,
        True,
        find_all,
    ),
)


# -- kubernetes.jsonpatch (pkg/cel/library/jsonpatch.go): a mutation's expressions only -----------


def escape_key(key: str) -> str:
    """jsonpatch.go escapeKey: `~` as `~0`, `/` as `~1` (one pass, as strings.Replacer)."""
    return key.replace("~", "~0").replace("/", "~1")


JSONPATCH_OVERLOADS = (
    (
        "jsonpatch.escapeKey",
        "string_jsonpatch_escapeKey_string",
        (_T.STRING,),
        _T.STRING,
        False,
        escape_key,
    ),
)


def jsonpatch_library() -> cel.CelExtension:
    """The kubernetes.jsonpatch library, which compile.go adds with the patch types."""
    return extension("kubernetes.jsonpatch", JSONPATCH_OVERLOADS)


def environment(
    variables: Mapping[str, cel.Type],
    version: tuple[int, int] = (1, 29),
    extensions: Sequence[cel.CelExtensionBase] = (),
    pool: descriptor_pool.DescriptorPool = POOL,
) -> Any:
    """The CEL environment of this version (1.29 to 1.36: the libraries base.go introduced up to
    it; 1.30 compiles a new expression at 1.29), with the given variables: a
    cel_environment.KubernetesEnvironment, whose `compile` answers as cel.Env's does. pool
    must hold POOL's kubernetes.Quantity (cel_types.pool adds the message types of typed
    variables). One is built once (it takes tens of milliseconds) unless it has extensions or
    a pool of its own."""
    from volcano_guard_sandbox.apiserver.cel_environment import KubernetesEnvironment

    if extensions or pool is not POOL:
        return KubernetesEnvironment(variables, version, extensions, pool)
    key = (tuple(sorted((name, kind.name()) for name, kind in variables.items())), version)
    if key not in _ENVIRONMENTS:
        _ENVIRONMENTS[key] = KubernetesEnvironment(variables, version)
    return _ENVIRONMENTS[key]


_ENVIRONMENTS: dict[tuple[Any, ...], Any] = {}  # an environment is never changed once built
