import base64
import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders import pod, review
from volcano_guard.webhook import decision
from volcano_guard.webhook.review import (
    AdmissionRequest,
    GroupVersionKind,
    GroupVersionResource,
    ReviewError,
    UserInfo,
    from_document,
    parse,
    respond,
)


def wire(body: object) -> bytes:
    return json.dumps(body).encode()


def test_parses_the_fields_policies_need():
    body = review(pod(), uid="abc")
    body["request"]["dryRun"] = True
    request = parse(wire(body))
    assert request.uid == "abc"
    assert (request.kind.group, request.kind.kind) == ("", "Pod")
    assert request.resource.resource == "pods"
    assert request.operation == "CREATE"
    assert request.namespace == "team-a"
    assert request.user.username == "alice"
    assert request.user.groups == ("system:authenticated",)
    assert request.object["metadata"]["name"] == "train-0"
    assert request.dry_run is True


def test_parsed_records_equal_ones_built_by_their_constructors():
    body = review(pod(), uid="abc")
    body["request"]["subResource"] = "status"
    request = parse(wire(body))
    assert request == AdmissionRequest(
        "abc",
        GroupVersionKind("", "v1", "Pod"),
        GroupVersionResource("", "v1", "pods"),
        "CREATE",
        "status",
        "team-a",
        "train-0",
        UserInfo("alice", ("system:authenticated",)),
        body["request"]["object"],
        None,
        None,
        False,
    )


def test_a_decoded_document_is_checked_as_the_wire_is():
    body = review(pod(), uid="abc")
    assert from_document(body) == parse(wire(body))
    body["request"]["uid"] = 7
    with pytest.raises(ReviewError, match=r"\$\.request\.uid"):
        from_document(body)


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda b: b.update(apiVersion="admission.k8s.io/v1beta1"), "apiVersion"),
        (lambda b: b.update(kind="Pod"), "kind"),
        (lambda b: b.pop("request"), "request is missing"),
        (lambda b: b["request"].pop("uid"), r"field `uid` - at `\$\.request`"),
        (lambda b: b["request"].update(uid=""), r"\$\.request\.uid"),
        (lambda b: b["request"].update(uid=7), r"\$\.request\.uid"),
        (lambda b: b["request"].update(operation="PATCH"), r"\$\.request\.operation"),
        (lambda b: b["request"].update(kind="Pod"), r"\$\.request\.kind"),
        (lambda b: b["request"]["kind"].pop("version"), r"`version` - at `\$\.request\.kind`"),
        (lambda b: b["request"].update(object=[1]), r"\$\.request\.object"),
        (
            lambda b: b["request"].update(userInfo={"groups": "admins"}),
            r"\$\.request\.userInfo\.groups",
        ),
        (lambda b: b["request"].update(namespace=3), r"\$\.request\.namespace"),
        (lambda b: b["request"].update(dryRun="yes"), r"\$\.request\.dryRun"),
    ],
)
def test_refuses_a_malformed_review_naming_the_field(mutate, needle):
    body = review(pod())
    mutate(body)
    with pytest.raises(ReviewError, match=needle):
        parse(wire(body))


@pytest.mark.parametrize(
    ("key", "wrong", "message"),
    [
        ("subResource", 1, "Expected `str`, got `int` - at `$.request.subResource`"),
        ("namespace", ["a"], "Expected `str`, got `array` - at `$.request.namespace`"),
        ("name", {}, "Expected `str`, got `object` - at `$.request.name`"),
        ("object", "pod", "Expected `object | null`, got `str` - at `$.request.object`"),
        ("oldObject", [], "Expected `object | null`, got `array` - at `$.request.oldObject`"),
        ("options", 0, "Expected `object | null`, got `int` - at `$.request.options`"),
        ("dryRun", 1, "Expected `bool`, got `int` - at `$.request.dryRun`"),
    ],
)
def test_each_optional_field_of_the_wrong_type_is_named(key, wrong, message):
    body = review(pod())
    body["request"][key] = wrong
    with pytest.raises(ReviewError) as info:
        parse(wire(body))
    assert str(info.value) == f"body is not an AdmissionReview: {message}"


json_values = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.text(max_size=3)
    | st.lists(st.integers(), max_size=2)
    | st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)
)
ENVELOPE_FIELDS = [
    "uid",
    "operation",
    "subResource",
    "namespace",
    "name",
    "object",
    "oldObject",
    "options",
    "dryRun",
]
# What each field may hold, as the API server's Go types define it.
ALLOWED = {
    "uid": lambda v: isinstance(v, str) and v != "",
    "operation": lambda v: v in ("CREATE", "UPDATE", "DELETE", "CONNECT"),
    **dict.fromkeys(("subResource", "namespace", "name"), lambda v: isinstance(v, str)),
    **dict.fromkeys(("object", "oldObject", "options"), lambda v: v is None or isinstance(v, dict)),
    "dryRun": lambda v: isinstance(v, bool),
}
REQUIRED = {"uid", "operation"}


@settings(max_examples=500, deadline=None)
@given(
    changes=st.dictionaries(
        st.sampled_from(ENVELOPE_FIELDS), json_values | st.just(...), max_size=4
    )
)
def test_any_mix_of_field_types_is_parsed_or_refused_naming_a_wrong_field(changes):
    """Parsed exactly when every field holds what the API's types allow; a refusal names a
    field that does not."""
    body = review(pod())
    for key, value in changes.items():
        if value is ...:
            body["request"].pop(key, None)
        else:
            body["request"][key] = value
    fields = body["request"]
    wrong = {
        key
        for key in ENVELOPE_FIELDS
        if (key not in fields and key in REQUIRED)
        or (key in fields and not ALLOWED[key](fields[key]))
    }
    try:
        request = parse(wire(body))
    except ReviewError as exc:
        named = {
            key for key in wrong if f"$.request.{key}`" in str(exc) or f"field `{key}`" in str(exc)
        }
        assert named, (str(exc), wrong)
    else:
        assert not wrong
        assert request.uid == fields["uid"] and request.operation == fields["operation"]


def test_optional_fields_may_be_absent_and_the_raw_objects_null():
    body = review(pod())
    body["request"].update(oldObject=None, options=None)
    for key in ("namespace", "subResource", "dryRun"):
        body["request"].pop(key, None)
    request = parse(wire(body))
    assert (request.sub_resource, request.namespace, request.dry_run) == ("", "", False)
    assert (request.old_object, request.options) == (None, None)


def test_a_string_field_is_never_null_as_the_api_server_omits_it():
    body = review(pod())
    body["request"]["subResource"] = None
    with pytest.raises(ReviewError, match=r"got `null` - at `\$\.request\.subResource`"):
        parse(wire(body))


def test_user_groups_must_all_be_strings():
    body = review(pod())
    body["request"]["userInfo"] = {"username": "alice", "groups": ["a", 2]}
    with pytest.raises(ReviewError, match=r"\$\.request\.userInfo\.groups\[1\]"):
        parse(wire(body))
    body["request"]["userInfo"]["groups"] = ["a", "b"]
    assert parse(wire(body)).user.groups == ("a", "b")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"[1, 2]", "body is not an AdmissionReview: Expected `object`, got `array`"),
        (b'{"kind": ', "body is not valid JSON: Input data was truncated"),
        (b'{"kind": "\xff"}', "body is not valid JSON"),
        (b'{"kind": "\\ud800"}', "body is not valid JSON"),
        (b'{"request": {"object": ' * 3000, "nested too deeply"),
    ],
)
def test_refuses_a_body_that_is_not_a_json_object_saying_why(body, message):
    with pytest.raises(ReviewError, match=re.escape(message)):
        parse(body)


def test_response_echoes_uid_and_encodes_patch_as_base64_jsonpatch():
    ops = [{"op": "add", "path": "/a", "value": 1}]
    answer = respond("uid-1", decision.patched(ops))
    assert answer["apiVersion"] == "admission.k8s.io/v1"
    assert answer["kind"] == "AdmissionReview"
    response = answer["response"]
    assert response["uid"] == "uid-1"
    assert response["allowed"] is True
    assert response["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(response["patch"])) == ops


def test_denial_carries_status_403_and_the_message():
    response = respond("u", decision.denied("no cpu request"))["response"]
    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    assert response["status"]["message"] == "no cpu request"
    assert "patch" not in response


def test_combine_denies_if_any_denies_and_keeps_warnings():
    combined = decision.combine(
        [
            decision.with_warnings(decision.allowed(), ["w1"]),
            decision.denied("first"),
            decision.denied("second"),
            decision.with_audit_annotation(decision.allowed(), "p", "v"),
        ]
    )
    assert not combined.allowed
    assert combined.message == "first; second"
    assert combined.warnings == ("w1",)
    assert combined.audit_annotations == (("p", "v"),)
