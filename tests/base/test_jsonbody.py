import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from volcano_guard.base.jsonbody import MAX_DEPTH, BodyError, decode, decode_yaml, nesting_depth


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


@pytest.mark.slow  # a fuzz run, 400 documents
@settings(max_examples=400, deadline=None)
@given(document=_JSON, ensure_ascii=st.booleans())
def test_byte_level_depth_matches_the_decoded_tree(document, ensure_ascii):
    body = json.dumps(document, ensure_ascii=ensure_ascii).encode()
    assert nesting_depth(body, limit=MAX_DEPTH) == _tree_depth(document)


def test_depth_scan_sees_through_brackets_and_escapes_in_strings():
    # A string that closes every bracket must not hide the real nesting around it.
    deep = "[" * 60 + json.dumps(']]]]]\\"}}}}') + "]" * 60
    body = ("[" * 50 + deep + "]" * 50).encode()
    assert nesting_depth(body, limit=MAX_DEPTH) > MAX_DEPTH
    with pytest.raises(BodyError, match="nested deeper"):
        decode(body)


def test_decode_yaml_reads_an_apply_patch():
    body = b"apiVersion: v1\nstatus:\n  allocated: {cpu: '2'}\n  pending: 3\n"
    assert decode_yaml(body) == {
        "apiVersion": "v1",
        "status": {"allocated": {"cpu": "2"}, "pending": 3},
    }


def test_decode_yaml_gives_the_json_values_kubernetes_yaml_decoder_gives():
    # sigs.k8s.io/yaml: go-yaml v2 into interface{} keeps a timestamp-like scalar a string,
    # resolves an integer past 64 bits as a float; convertToJSONableObject makes keys strings.
    body = b"day: 2026-01-01\nat: 2026-11-27T11:52:54Z\n1: one\nbig: 1180591620717411303424\n"
    assert decode_yaml(body) == {
        "day": "2026-01-01",
        "at": "2026-11-27T11:52:54Z",
        "1": "one",
        "big": 1.1805916207174113e21,
    }


@pytest.mark.parametrize(
    "value", [b".nan", b"-.inf", b"!!binary aGVsbG8=", b"!!timestamp 2026-01-01"]
)
def test_decode_yaml_refuses_a_value_json_has_no_form_for(value):
    with pytest.raises(BodyError, match="JSON cannot"):
        decode_yaml(b"a: " + value)


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (b"[" * 2000 + b"]" * 2000, "nested deeper than 100 levels"),  # the parser's own bound
        (b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1), "nested deeper than 100 levels"),
        (b"a: &a [*a]", "nested deeper|aliases expand"),  # an alias cycle
        (
            b"a: &a [1, 2, 3, 4, 5, 6, 7, 8, 9, 0]\n"
            + b"".join(
                b"%c: &%c [*%c, *%c, *%c, *%c, *%c, *%c, *%c, *%c]\n"
                % ((98 + i, 98 + i) + (97 + i,) * 8)
                for i in range(6)
            ),
            "aliases expand",
        ),  # a billion-laughs bomb, 8^6 deep refs
        (b"a: [unclosed", "not valid YAML"),
    ],
)
def test_decode_yaml_refuses_deep_cyclic_and_exploding_documents(body, needle):
    with pytest.raises(BodyError, match=needle):
        decode_yaml(body)
