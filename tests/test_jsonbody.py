import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from volcano_guard.jsonbody import MAX_DEPTH, BodyError, decode, nesting_depth


def test_decodes_a_json_object():
    assert decode(b'{"a": [1, {"b": null}]}') == {"a": [1, {"b": None}]}


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (b"{not json", "not valid JSON"),
        (b"\xff\xfe", "not UTF-8"),
        (b'{"a": NaN}', "not valid JSON: unexpected character.* column 7"),
        (b'{"a": 1e400}', "infinity"),
        (b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1), "nested deeper"),
        (b"[" * 100_000 + b"]" * 100_000, "nested deeper"),
    ],
)
def test_refuses_unusable_bodies_with_a_reason(body, needle):
    with pytest.raises(BodyError, match=needle):
        decode(body)


def test_accepts_nesting_up_to_the_limit():
    assert decode(b"[" * MAX_DEPTH + b"]" * MAX_DEPTH) is not None


def _tree_depth(document: object) -> int:
    """The obvious definition, as the oracle for the byte-level scan."""
    if isinstance(document, dict):
        return 1 + max(map(_tree_depth, document.values()), default=0)
    if isinstance(document, list):
        return 1 + max(map(_tree_depth, document), default=0)
    return 0


# Strings full of the characters the byte-level scan must see through.
_TRICKY_TEXT = st.text(alphabet=st.sampled_from('[]{}"\\/ab\n\tü€😀'), max_size=12)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | _TRICKY_TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TRICKY_TEXT, inner, max_size=4),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(document=_JSON, ensure_ascii=st.booleans())
def test_byte_level_depth_matches_the_decoded_tree(document, ensure_ascii):
    body = json.dumps(document, ensure_ascii=ensure_ascii).encode()
    assert nesting_depth(body, limit=MAX_DEPTH) == _tree_depth(document)


def test_depth_scan_sees_through_brackets_and_escapes_in_strings():
    # A string that closes every bracket must not hide the real nesting around it.
    deep = "[" * 60 + json.dumps("]]]]]\\\"}}}}") + "]" * 60
    body = ("[" * 50 + deep + "]" * 50).encode()
    assert nesting_depth(body, limit=MAX_DEPTH) > MAX_DEPTH
    with pytest.raises(BodyError, match="nested deeper"):
        decode(body)
