import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from volcano_guard.base import jsonpatch
from volcano_guard.base.jsonpatch import (
    MAX_OPERATIONS,
    JsonPatchError,
    JsonPatchTooLarge,
    apply_patch,
)


def test_pointer_escapes_slash_and_tilde():
    assert jsonpatch.pointer("metadata", "annotations", "volcano-guard.io/x~y") == (
        "/metadata/annotations/volcano-guard.io~1x~0y"
    )


def test_escaped_pointer_addresses_the_right_key():
    doc = {"metadata": {"annotations": {}}}
    path = jsonpatch.pointer("metadata", "annotations", "a/b~c")
    assert apply_patch(doc, [jsonpatch.add(path, "v")]) == {
        "metadata": {"annotations": {"a/b~c": "v"}}
    }


def test_rfc6902_appendix_operations():
    doc = {"foo": ["bar", "baz"], "x": {"y": 1}}
    patch = [
        {"op": "add", "path": "/foo/1", "value": "qux"},
        {"op": "add", "path": "/foo/-", "value": "end"},
        {"op": "remove", "path": "/foo/0"},
        {"op": "replace", "path": "/x/y", "value": 2},
        {"op": "copy", "from": "/x", "path": "/z"},
        {"op": "move", "from": "/z/y", "path": "/w"},
        {"op": "test", "path": "/w", "value": 2},
    ]
    assert apply_patch(doc, patch) == {"foo": ["qux", "baz", "end"], "x": {"y": 2}, "z": {}, "w": 2}
    assert doc == {"foo": ["bar", "baz"], "x": {"y": 1}}, "input must not be modified"


@pytest.mark.parametrize(
    "patch",
    [
        [{"op": "remove", "path": "/missing"}],
        [{"op": "replace", "path": "/a/b", "value": 1}],
        [{"op": "add", "path": "/list/5", "value": 1}],
        [{"op": "add", "path": "/list/01", "value": 1}],
        [{"op": "test", "path": "/a", "value": 2}],
        [{"op": "move", "from": "/a", "path": "/a/b"}],
        [{"op": "frobnicate", "path": "/a"}],
        [{"op": "add", "path": "a"}],
        [{"op": "add", "path": "/a"}],
        "not a list",
    ],
)
def test_invalid_operations_raise_jsonpatch_error(patch):
    with pytest.raises(JsonPatchError):
        apply_patch({"a": 1, "list": [1]}, patch)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=10,
)


@given(
    json_values,
    st.lists(
        st.dictionaries(st.sampled_from(["op", "path", "value", "from"]), json_values), max_size=4
    ),
)
def test_arbitrary_patches_apply_or_raise_jsonpatch_error(doc, patch):
    with contextlib.suppress(JsonPatchError):
        apply_patch(doc, patch)


def test_more_operations_than_kube_apiserver_applies_are_refused_as_too_large():
    # k8s.io/apiserver pkg/endpoints/handlers/patch.go: maxJSONPatchOperations, 413.
    patch = [{"op": "test", "path": "", "value": {}}] * (MAX_OPERATIONS + 1)
    with pytest.raises(JsonPatchTooLarge, match="maximum operations in a JSON patch is 10,000"):
        apply_patch({}, patch)
    assert apply_patch({}, patch[:MAX_OPERATIONS]) == {}


def test_copies_that_double_the_document_stop_at_kube_apiservers_copy_limit():
    """Each copy of /a into /a/- doubles it: 40 of them in a 2 KB patch would never end.
    pkg/server/config.go JSONPatchMaxCopyBytes, 3 MiB of copies in all."""
    patch = [{"op": "copy", "from": "/a", "path": "/a/-"} for _ in range(40)]
    with pytest.raises(JsonPatchError, match="would pass 3,145,728 bytes"):
        apply_patch({"a": ["x" * 100]}, patch)
    assert apply_patch({"a": [1]}, patch[:3]) == {"a": [1, [1], [1, [1]], [1, [1], [1, [1]]]]}
