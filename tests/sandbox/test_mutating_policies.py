"""A MutatingAdmissionPolicy's JSONPatch mutation: compiled with the patch types, evaluated with
cel-go's costs, applied as evanphx/json-patch v4 applies it (mutating_policies)."""

from __future__ import annotations

import copy

import pytest

from volcano_guard_sandbox.apiserver import cel_cost
from volcano_guard_sandbox.apiserver.mutating_policies import (
    MutationError,
    apply_json_patch_expression,
    apply_operations,
    expression_error,
    mutation_errors,
    patch_operations,
)
from volcano_guard_sandbox.apiserver.policy_validation import PolicyInputs

POD = {
    "metadata": {"name": "p", "labels": {"x": "1"}},
    "spec": {"containers": [{"name": "a"}, {"name": "b"}]},
}


def _patched(expression: str, **inputs: object) -> object:
    return apply_json_patch_expression(expression, PolicyInputs(object=POD, **inputs))


def test_a_jsonpatch_list_is_applied_to_a_copy_of_the_object():
    patched = _patched('[JSONPatch{op: "add", path: "/metadata/labels/y", value: "2"}]')
    assert patched["metadata"]["labels"] == {"x": "1", "y": "2"}
    assert POD["metadata"]["labels"] == {"x": "1"}


def test_a_failing_test_operation_leaves_the_object_as_it_was():
    expression = """[
        JSONPatch{op: "test", path: "/metadata/labels/x", value: "other"},
        JSONPatch{op: "remove", path: "/metadata/labels/x"},
    ]"""
    assert _patched(expression) == POD


def test_escape_key_escapes_slash_and_tilde_for_a_path():
    patched = _patched(
        '[JSONPatch{op: "add", path: "/metadata/labels/" + jsonpatch.escapeKey("k8s.io/x~y"),'
        ' value: "true"}]'
    )
    assert patched["metadata"]["labels"]["k8s.io/x~y"] == "true"


def test_replace_at_the_end_of_a_list_is_refused_in_json_patch_words():
    with pytest.raises(MutationError) as refused:
        _patched('[JSONPatch{op: "replace", path: "/spec/containers/-", value: {"name": "x"}}]')
    assert str(refused.value) == (
        "JSON Patch: replace operation does not apply: doc is missing key: "
        "/spec/containers/-: missing value"
    )


def test_expressions_see_variables_params_and_request():
    operations = patch_operations(
        '[JSONPatch{op: "add", path: "/spec/n", value: variables.two + params.three},'
        ' JSONPatch{op: "add", path: "/spec/op", value: request.operation}]',
        PolicyInputs(object=POD, params={"three": 3}, request={"operation": "CREATE"}),
        variables=[{"name": "two", "expression": "2"}],
    )
    assert operations == [
        {"op": "add", "path": "/spec/n", "value": 5},
        {"op": "add", "path": "/spec/op", "value": "CREATE"},
    ]


def test_an_integral_double_is_a_json_integer_and_a_large_int_a_string():
    operations = patch_operations(
        '[JSONPatch{op: "add", path: "/a", value: [2.0, 2.5]},'
        ' JSONPatch{op: "add", path: "/b", value: 9007199254740993}]',
        PolicyInputs(object=POD),
    )
    assert [o["value"] for o in operations] == [[2, 2.5], "9007199254740993"]


def test_the_mutation_budget_is_counted_as_for_validations():
    expression = '[JSONPatch{op: "add", path: "/a", value: "x"}]'
    with pytest.raises(MutationError) as refused:
        patch_operations(expression, PolicyInputs(object=POD), budget_total=10)
    assert str(refused.value) == cel_cost.OUT_OF_BUDGET


def test_an_expression_that_is_not_a_list_of_jsonpatch_is_refused_on_write():
    assert expression_error("object.spec") == "must evaluate to list(JSONPatch) but got dyn"
    assert "expected type of field 'op'" in expression_error("[JSONPatch{op: 1}]")
    assert expression_error('[JSONPatch{op: "add", path: "/a"}]') == ""


def test_object_initializers_build_typed_values_of_any_field():
    container = """[JSONPatch{op: "add", path: "/spec/containers/-",
        value: Object.spec.containers{
            name: "sidecar",
            ports: [Object.spec.containers.ports{containerPort: 8080}],
        }}]"""
    assert expression_error(container) == ""
    patched = _patched(container)
    assert patched["spec"]["containers"][-1] == {
        "name": "sidecar",
        "ports": [{"containerPort": 8080}],
    }


def test_an_initializer_named_unlike_its_field_path_is_a_type_mismatch():
    with pytest.raises(MutationError) as refused:
        _patched(
            '[JSONPatch{op: "add", path: "/spec/containers/-", value: Object.spec.containers{'
            "ports: [Object.spec.containers.portsZ{containerPort: 1}]}}]"
        )
    assert str(refused.value) == (
        'type mismatch: unexpected type name "Object.spec.containers.portsZ", expected '
        '"Object.spec.containers.ports", which matches field name path from root Object type'
    )


def test_a_compile_error_names_object_types_as_written():
    error = expression_error('[JSONPatch{op: "add", path: "/a", value: Object.spec{a: 1}.b}]')
    assert "undefined field 'b'" in error
    assert "ObjectType" not in error


def test_a_policy_spec_is_checked_with_its_variables_typed():
    spec = {
        "variables": [{"name": "a", "expression": "1"}],
        "mutations": [
            {
                "patchType": "JSONPatch",
                "jsonPatch": {
                    "expression": '[JSONPatch{op: "add", path: "/x", value: variables.a + "s"}]'
                },
            }
        ],
    }
    (error,) = mutation_errors(spec)
    assert error.startswith('spec.mutations[0].jsonPatch.expression: Invalid value: "')
    assert "no matching overload for '_+_'" in error


@pytest.mark.parametrize(
    ("operation", "error"),
    [
        (
            {"op": "add", "path": "/nope/x", "value": 1},
            'add operation does not apply: doc is missing path: "/nope/x"',
        ),
        (
            {"op": "remove", "path": "/metadata/labels/z"},
            "error in remove for path: '/metadata/labels/z'",
        ),
        ({"op": "move", "from": "/a", "path": "/b"}, "error in move for path: 'a'"),
        ({"op": "frob", "path": "/a"}, "Unexpected kind: frob"),
        (
            {"op": "add", "path": "/spec/containers/5", "value": 1},
            "Unable to access invalid index: 5",
        ),
    ],
)
def test_json_patch_errors_name_what_failed(operation, error):
    with pytest.raises(MutationError) as refused:
        apply_operations(POD, [operation])
    assert error in str(refused.value)


def test_replace_of_a_missing_map_key_sets_it_as_v4_does():
    patched = apply_operations(POD, [{"op": "replace", "path": "/metadata/labels/y", "value": "2"}])
    assert patched["metadata"]["labels"] == {"x": "1", "y": "2"}


def test_the_callers_object_is_never_changed_even_when_a_later_operation_fails():
    original = copy.deepcopy(POD)
    operations = [
        {"op": "move", "from": "/spec/containers/0", "path": "/spec/containers/-"},
        {"op": "add", "path": "/spec/containers/0/image", "value": "x"},
        {"op": "remove", "path": "/metadata/labels/x"},
    ]
    patched = apply_operations(POD, operations)
    assert patched["spec"]["containers"] == [{"name": "b", "image": "x"}, {"name": "a"}]
    assert original == POD
    with pytest.raises(MutationError):
        apply_operations(POD, [*operations, {"op": "remove", "path": "/nope/x"}])
    assert original == POD
    untouched = apply_operations(POD, [{"op": "add", "path": "/metadata/labels/y", "value": "1"}])
    assert untouched["spec"] is POD["spec"]  # what no operation reaches is shared, not copied


def test_objects_of_different_types_or_a_jsonpatch_and_a_map_are_not_equal():
    operations = patch_operations(
        '[JSONPatch{op: "add", path: "/a", value: ['
        "dyn(Object.x{a: 1}) == dyn(Object.y{a: 1}), Object.x{a: 1} == Object.x{a: 1},"
        ' dyn(JSONPatch{op: "add"}) == dyn({"op": "add"})]}]',
        PolicyInputs(object=POD),
    )
    assert operations[0]["value"] == [False, True, False]
