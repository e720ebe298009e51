"""A MutatingAdmissionPolicy's JSONPatch mutation, as kube-apiserver 1.36 compiles and applies it.

Transcribed from k8s.io/apiserver v0.36.3:
- compiling (plugin/cel compile.go with HasPatchTypes, policy/mutating compilation.go): the
  mutation's expression sees `object`, `oldObject`, `request`, `namespaceObject`, `params` and
  the policy's `variables`, plus the `JSONPatch` type (cel/mutation/jsonpatch.go: op, path and
  from strings, a dyn value) and `jsonpatch.escapeKey` (cel/library/jsonpatch.go); it must
  evaluate to exactly `list(JSONPatch)`. Variables and matchConditions are compiled without
  the patch types, as upstream compiles them.
- evaluating (patch/json_patch.go evaluatePatchExpression): one mutation has a cost budget of
  its own (celconfig.RuntimeCELCostBudget), which the variables it reads are charged to, as
  a validation's (cel_eval, cel_cost). Each JSONPatch becomes an RFC 6902 operation; its value
  converts to JSON as cel-go converts a value to a google.protobuf.Value (an int beyond 53
  bits as a string, bytes as base64, a duration or timestamp as its string).
- applying (gopkg.in/evanphx/json-patch.v4, which json_patch.go applies): its findObject,
  partialDoc and partialArray, with their errors; a failing `test` leaves the object as it was
  (ErrTestFailed), any other failure is `JSON Patch: <error>`.

Public, for the plugin (mutating_admission) and for the guard's differential tests:
`MutationError`, `mutation_errors` (what a write of the policy is refused for), `patch_operations`
(the JSON patch an expression evaluates to) and `apply_json_patch_expression` (the object it
gives). Compiled expressions are cached by expression and version (never per request).

Not modelled: `Object.<path>{...}` initializers (cel/mutation/dynamic: typed construction
without a schema; refused when written, "the sandbox does not model ..."), and the strict
decoding of the patched object into its Go type (an unknown field is kept, not refused).
"""

from __future__ import annotations

import base64
import copy
import datetime
import functools
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cel_expr_python import cel
from google.protobuf import json_format

from volcano_guard_sandbox.apiserver import (
    cel_check,
    cel_cost,
    cel_eval,
    cel_types,
    kubernetes_cel,
    matching,
    object_types,
    versions,
)
from volcano_guard_sandbox.apiserver.checked_ast import decode
from volcano_guard_sandbox.apiserver.policy_validation import (
    PolicyInputs,
    _variables,
)
from volcano_guard_sandbox.apiserver.policy_validation import program as variable_program
from volcano_guard_sandbox.apiserver.versions import KubernetesVersion

KUBERNETES_1_36 = KubernetesVersion(36)
JSONPATCH = cel_types.JSONPATCH_TYPE
RETURN_TYPE = f"list({JSONPATCH})"  # json_patch.go JSONPatchCondition.ReturnTypes
_ESCAPE_KEY = "string_jsonpatch_escapeKey_string"
_DYN_VARIABLES = ("object", "oldObject", "request", "namespaceObject", "params", "variables")
# gopkg.in/evanphx/json-patch.v4 errors.go
_MISSING = "missing value"
_INVALID_INDEX = "invalid index referenced"


class MutationError(Exception):
    """A mutation that could not be applied: the message upstream's patcher returns."""


# -- compiling ------------------------------------------------------------------------------------


def mutation_errors(
    spec: Mapping[str, Any], version: KubernetesVersion = KUBERNETES_1_36
) -> list[str]:
    """What the API's validation refuses in the expressions of a MutatingAdmissionPolicy spec:
    its matchConditions and variables as a ValidatingAdmissionPolicy's (cel_check), then each
    JSONPatch mutation's expression, with the patch types, which must be `list(JSONPatch)`:
    `spec.mutations[i].jsonPatch.expression: Invalid value: "EXPRESSION": DETAIL`."""
    errors = cel_check.policy_errors(
        {key: spec[key] for key in ("matchConditions", "variables", "paramKind") if key in spec},
        version.cel_for_new_expressions,
    )
    params = bool(spec.get("paramKind"))
    declared, _ = cel_check._variables(
        spec.get("variables") or (), params, version.cel_for_new_expressions
    )
    for index, mutation in enumerate(spec.get("mutations") or ()):
        patch = mutation.get("jsonPatch") if isinstance(mutation, Mapping) else None
        expression = patch.get("expression") if isinstance(patch, Mapping) else None
        if not isinstance(expression, str) or not expression.strip():
            continue
        error = expression_error(expression, version, params, declared)
        if error:
            errors.append(
                f"spec.mutations[{index}].jsonPatch.expression: Invalid value: "
                f"{json.dumps(expression)}: {error}"
            )
    return errors


def expression_error(
    expression: str,
    version: KubernetesVersion = KUBERNETES_1_36,
    params: bool = True,
    variables: cel_check.VariableKinds | None = None,
) -> str:
    """Why a JSONPatch expression does not compile as written at version ("" if it does):
    compile.go's `compilation failed: ...`, or `must evaluate to list(JSONPatch) but got T`."""
    cel_version = version.cel_for_new_expressions
    try:
        expression, types = _with_object_types(expression, cel_version)
    except RuntimeError as exc:  # does not parse: the checker says why, as for any other
        types = b""
        del exc
    declarations = cel_check.Declarations(
        params, True, variables, cel_version, patch_types=True, object_types=types
    )
    checked = cel_check.check(expression, declarations, cel_check.ANY)
    if checked.error:
        return object_types.originals(checked.error)
    output = object_types.originals(_output_type(expression, declarations))
    if output != RETURN_TYPE:
        return f"must evaluate to {RETURN_TYPE} but got {output}"
    return ""


def _with_object_types(expression: str, cel_version: tuple[int, int]) -> tuple[str, bytes]:
    """The expression as the sandbox compiles it and the declarations of its Object types
    (object_types), b"" when it has no initializer."""
    if not object_types.INITIALIZER.search(expression):
        return expression, b""
    internal = object_types.rewritten(expression)
    parsed = _environment(cel_version).compile(internal, disable_check=True).serialize()
    return internal, object_types.declarations(parsed)


def _output_type(expression: str, declarations: cel_check.Declarations) -> str:
    tree = cel_types.checked(cel_check._environment(declarations).compile(expression).serialize())
    return cel_types.format_type(tree.type_map[tree.expr.id])


@functools.lru_cache(maxsize=128)
def _environment(cel_version: tuple[int, int], types: bytes = b"") -> Any:
    """A stored mutation's runtime environment: every variable dyn, with the patch types (and
    an expression's Object types)."""
    files = [object_types.file_descriptor(types)] if types else []
    return versions.cel_environment(
        {name: cel.Type.DYN for name in _DYN_VARIABLES},
        cel_version,
        pool=cel_types.pool(None, True, files),
        extensions=[kubernetes_cel.jsonpatch_library()],
    )


@functools.lru_cache(maxsize=512)
def program(expression: str, version: KubernetesVersion = KUBERNETES_1_36) -> cel.Expression:
    """The compiled mutation expression, as a stored one runs (RuntimeError if it does not
    compile). Cached: a policy's expressions compile once, not per request."""
    cel_version = version.cel_for_stored_expressions
    internal, types = _with_object_types(expression, cel_version)
    return _environment(cel_version, types).compile(internal)


@functools.cache
def _compiled_in(version: KubernetesVersion) -> Callable[[str], cel.Expression]:
    return functools.partial(program, version=version)


# -- evaluating -----------------------------------------------------------------------------------


class PatchValue(dict[str, Any]):
    """A JSONPatch value (jsonpatch.go JSONPatchVal): its set fields, by name. has() of op,
    path or from is true when non-empty, so an empty one is not kept."""

    type_name = JSONPATCH  # equal only to a JSONPatch (cel_eval.equal)


class _Planner(cel_eval.Planner):
    """cel_eval's planner with the patch types: `JSONPatch{...}` (a struct creation, 40 as
    cel-go's StructCreateBaseCost) and `jsonpatch.escapeKey`."""

    def _map(self, create: Any) -> cel_eval.Node:
        type_name = object_types.original_name(create.message_name)
        if type_name is not None:
            return self._object(create, type_name)
        if create.message_name != JSONPATCH:
            return super()._map(create)
        fields = [(entry.field_key, self.plan(entry.value)) for entry in create.entries]

        def evaluate(run: cel_eval.Run, act: cel_eval.Activation) -> Any:
            result = PatchValue()
            for name, node in fields:
                value = node.evaluate(run, act)
                if isinstance(value, cel_eval.CelError):
                    return value
                if name == "value" or value:
                    result[name] = value
            run.charge(cel_cost.STRUCT_CREATE)
            return result

        return cel_eval.Node(evaluate, "call")

    def _object(self, create: Any, type_name: str) -> cel_eval.Node:
        """An Object initializer: its set fields (dynamic/objects.go ObjectVal)."""
        fields = [(entry.field_key, self.plan(entry.value)) for entry in create.entries]

        def evaluate(run: cel_eval.Run, act: cel_eval.Activation) -> Any:
            values = {}
            for name, node in fields:
                value = node.evaluate(run, act)
                if isinstance(value, cel_eval.CelError):
                    return value
                values[name] = value
            run.charge(cel_cost.STRUCT_CREATE)
            return object_types.ObjectValue(type_name, values)

        return cel_eval.Node(evaluate, "call")

    def _implementation(
        self, function: str, overloads: tuple[str, ...], member: bool, arity: int
    ) -> Callable[..., tuple[Any, str]]:
        if overloads == (_ESCAPE_KEY,):
            return lambda key: (kubernetes_cel.escape_key(key), _ESCAPE_KEY)
        return super()._implementation(function, overloads, member, arity)


@functools.lru_cache(maxsize=512)
def _plan(program_of: Callable[[str], cel.Expression], expression: str) -> cel_eval.Node | None:
    try:
        expr, references = decode(program_of(expression).serialize())
        return _Planner(references, optimize=True).plan(expr)
    except cel_eval.NotModelled:
        return None


def _evaluate(
    program_of: Callable[[str], cel.Expression], expression: str, data: Mapping[str, Any]
) -> tuple[Any, str]:
    """matching.evaluate with the patch types: (value, "") or (None, the error)."""
    try:
        compiled = program_of(expression)
    except RuntimeError as exc:
        return None, f"compilation error: {object_types.originals(str(exc))}"
    node = _plan(program_of, expression)
    if node is None:  # outside cel_eval: cel-cpp evaluates it, uncosted
        return _evaluate_uncosted(compiled, expression, data)
    try:
        outcome = cel_eval.run(node, dict(data))
    except cel_eval.NotModelled:
        return _evaluate_uncosted(compiled, expression, data)
    budget = cel_cost.BUDGET.get()
    lazy = data.get("variables")
    pending = lazy.pending if isinstance(lazy, cel_eval.LazyVariables) else 0
    if budget is not None and not budget.charge(pending + outcome.cost):
        return None, cel_cost.OUT_OF_BUDGET
    if outcome.error:
        return None, f"expression '{expression}' resulted in error: {outcome.error}"
    return outcome.value, ""


def _evaluate_uncosted(compiled: Any, expression: str, data: Mapping[str, Any]) -> tuple[Any, str]:
    value = compiled.eval(data=matching._plain(data))
    if value.type() == cel.Type.ERROR:
        return None, f"expression '{expression}' resulted in error: {value.value()}"
    return [_from_message(item) for item in value.value()], ""


def _from_message(message: Any) -> PatchValue:
    """A JSONPatch message cel-cpp built, as the PatchValue cel_eval builds."""
    result = PatchValue()
    for name in ("op", "path", "from"):
        if getattr(message, name):
            result[name] = getattr(message, name)
    if message.HasField("value"):
        result["value"] = json_format.MessageToDict(message.value)
    return result


_JSON_SAFE = 2**53 - 1  # cel-go's int/uint isJSONSafe


def to_json(value: Any) -> Any:
    """A CEL value as cel-go converts it to a google.protobuf.Value for a JSONPatch's value;
    MutationError (json_patch.go's words) where it cannot."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return value if abs(value) <= _JSON_SAFE else str(value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise MutationError(
                "JSONPath valueExpression evaluated to a type that could not marshal to JSON: "
                f"json: unsupported value: {value}"
            )
        return int(value) if value.is_integer() and abs(value) <= _JSON_SAFE else value
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, datetime.timedelta):
        return _duration(value)
    if isinstance(value, datetime.datetime):
        return value.astimezone(datetime.UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, PatchValue):
        raise MutationError(
            "JSONPath valueExpression evaluated to a type that could not marshal to JSON: "
            "type conversion error from 'JSONPatch' to 'google.protobuf.Value'"
        )
    if isinstance(value, list):
        return [to_json(item) for item in value]
    if isinstance(value, Mapping):
        if not all(isinstance(key, str) for key in value):
            raise MutationError(
                "JSONPath valueExpression evaluated to a type that could not marshal to JSON: "
                "map key is not a string"
            )
        return {key: to_json(item) for key, item in value.items()}
    native = cel_eval._native(value)
    if native is not value:
        return to_json(native)
    raise MutationError(
        "JSONPath valueExpression evaluated to a type that could not marshal to JSON: "
        f"type conversion error to 'google.protobuf.Value' from {type(value).__name__}"
    )


def _duration(value: datetime.timedelta) -> str:
    seconds = value.total_seconds()
    text = f"{seconds:.9f}".rstrip("0").rstrip(".")
    return f"{text}s"


def patch_operations(
    expression: str,
    inputs: PolicyInputs,
    variables: Sequence[Mapping[str, Any]] = (),
    version: KubernetesVersion = KUBERNETES_1_36,
    budget_total: int = cel_cost.RUNTIME_BUDGET,
) -> list[dict[str, Any]]:
    """The RFC 6902 operations a JSONPatch expression evaluates to for inputs, the policy's
    variables ({name, expression}, each seeing those before it) evaluated lazily against the
    mutation's own budget (budget_total). MutationError with upstream's message otherwise."""
    data = inputs.variables()
    values, costs, reads, failed = _variables(variables, data, _variable_programs(version))
    with cel_cost.budget(budget_total):
        data["variables"] = cel_eval.LazyVariables(values, costs, reads, failed)
        result, error = _evaluate(_compiled_in(version), expression, data)
    if error:
        raise MutationError(error)
    if not isinstance(result, list):
        raise MutationError("type mismatch: JSONPatchType.expression should evaluate to array")
    return [_operation(item) for item in result]


@functools.cache
def _variable_programs(version: KubernetesVersion) -> Callable[[str], cel.Expression]:
    return functools.partial(variable_program, version=version)


def _operation(item: Any) -> dict[str, Any]:
    if not isinstance(item, PatchValue):
        raise MutationError(
            "type mismatch: JSONPatchType.expression should evaluate to array of JSONPatch"
        )
    operation: dict[str, Any] = {"op": item.get("op", ""), "path": item.get("path", "")}
    if item.get("from"):
        operation["from"] = item["from"]
    if "value" in item and item["value"] is not None:
        if mismatches := object_types.type_mismatches(item["value"]):
            raise MutationError("type mismatch: " + "\n".join(mismatches))
        operation["value"] = to_json(item["value"])
    elif "value" in item:  # a null value: op.Val is a CEL null, marshalled as JSON null
        operation["value"] = None
    return operation


def apply_json_patch_expression(
    expression: str,
    inputs: PolicyInputs,
    variables: Sequence[Mapping[str, Any]] = (),
    version: KubernetesVersion = KUBERNETES_1_36,
    budget_total: int = cel_cost.RUNTIME_BUDGET,
) -> Any:
    """jsonPatcher.Patch: a patched copy of inputs.object (never changed in place); the object
    unchanged when a `test` operation fails; MutationError with upstream's message when the
    expression fails or the patch does not apply (`JSON Patch: ...`)."""
    operations = patch_operations(expression, inputs, variables, version, budget_total)
    return apply_operations(inputs.object, operations)


def apply_operations(document: Any, operations: Sequence[Mapping[str, Any]]) -> Any:
    """evanphx/json-patch v4 Patch.Apply to a copy of document; document itself when a test
    fails (json_patch.go: the patch must not be applied)."""
    doc = _Document(document)
    try:
        for operation in operations:
            _APPLY.get(str(operation.get("op")), _unknown)(doc, operation)
    except _TestFailed:
        return document
    except _PatchError as exc:
        raise MutationError(f"JSON Patch: {exc}") from None
    return doc.root


class _Document:
    """The document being patched, copied on write: each object or array on an operation's
    path is copied (shallowly) the first time it is reached, so the caller's document is never
    changed and what no operation reaches is shared, not copied (a pod create pays for the
    containers a mutation touches, not for the whole pod)."""

    def __init__(self, root: Any) -> None:
        self.root = root
        self._owned: set[int] = set()

    def own(self, node: Any) -> Any:
        if not isinstance(node, dict | list) or id(node) in self._owned:
            return node
        copied = dict(node) if isinstance(node, dict) else list(node)
        self._owned.add(id(copied))
        return copied

    def replace_root(self, value: Any) -> None:
        self.root = value


# -- gopkg.in/evanphx/json-patch.v4 patch.go ----------------------------------------------------


class _PatchError(Exception):
    pass


class _TestFailed(_PatchError):
    pass


def _wrap(message: str, cause: str) -> _PatchError:
    """pkg/errors Wrapf: `message: cause`."""
    return _PatchError(f"{message}: {cause}")


def _decode_key(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _find_object(doc: _Document, path: str) -> tuple[Any, str] | None:
    """findObject: the container of the path's last token (the part before the first `/` is
    ignored, as v4 ignores it), or None when a step is missing, null or not a container. The
    containers on the way are the document's own copies (_Document)."""
    split = path.split("/")
    if len(split) < 2 or not isinstance(doc.root, dict | list):
        return None
    node = doc.root = doc.own(doc.root)
    for part in split[1:-1]:
        key = _decode_key(part)
        try:
            found = _get(node, key)
        except _PatchError:
            return None
        if not isinstance(found, dict | list):
            return None
        found = doc.own(found)
        _set_in(node, key, found)
        node = found
    return node, _decode_key(split[-1])


def _atoi(key: str) -> int:
    if not re.fullmatch(r"[+-]?\d+", key):
        raise _PatchError(f'strconv.Atoi: parsing "{key}": invalid syntax')
    return int(key)


def _array_index(items: list[Any], key: str, limit: int) -> int:
    index = _atoi(key)
    if index < 0:  # SupportNegativeIndices, true by default
        if index < -limit:
            raise _wrap(f"Unable to access invalid index: {index}", _INVALID_INDEX)
        index += limit
    if index >= limit:
        raise _wrap(f"Unable to access invalid index: {index}", _INVALID_INDEX)
    return index


def _get(node: Any, key: str) -> Any:
    """partialDoc.get (a missing key is None, no error) and partialArray.get."""
    if isinstance(node, dict):
        return node.get(key)
    return node[_array_index(node, key, len(node))]


def _add_to(node: Any, key: str, value: Any) -> None:
    if isinstance(node, dict):
        node[key] = value
    elif key == "-":
        node.append(value)
    else:
        try:
            index = _atoi(key)
        except _PatchError as exc:
            raise _wrap(f"value was not a proper array index: '{key}'", str(exc)) from None
        size = len(node) + 1
        if index >= size or index < -size:
            raise _wrap(f"Unable to access invalid index: {index}", _INVALID_INDEX)
        node.insert(index + size if index < 0 else index, value)


def _set_in(node: Any, key: str, value: Any) -> None:
    if isinstance(node, dict):
        node[key] = value
    else:
        node[_array_index(node, key, len(node))] = value


def _remove_from(node: Any, key: str) -> None:
    if isinstance(node, dict):
        if key not in node:
            raise _wrap(f"Unable to remove nonexistent key: {key}", _MISSING)
        del node[key]
    else:
        del node[_array_index(node, key, len(node))]


def _path(operation: Mapping[str, Any], field: str = "path") -> str:
    value = operation.get(field)
    if not isinstance(value, str):
        raise _wrap(f"operation, missing {field} field", _MISSING)
    return value


def _add(doc: _Document, operation: Mapping[str, Any]) -> None:
    path = _path(operation)
    found = _find_object(doc, path)
    if found is None:
        raise _wrap(f'add operation does not apply: doc is missing path: "{path}"', _MISSING)
    try:
        _add_to(*found, copy.deepcopy(operation.get("value")))
    except _PatchError as exc:
        raise _wrap(f"error in add for path: '{path}'", str(exc)) from None


def _remove(doc: _Document, operation: Mapping[str, Any]) -> None:
    path = _path(operation)
    found = _find_object(doc, path)
    if found is None:
        raise _wrap(f'remove operation does not apply: doc is missing path: "{path}"', _MISSING)
    try:
        _remove_from(*found)
    except _PatchError as exc:
        raise _wrap(f"error in remove for path: '{path}'", str(exc)) from None


def _replace(doc: _Document, operation: Mapping[str, Any]) -> None:
    path = _path(operation)
    value = copy.deepcopy(operation.get("value"))
    if path == "":
        if not isinstance(value, dict | list):
            raise _PatchError("replace operation value must be object or array")
        doc.replace_root(value)
        return
    found = _find_object(doc, path)
    if found is None:
        raise _wrap(f"replace operation does not apply: doc is missing path: {path}", _MISSING)
    node, key = found
    try:
        _get(node, key)
    except _PatchError:
        raise _wrap(
            f"replace operation does not apply: doc is missing key: {path}", _MISSING
        ) from None
    try:
        _set_in(node, key, value)
    except _PatchError as exc:
        raise _wrap(f"error in remove for path: '{path}'", str(exc)) from None


def _taken(doc: _Document, operation: Mapping[str, Any], kind: str) -> tuple[Any, str]:
    """The container and key of a move's or copy's `from`."""
    source = _path(operation, "from")
    found = _find_object(doc, source)
    if found is None:
        raise _wrap(
            f"{kind} operation does not apply: doc is missing from path: {source}", _MISSING
        )
    return found


def _destination(doc: _Document, operation: Mapping[str, Any], kind: str) -> tuple[Any, str]:
    path = _path(operation)
    target = _find_object(doc, path)
    if target is None:
        raise _wrap(
            f"{kind} operation does not apply: doc is missing destination path: {path}", _MISSING
        )
    return target


def _move(doc: _Document, operation: Mapping[str, Any]) -> None:
    node, key = _taken(doc, operation, "move")
    try:
        value = _get(node, key)
        _remove_from(node, key)
    except _PatchError as exc:
        raise _wrap(f"error in move for path: '{key}'", str(exc)) from None
    target = _destination(doc, operation, "move")
    try:
        _add_to(*target, value)
    except _PatchError as exc:
        raise _wrap(f"error in move for path: '{operation['path']}'", str(exc)) from None


def _copy(doc: _Document, operation: Mapping[str, Any]) -> None:
    found = _taken(doc, operation, "copy")
    try:
        value = _get(*found)
    except _PatchError as exc:
        raise _wrap(f"error in copy for from: '{operation['from']}'", str(exc)) from None
    target = _destination(doc, operation, "copy")
    try:
        _add_to(*target, copy.deepcopy(value))
    except _PatchError as exc:
        raise _wrap("error while adding value during copy", str(exc)) from None


def _test(doc: _Document, operation: Mapping[str, Any]) -> None:
    path = _path(operation)
    expected = operation.get("value")
    if path == "":
        if _same(doc.root, expected):
            return
        raise _TestFailed(f"testing value {path} failed")
    found = _find_object(doc, path)
    if found is None:
        raise _wrap(f"test operation does not apply: is missing path: {path}", _MISSING)
    try:
        actual = _get(*found)
    except _PatchError as exc:
        raise _wrap(f"error in test for path: '{path}'", str(exc)) from None
    if actual is None and expected is None:
        return
    if actual is None or expected is None or not _same(actual, expected):
        raise _TestFailed(f"testing value {path} failed")


def _same(a: Any, b: Any) -> bool:
    """lazyNode.equal: objects key by key, arrays element by element, scalars as their
    compact JSON text (so 1 and 1.5 differ, and 1 and 1.0 as JSON texts would)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict | list) or isinstance(b, dict | list):
        return False
    return json.dumps(a) == json.dumps(b)


def _unknown(doc: _Document, operation: Mapping[str, Any]) -> None:
    raise _PatchError(f"Unexpected kind: {operation.get('op')}")


_APPLY: dict[str, Callable[[_Document, Mapping[str, Any]], None]] = {
    "add": _add,
    "remove": _remove,
    "replace": _replace,
    "move": _move,
    "test": _test,
    "copy": _copy,
}
