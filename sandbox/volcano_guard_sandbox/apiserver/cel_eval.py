"""A CEL evaluator over cel-cpp's checked AST that counts cost as cel-go v0.17.8 does.

cel-cpp (cel-expr-python) stops a comprehension after 10,000 iterations and counts no cost;
kube-apiserver 1.30 has no iteration cap but cost limits (cel_cost). So the sandbox keeps cel-cpp
as parser and type checker and evaluates the checked AST here, charging what cel-go's
CostObserver charges for each step of the plan cel-go's planner would build:

- an identifier or a select chain is one attribute: 1, plus 1 a qualifier (`.f`, `[i]`); an
  operand that is not an attribute (a call, a literal) is wrapped in a relative attribute, 1 more;
  the branches of `?:` are resolved without their head's 1; `has(a.b)` charges its qualifiers only
  (PresenceTestHasCost(false), as base.go sets it);
- constants cost 0; a list literal 10, a map 30, unless every element is a constant and the
  program is optimized (OptOptimize, as the API server's), which folds it to a constant, and turns
  `x in [constants]` into a set lookup and a conversion of a constant into a constant;
- `&&`, `||`, `?:` and comprehensions have no cost of their own; a call costs per
  cel_cost.call_cost once its arguments are evaluated.

Functions this module does not implement raise NotModelled at plan time; the caller then
evaluates with cel-cpp as before (no cost counted).
"""

from __future__ import annotations

import datetime
import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cel_expr_python import cel
from google.protobuf import duration_pb2, timestamp_pb2

from volcano_guard_sandbox.apiserver import cel_cost, cel_go_semantics, kubernetes_cel
from volcano_guard_sandbox.apiserver.checked_ast import Reference, constant, decode


class NotModelled(Exception):
    """The expression uses something this evaluator does not implement."""


@dataclass(frozen=True)
class CelError:
    """An error value (errors are values in CEL: `false && error` is false)."""

    message: str


class Run:
    """One evaluation's cost, against a limit."""

    __slots__ = ("cost", "limit")

    def __init__(self, limit: int) -> None:
        self.cost = 0
        self.limit = limit

    def charge(self, cost: int) -> None:
        self.cost += cost
        if self.cost > self.limit:
            raise cel_cost.CostLimitExceeded(cel_cost.COST_LIMIT_EXCEEDED)


Activation = dict[str, Any]
Eval = Callable[[Run, Activation], Any]
Resolve = Callable[[Run, Activation, bool], Any]  # bool: charge the attribute's head


VARIABLE_FAILED = "composited variable"


class LazyVariables(dict[str, Any]):
    """`variables`, whose first read in a filter charges that variable's cost to the filter
    (composition.go: each filter has its own composition context)."""

    def __init__(
        self,
        values: Mapping[str, Any],
        costs: Mapping[str, int],
        reads: Mapping[str, set[str]] | None = None,
        errors: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(values)
        self.costs = costs  # each variable's own cost
        self.reads = reads or {}  # the variables each one reads: charged with it, once
        self.errors = errors or {}  # why each variable that failed failed
        self.charged: set[str] = set()
        self.pending = 0
        self.total = 0

    def failed(self, name: str) -> CelError | None:
        """composition.go's error for a variable that failed to evaluate, charged as read."""
        if name not in self.errors:
            return None
        self.read(name)
        return CelError(f'{VARIABLE_FAILED} "{name}" fails to evaluate: {self.errors[name]}')

    def read(self, name: str) -> None:
        if name not in self.charged:
            self.charged.add(name)
            cost = self.costs.get(name, 0)
            self.pending += cost
            self.total += cost
            for other in self.reads.get(name, ()):
                self.read(other)


# -- values -------------------------------------------------------------------------------------


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _native(value: Any) -> Any:
    """A well-known protobuf value (as cel-cpp hands or takes it) as the Python value this
    evaluator computes with: durations, timestamps, and bytes rather than a bytearray."""
    if isinstance(value, duration_pb2.Duration):
        return value.ToTimedelta()
    if isinstance(value, timestamp_pb2.Timestamp):
        return value.ToDatetime(tzinfo=datetime.UTC)
    if isinstance(value, bytearray):
        return bytes(value)
    return value


def equal(a: Any, b: Any) -> bool:
    """CEL heterogeneous equality: numbers across types, else same kind and equal."""
    if isinstance(a, _WELL_KNOWN) or isinstance(b, _WELL_KNOWN):
        a, b = _native(a), _native(b)
    if type(a) is type(b) and type(a) in _SCALARS:
        return bool(a == b)
    if _is_number(a) and _is_number(b):
        return bool(a == b)
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        if getattr(a, "type_name", None) != getattr(b, "type_name", None):
            return False  # a mutation's JSONPatch or Object value is of its type (a map: None)
        return len(a) == len(b) and all(
            any(equal(k, key) for key in b) and equal(v, _get(b, k)) for k, v in a.items()
        )
    if type(a) is not type(b):
        return False
    return bool(a == b)


_SCALARS = {str, int, float, bool, bytes, type(None)}
_WELL_KNOWN = (duration_pb2.Duration, timestamp_pb2.Timestamp, bytearray)


def _get(mapping: Mapping[Any, Any], key: Any) -> Any:
    for candidate, value in mapping.items():
        if equal(candidate, key):
            return value
    return None


_INT64 = (-(2**63), 2**63 - 1)


@dataclass(frozen=True)
class CelType:
    """A type value (`type(x)`, `int`)."""

    name: str


_TYPE_NAMES = {"bool", "bytes", "double", "int", "uint", "string", "list", "map", "null_type"}
_TYPE_NAMES |= {"google.protobuf.Duration", "google.protobuf.Timestamp"}


def _int(value: int) -> Any:
    return value if _INT64[0] <= value <= _INT64[1] else CelError("integer overflow")


def _type_name(value: Any) -> str:
    if value is None:
        return "null_type"
    value = _native(value)
    for kind, name in (
        (bool, "bool"),
        (int, "int"),
        (float, "double"),
        (str, "string"),
        (bytes, "bytes"),
        (list, "list"),
        (dict, "map"),
        (datetime.timedelta, "google.protobuf.Duration"),
        (datetime.datetime, "google.protobuf.Timestamp"),
    ):
        if isinstance(value, kind):
            return name
    return type(value).__name__


def _no_overload(function: str, args: list[Any]) -> CelError:
    return CelError(f"no such overload: {function}({', '.join(_type_name(a) for a in args)})")


# -- the standard functions, by name: (implementation, overload id for the cost) ------------------


def _add(a: Any, b: Any) -> tuple[Any, str]:
    if isinstance(a, int) and isinstance(b, int) and not isinstance(a, bool | float):
        return _int(a + b), "add_int64"
    if isinstance(a, float) and isinstance(b, float):
        return a + b, "add_double"
    if isinstance(a, str) and isinstance(b, str):
        return a + b, "add_string"
    if isinstance(a, bytes) and isinstance(b, bytes):
        return a + b, "add_bytes"
    if isinstance(a, list) and isinstance(b, list):
        return a + b, "add_list"
    return _NOT_HERE, "add"


def _arith(name: str, op: Callable[[Any, Any], Any]) -> Callable[[Any, Any], tuple[Any, str]]:
    def apply(a: Any, b: Any) -> tuple[Any, str]:
        ints = all(isinstance(x, int) and not isinstance(x, bool) for x in (a, b))
        floats = all(isinstance(x, float) for x in (a, b))
        if not (ints or floats):
            return _NOT_HERE, name
        try:
            result = op(a, b)
        except ZeroDivisionError:
            return CelError("division by zero" if name == "_/_" else "modulus by zero"), name
        return (_int(result) if ints else result), name

    return apply


def _int_div(a: Any, b: Any) -> Any:
    if isinstance(a, float):
        return a / b if b else (math.copysign(math.inf, a) if a else math.nan)
    quotient = abs(a) // abs(b)
    return quotient if (a >= 0) == (b >= 0) else -quotient


def _int_mod(a: Any, b: Any) -> Any:
    if isinstance(a, float) or not b:
        raise ZeroDivisionError
    return int(math.fmod(a, b))


def _compare(name: str, test: Callable[[int], bool]) -> Callable[[Any, Any], tuple[Any, str]]:
    def apply(a: Any, b: Any) -> tuple[Any, str]:
        if _is_number(a) and _is_number(b):
            return test((a > b) - (a < b)), "less_int64"
        if type(a) is type(b) and isinstance(a, str | bytes | bool):
            kind = "string" if isinstance(a, str) else "bytes" if isinstance(a, bytes) else "bool"
            return test((a > b) - (a < b)), f"less_{kind}"
        return _NOT_HERE, name

    return apply


def _size(value: Any) -> tuple[Any, str]:
    if isinstance(value, str | bytes | list | dict):
        return len(value), "size"
    return _no_overload("size", [value]), "size"


def _to_string(value: Any) -> tuple[Any, str]:
    if isinstance(value, bool):
        return ("true" if value else "false"), "bool_to_string"
    if isinstance(value, str):
        return value, "string_to_string"
    if isinstance(value, int):
        return str(value), "int64_to_string"
    if isinstance(value, bytes):
        try:
            return value.decode(), "bytes_to_string"
        except UnicodeDecodeError:
            return CelError("invalid UTF-8 in bytes, cannot convert to string"), "bytes_to_string"
    return _NOT_HERE, "string"


def _to_int(value: Any) -> tuple[Any, str]:
    if isinstance(value, bool):
        return _no_overload("int", [value]), "int"
    if isinstance(value, int):
        return value, "int64_to_int64"
    if isinstance(value, str):
        try:
            return _int(int(value, 10)), "string_to_int64"
        except ValueError:
            return CelError(f"cannot convert {value!r} to int"), "string_to_int64"
    return _NOT_HERE, "int"


def _to_double(value: Any) -> tuple[Any, str]:
    if isinstance(value, bool):
        return _no_overload("double", [value]), "double"
    if isinstance(value, int | float):
        return float(value), "int64_to_double"
    return _NOT_HERE, "double"


_NOT_HERE = object()  # a case left to cel-cpp


def _string_method(
    overload: str, test: Callable[[str, str], Any]
) -> Callable[[Any, Any], tuple[Any, str]]:
    def apply(a: Any, b: Any) -> tuple[Any, str]:
        if isinstance(a, str) and isinstance(b, str):
            return test(a, b), overload
        return _no_overload(overload, [a, b]), overload

    return apply


def _matches(text: str, pattern: str) -> Any:
    try:
        return kubernetes_cel._regex(pattern).search(text) is not None
    except ValueError as exc:
        return CelError(str(exc))


STANDARD: dict[str, Callable[..., tuple[Any, str]]] = {
    "_+_": _add,
    "_-_": _arith("_-_", lambda a, b: a - b),
    "_*_": _arith("_*_", lambda a, b: a * b),
    "_/_": _arith("_/_", _int_div),
    "_%_": _arith("_%_", _int_mod),
    "_<_": _compare("_<_", lambda c: c < 0),
    "_<=_": _compare("_<=_", lambda c: c <= 0),
    "_>_": _compare("_>_", lambda c: c > 0),
    "_>=_": _compare("_>=_", lambda c: c >= 0),
    "size": _size,
    "string": _to_string,
    "int": _to_int,
    "double": _to_double,
    "dyn": lambda value: (value, "to_dyn"),
    "type": lambda value: (CelType(_type_name(value)), "type"),
    "startsWith": _string_method("starts_with_string", str.startswith),
    "endsWith": _string_method("ends_with_string", str.endswith),
    "contains": _string_method("contains_string", lambda a, b: b in a),
    "matches": _string_method("matches_string", _matches),
    cel_go_semantics.GET_MILLISECONDS: lambda value: _get_milliseconds(value),
}


def _get_milliseconds(value: Any) -> tuple[Any, str]:
    """cel-go's getMilliseconds of a duration or a timestamp; of anything else (a dyn that is
    null, a string), no such overload, as either runtime answers."""
    native = _native(value)
    if not isinstance(native, datetime.timedelta | datetime.datetime):
        return _no_overload("getMilliseconds", [value]), "duration_to_milliseconds"
    return cel_go_semantics.get_milliseconds(native), "duration_to_milliseconds"


_CONVERSIONS = {
    *("bool", "bytes", "double", "duration", "dyn", "int", "string", "timestamp", "type", "uint")
}


def _library_functions() -> dict[str, Callable[..., Any]]:
    """The Kubernetes libraries' Python implementations, by overload id."""
    table: dict[str, Callable[..., Any]] = {}
    for overloads in (
        kubernetes_cel.QUANTITY_OVERLOADS,
        kubernetes_cel.LISTS_OVERLOADS,
        kubernetes_cel.REGEX_OVERLOADS,
    ):
        for _name, overload_id, _params, _result, _member, implementation in overloads:
            table[overload_id] = implementation
    return table


LIBRARY = _library_functions()


# -- planning -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Node:
    """One planned expression: how to evaluate it and, for an attribute, how to resolve it
    with or without its head's cost (a branch of `?:` is resolved raw)."""

    evaluate: Eval
    kind: str  # "attr" (resolve set), "const" (value set) or "call"
    resolve: Resolve | None = None
    value: Any = None


class Planner:
    """Builds the plan cel-go's planner builds for one checked AST (interpreter/planner.go),
    each node a closure that evaluates and charges its cost."""

    def __init__(self, references: Mapping[int, Reference], optimize: bool) -> None:
        self.references = references
        self.optimize = optimize

    def plan(self, expr: Any) -> Node:
        if expr.HasField("const_expr"):
            value = constant(expr.const_expr)
            if isinstance(value, str | bytes | bool | int | float) or value is None:
                return _const(value)
            raise NotModelled("constant")
        if expr.HasField("ident_expr"):
            return self._ident(expr.ident_expr.name, expr.id)
        if expr.HasField("select_expr"):
            return self._select(expr)
        if expr.HasField("call_expr"):
            return self._call(expr)
        if expr.HasField("list_expr"):
            return self._list(expr.list_expr)
        if expr.HasField("struct_expr"):
            return self._map(expr.struct_expr)
        if expr.HasField("comprehension_expr"):
            return self._fold(expr.comprehension_expr)
        raise NotModelled("expression kind")

    def _ident(self, name: str, expr_id: int) -> Node:
        reference = self.references.get(expr_id)
        if reference is not None and reference.name in _TYPE_NAMES:
            type_name = reference.name

            def resolve_type(run: Run, act: Activation, head: bool) -> Any:
                if name in act:  # a variable of that name shadows the type
                    if head:
                        run.charge(1)
                    return act[name]
                return CelType(type_name)

            return Node(
                lambda run, act: resolve_type(run, act, True), "const", value=CelType(type_name)
            )

        def resolve(run: Run, act: Activation, head: bool) -> Any:
            if head:
                run.cost += 1  # Run.charge, inlined on this hot path
                if run.cost > run.limit:
                    run.charge(0)
            if name in act:
                return act[name]
            return CelError(f"no such attribute(s): {name}")

        return _attr(resolve)

    def _as_attribute(self, node: Node) -> Resolve:
        """The operand as an attribute: a relative attribute around a non-attribute."""
        if node.resolve is not None:
            return node.resolve
        inner = node.evaluate

        def relative(run: Run, act: Activation, head: bool) -> Any:
            value = inner(run, act)
            if head:
                run.charge(1)
            return value

        return relative

    def _select(self, expr: Any) -> Node:
        select = expr.select_expr
        operand = self._as_attribute(self.plan(select.operand))
        field = select.field
        if select.test_only:

            def test(run: Run, act: Activation) -> Any:
                value = operand(run, act, False)
                if isinstance(value, CelError):
                    return value
                run.charge(1)
                if isinstance(value, LazyVariables):
                    return field in value
                if isinstance(value, dict):
                    return field in value
                return CelError(f"invalid type for field selection: {_type_name(value)}")

            return Node(test, "call")

        def resolve(run: Run, act: Activation, head: bool) -> Any:
            value = operand(run, act, head)
            if value.__class__ is CelError:
                return value
            run.cost += 1  # Run.charge, inlined on this hot path
            if run.cost > run.limit:
                run.charge(0)
            if value.__class__ is dict:
                return value[field] if field in value else CelError(f"no such key: {field}")
            return _field(value, field)

        return _attr(resolve)

    def _call(self, expr: Any) -> Node:
        call = expr.call_expr
        function = call.function
        args = ([call.target] if call.HasField("target") else []) + list(call.args)
        planned = [self.plan(arg) for arg in args]
        reference = self.references.get(expr.id)
        overloads = reference.overload_ids if reference else ()
        if function == "_[_]":
            return self._index(planned)
        if function == "_?_:_":
            return self._conditional(planned)
        if function in ("_&&_", "_||_"):
            return _logical(function == "_&&_", planned)
        if function == "@in":
            return self._in(planned)
        if function in ("_==_", "_!=_"):
            return _equality(function == "_!=_", planned)
        if function in ("!_", "@not_strictly_false", "-_"):
            return _unary_builtin(function, planned[0])
        member = call.HasField("target")
        implementation = self._implementation(function, overloads, member, len(planned))
        node = _strict_call(function, overloads, implementation, planned)
        if (
            self.optimize
            and function in _CONVERSIONS
            and len(planned) == 1
            and planned[0].kind == "const"
        ):
            value = node.evaluate(Run(cel_cost.PER_CALL_LIMIT), {})
            if not isinstance(value, CelError):
                return _const(value)
        return node

    def _implementation(
        self, function: str, overloads: tuple[str, ...], member: bool, arity: int
    ) -> Callable[..., tuple[Any, str]]:
        if len(overloads) == 1 and overloads[0] in LIBRARY:
            chosen = LIBRARY[overloads[0]]
            return lambda *args: (_library_call(chosen, args), overloads[0])
        if function[0] in "_@!-" and function not in STANDARD:
            raise NotModelled(f"operator {function}")
        by_cpp = _cpp_call(function, member, arity, overloads)
        standard = STANDARD.get(function)
        if standard is None:
            return by_cpp

        def either(*args: Any) -> tuple[Any, str]:
            result = standard(*args)
            return by_cpp(*args) if result[0] is _NOT_HERE else result

        return either

    def _index(self, planned: list[Node]) -> Node:
        operand = self._as_attribute(planned[0])
        index = planned[1]
        index_cost = 0 if index.kind == "attr" else 1

        def resolve(run: Run, act: Activation, head: bool) -> Any:
            value = operand(run, act, head)
            if isinstance(value, CelError):
                return value
            key = index.evaluate(run, act)
            run.charge(index_cost)
            if isinstance(key, CelError):
                return key
            return _index_value(value, key)

        return _attr(resolve)

    def _conditional(self, planned: list[Node]) -> Node:
        condition = planned[0]
        truthy, falsy = (self._as_attribute(p) for p in planned[1:])

        def resolve(run: Run, act: Activation, head: bool) -> Any:
            test = condition.evaluate(run, act)
            if isinstance(test, CelError):
                return test
            if not isinstance(test, bool):
                return _no_overload("_?_:_", [test])
            # cel-go resolves a branch as a raw attribute: its head is not charged.
            return truthy(run, act, False) if test else falsy(run, act, False)

        return _attr(resolve)

    def _in(self, planned: list[Node]) -> Node:
        element, container = planned
        if self.optimize and container.kind == "const" and isinstance(container.value, list):
            members = container.value
            if all(
                isinstance(m, str | int | float | bool) or m is None for m in members
            ) and not any(isinstance(m, bytes) for m in members):
                return _set_membership(element, members)
        return _strict_call("@in", (), _in_any, planned)

    def _list(self, create: Any) -> Node:
        if create.optional_indices:
            raise NotModelled("optional list elements")
        elements = [self.plan(e) for e in create.elements]
        if self.optimize and all(e.kind == "const" for e in elements):
            return _const([e.value for e in elements])

        def evaluate(run: Run, act: Activation) -> Any:
            values = [e.evaluate(run, act) for e in elements]
            run.charge(cel_cost.LIST_CREATE)
            for value in values:
                if isinstance(value, CelError):
                    return value
            return values

        return Node(evaluate, "call")

    def _map(self, create: Any) -> Node:
        if create.message_name:
            raise NotModelled("message creation")
        if any(entry.optional_entry for entry in create.entries):
            raise NotModelled("optional map entries")
        pairs = [(self.plan(e.map_key), self.plan(e.value)) for e in create.entries]
        if (
            self.optimize
            and all(k.kind == v.kind == "const" for k, v in pairs)
            and not any(_bad_key(k.value) for k, _ in pairs)
        ):
            return _const({k.value: v.value for k, v in pairs})

        def evaluate(run: Run, act: Activation) -> Any:
            result: dict[Any, Any] = {}
            error = None
            for key_node, value_node in pairs:
                key, value = key_node.evaluate(run, act), value_node.evaluate(run, act)
                for item in (key, value, _bad_key(key)):
                    if isinstance(item, CelError) and error is None:
                        error = item
                if error is not None:
                    continue
                if any(equal(key, k) for k in result):
                    error = CelError(f"Failed with repeated key: {key}")
                result[key] = value
            run.charge(cel_cost.MAP_CREATE)
            return error if error is not None else result

        return Node(evaluate, "call")

    def _fold(self, fold: Any) -> Node:
        iter_range = self.plan(fold.iter_range)
        accu_init = self.plan(fold.accu_init)
        condition = self.plan(fold.loop_condition)
        step = self.plan(fold.loop_step)
        result = self.plan(fold.result)
        iter_var, accu_var = fold.iter_var, fold.accu_var

        def evaluate(run: Run, act: Activation) -> Any:
            items = iter_range.evaluate(run, act)
            if isinstance(items, CelError):
                return items
            if not isinstance(items, list | dict):
                return CelError(f"got '{_type_name(items)}', expected iterable type")
            scope = dict(act)
            scope[accu_var] = accu_init.evaluate(run, act)
            for item in list(items):
                scope[iter_var] = item
                test = condition.evaluate(run, scope)
                if isinstance(test, bool) and not test:
                    break
                scope[accu_var] = step.evaluate(run, scope)
            scope.pop(iter_var, None)
            return result.evaluate(run, scope)

        return Node(evaluate, "call")


def _bad_key(key: Any) -> CelError | None:
    """A map key that is not an int, uint, bool or string (a dyn one passes the checker): CEL
    refuses it, and Python cannot hash some (lists, maps, a Quantity message)."""
    if not isinstance(key, bool | int | str):
        return CelError(f"unsupported key type: {_type_name(key)}")
    return None


def _const(value: Any) -> Node:
    return Node(lambda run, act: value, "const", value=value)


def _attr(resolve: Resolve) -> Node:
    return Node(lambda run, act: resolve(run, act, True), "attr", resolve=resolve)


def _field(value: Any, field: str) -> Any:
    if isinstance(value, LazyVariables):
        if field not in value:
            return value.failed(field) or CelError(f"no such key: {field}")
        value.read(field)
        return value[field]
    if isinstance(value, dict):
        if field in value:
            return value[field]
        return CelError(f"no such key: {field}")
    if hasattr(value, "DESCRIPTOR"):
        raise NotModelled("message field selection")
    return CelError(f"invalid type for field selection: {_type_name(value)}")


def _index_value(value: Any, key: Any) -> Any:
    if isinstance(value, list):
        if isinstance(key, float) and key == int(key):
            key = int(key)
        if not isinstance(key, int) or isinstance(key, bool):
            return CelError(f"unsupported index type '{_type_name(key)}' in list")
        if not 0 <= key < len(value):
            return CelError(f"index out of bounds: {key}")
        return value[key]
    if isinstance(value, dict):
        if isinstance(key, str):  # JSON objects: string keys only
            if key not in value:
                failed = value.failed(key) if isinstance(value, LazyVariables) else None
                return failed or CelError(f"no such key: {key}")
            if isinstance(value, LazyVariables):
                value.read(key)
            return value[key]
        for candidate, item in value.items():
            if equal(candidate, key):
                return item
        return CelError(f"no such key: {key}")
    return CelError(f"no such overload: _[_]({_type_name(value)}, {_type_name(key)})")


def _logical(conjunction: bool, planned: list[Node]) -> Node:
    stop = not conjunction  # && stops at false, || at true

    def evaluate(run: Run, act: Activation) -> Any:
        error = None
        for term in planned:
            value = term.evaluate(run, act)
            if isinstance(value, bool):
                if value is stop:
                    return stop
            elif error is None:
                error = (
                    value
                    if isinstance(value, CelError)
                    else _no_overload("_&&_" if conjunction else "_||_", [value])
                )
        return error if error is not None else conjunction

    return Node(evaluate, "call")


def _equality(negate: bool, planned: list[Node]) -> Node:
    left, right = planned
    overload = "not_equals" if negate else "equals"

    def evaluate(run: Run, act: Activation) -> Any:
        a, b = left.evaluate(run, act), right.evaluate(run, act)
        run.charge(cel_cost.call_cost("_==_", overload, [a, b], None))
        for value in (a, b):
            if isinstance(value, CelError):
                return value
        a, b = _native(a), _native(b)
        if hasattr(a, "DESCRIPTOR") or hasattr(b, "DESCRIPTOR"):  # a Quantity
            return (a != b) if negate else (a == b)
        return equal(a, b) is not negate

    return Node(evaluate, "call")


def _unary_builtin(function: str, operand: Node) -> Node:
    def evaluate(run: Run, act: Activation) -> Any:
        value = operand.evaluate(run, act)
        run.charge(1)
        if function == "@not_strictly_false":
            return value is not False
        if isinstance(value, CelError):
            return value
        if function == "!_":
            return (not value) if isinstance(value, bool) else _no_overload("!_", [value])
        if isinstance(value, int) and not isinstance(value, bool):
            return _int(-value)
        if isinstance(value, float):
            return -value
        return _no_overload("-_", [value])

    return Node(evaluate, "call")


def _set_membership(element: Node, members: list[Any]) -> Node:
    def evaluate(run: Run, act: Activation) -> Any:
        value = element.evaluate(run, act)
        if isinstance(value, CelError):
            return value
        return any(equal(value, member) for member in members)

    return Node(evaluate, "call")


def _in_any(element: Any, container: Any) -> tuple[Any, str]:
    if isinstance(container, list):
        return any(equal(element, item) for item in container), "in_list"
    if isinstance(container, dict):
        if isinstance(element, str):
            return element in container, "in_map"
        return any(equal(element, key) for key in container), "in_map"
    return _no_overload("@in", [element, container]), "in"


@functools.lru_cache(maxsize=256)
def _cpp_program(function: str, member: bool, arity: int) -> Any:
    names = [f"a{index}" for index in range(arity)]
    if function.startswith("_") and function.endswith("_") and arity == 2:
        text = f"a0 {function[1:-1]} a1"  # a binary operator: _+_ is a0 + a1
    elif member:
        text = f"{names[0]}.{function}({', '.join(names[1:])})"
    else:
        text = f"{function}({', '.join(names)})"
    return _CPP_ENVIRONMENT.compile(text)


def _cpp_call(
    function: str, member: bool, arity: int, overloads: tuple[str, ...]
) -> Callable[..., tuple[Any, str]]:
    """A function this module does not implement, evaluated by cel-cpp on the argument values
    (its cost is still counted here, by its overload id or its name)."""
    if arity > _CPP_ARITY:
        raise NotModelled(f"function {function} of {arity} arguments")
    overload = overloads[0] if len(overloads) == 1 else function

    def apply(*args: Any) -> tuple[Any, str]:
        try:
            program = _cpp_program(function, member, arity)
        except RuntimeError:
            raise NotModelled(f"function {function}") from None
        data = {f"a{index}": _to_cpp(arg) for index, arg in enumerate(args)}
        value = program.eval(data=data)
        try:
            if value.type() == cel.Type.ERROR:
                return CelError(str(value.value())), overload
            return value.plain_value(), overload
        except (TypeError, SystemError):  # a value the binding cannot hand to Python (an optional)
            raise NotModelled(f"function {function}'s value") from None

    return apply


def _to_cpp(value: Any) -> Any:
    """A value as cel-cpp takes it: durations and timestamps as their protobuf messages."""
    if isinstance(value, datetime.timedelta | datetime.datetime):
        return kubernetes_cel.as_cel(value)
    if isinstance(value, list):
        return [_to_cpp(item) for item in value]
    if isinstance(value, dict):
        return {key: _to_cpp(item) for key, item in value.items()}
    if isinstance(value, CelType | CelError):
        raise NotModelled("a type or error value as an argument")
    return value


_CPP_ARITY = 4
_CPP_ENVIRONMENT = kubernetes_cel.environment({f"a{i}": cel.Type.DYN for i in range(_CPP_ARITY)})


def _library_call(implementation: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """A library's Python function, given what cel-cpp's runtime would give it: well-known
    protobuf values as Python's (a list's elements too)."""
    args = tuple(
        [_native(item) for item in arg] if isinstance(arg, list) else _native(arg) for arg in args
    )
    try:
        return implementation(*args)
    except (ValueError, TypeError, ArithmeticError) as exc:
        return CelError(str(exc))


def _strict_call(
    function: str,
    overloads: tuple[str, ...],
    implementation: Callable[..., tuple[Any, str]],
    planned: list[Node],
) -> Node:
    variadic = len(planned) > 2
    cost = cel_cost.cost_function(function)

    def evaluate(run: Run, act: Activation) -> Any:
        values = []
        error = None
        for node in planned:
            value = node.evaluate(run, act)
            if value.__class__ is CelError:
                if variadic:
                    return value  # evalVarArgs stops here, before the call is charged
                error = error or value
            values.append(value)
        if error is not None:
            run.charge(cost("", values, None))
            return error
        result, overload = implementation(*values)
        if result is _NOT_HERE:
            raise NotModelled(f"{function} of {[_type_name(v) for v in values]}")
        run.charge(cost(overload, values, result))
        return result

    return Node(evaluate, "call")


# -- entry points -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    value: Any
    error: str  # "" when the value is not an error
    cost: int


@functools.lru_cache(maxsize=1024)
def plan(serialized: bytes, optimize: bool = True) -> Node:
    """The evaluation plan of Expression.serialize(); NotModelled if outside this evaluator."""
    expr, references = decode(serialized)
    return Planner(references, optimize).plan(expr)


def run(node: Node, variables: Activation, limit: int = cel_cost.PER_CALL_LIMIT) -> Outcome:
    """Evaluate a plan: its value or error, and its cost (over the limit: the cost-limit error)."""
    tracker = Run(limit)
    try:
        value = node.evaluate(tracker, variables)
    except cel_cost.CostLimitExceeded as exc:
        return Outcome(None, str(exc), tracker.cost)
    except RecursionError:
        raise NotModelled("expression nested too deep") from None
    if isinstance(value, CelError):
        return Outcome(None, value.message, tracker.cost)
    return Outcome(value, "", tracker.cost)


@functools.lru_cache(maxsize=1024)
def plan_of(program: Callable[[str], Any], expression: str) -> Node | None:
    """The plan of expression as program (a cached compile) checks it; None if not modelled."""
    try:
        return plan(program(expression).serialize())
    except NotModelled:
        return None


def evaluate_costed(
    program: Callable[[str], Any], expression: str, variables: Mapping[str, Any]
) -> Outcome | None:
    """Evaluate under the per-call limit and charge the current filter's budget (cel_cost.BUDGET):
    None when this evaluator does not model the expression (the caller uses cel-cpp)."""
    node = plan_of(program, expression)
    if node is None:
        return None
    try:
        outcome = run(node, dict(variables))
    except NotModelled:
        return None
    budget = cel_cost.BUDGET.get()
    if budget is None:
        return outcome
    lazy = variables.get("variables")
    pending = lazy.pending if isinstance(lazy, LazyVariables) else 0
    if isinstance(lazy, LazyVariables):
        lazy.pending = 0
    if not budget.charge(pending + outcome.cost):
        return Outcome(None, cel_cost.OUT_OF_BUDGET, outcome.cost)
    return outcome
