import pytest

from volcano_guard.jsonbody import MAX_DEPTH, BodyError, decode


def test_decodes_a_json_object():
    assert decode(b'{"a": [1, {"b": null}]}') == {"a": [1, {"b": None}]}


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (b"{not json", "not valid JSON"),
        (b"\xff\xfe", "not UTF-8"),
        (b'{"a": NaN}', "NaN"),
        (b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1), "nested deeper"),
        (b"[" * 100_000 + b"]" * 100_000, "nested deeper"),
    ],
)
def test_refuses_unusable_bodies_with_a_reason(body, needle):
    with pytest.raises(BodyError, match=needle):
        decode(body)


def test_accepts_nesting_up_to_the_limit():
    assert decode(b"[" * MAX_DEPTH + b"]" * MAX_DEPTH) is not None
