import base64
import json

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
    parse,
    respond,
)


def test_parses_the_fields_policies_need():
    body = review(pod(), uid="abc")
    body["request"]["dryRun"] = True
    request = parse(body)
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
    """parse() builds its records with tuple.__new__, which checks no field count."""
    body = review(pod(), uid="abc")
    body["request"]["subResource"] = "status"
    request = parse(body)
    assert request == AdmissionRequest(
        "abc", GroupVersionKind("", "v1", "Pod"), GroupVersionResource("", "v1", "pods"),
        "CREATE", "status", "team-a", "train-0", UserInfo("alice", ("system:authenticated",)),
        body["request"]["object"], None, None, False)
    for record in (request, request.kind, request.resource, request.user):
        assert len(record) == len(type(record)._fields)


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda b: b.update(apiVersion="admission.k8s.io/v1beta1"), "apiVersion"),
        (lambda b: b.update(kind="Pod"), "kind"),
        (lambda b: b.pop("request"), "request is missing"),
        (lambda b: b["request"].pop("uid"), "request.uid"),
        (lambda b: b["request"].update(uid=""), "request.uid"),
        (lambda b: b["request"].update(uid=7), "request.uid"),
        (lambda b: b["request"].update(operation="PATCH"), "request.operation"),
        (lambda b: b["request"].update(kind="Pod"), "request.kind"),
        (lambda b: b["request"]["kind"].pop("version"), "request.kind.version"),
        (lambda b: b["request"].update(object=[1]), "request.object"),
        (lambda b: b["request"].update(userInfo={"groups": "admins"}), "userInfo.groups"),
        (lambda b: b["request"].update(namespace=3), "request.namespace"),
        (lambda b: b["request"].update(dryRun="yes"), "request.dryRun"),
    ],
)
def test_refuses_a_malformed_review_naming_the_field(mutate, needle):
    body = review(pod())
    mutate(body)
    with pytest.raises(ReviewError, match=needle):
        parse(body)


@pytest.mark.parametrize(("key", "wrong", "message"), [
    ("subResource", 1, "request.subResource must be a string"),
    ("namespace", ["a"], "request.namespace must be a string"),
    ("name", {}, "request.name must be a string"),
    ("object", "pod", "request.object must be an object or null"),
    ("oldObject", [], "request.oldObject must be an object or null"),
    ("options", 0, "request.options must be an object or null"),
    ("dryRun", 1, "request.dryRun must be true or false"),
])
def test_each_optional_field_of_the_wrong_type_is_named(key, wrong, message):
    body = review(pod())
    body["request"][key] = wrong
    with pytest.raises(ReviewError) as info:
        parse(body)
    assert str(info.value) == message


def test_the_first_wrong_optional_field_is_the_one_named():
    body = review(pod())
    body["request"].update(name=1, dryRun="no")
    with pytest.raises(ReviewError, match=r"request\.name must be a string"):
        parse(body)


json_values = st.none() | st.booleans() | st.integers() | st.text(max_size=3) | st.lists(
    st.integers(), max_size=2) | st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)
ENVELOPE_FIELDS = ["uid", "operation", "subResource", "namespace", "name", "object",
                   "oldObject", "options", "dryRun"]
OPTIONAL_TYPES = {"subResource": str, "namespace": str, "name": str, "object": dict,
                  "oldObject": dict, "options": dict, "dryRun": bool}


@settings(max_examples=500, deadline=None)
@given(changes=st.dictionaries(st.sampled_from(ENVELOPE_FIELDS), json_values | st.just(...),
                               max_size=4))
def test_any_mix_of_field_types_is_parsed_or_refused_naming_the_first_wrong_field(changes):
    """parse() checks the fields in one expression and _refusal() explains a refusal: the two
    must agree on every value (a disagreement would raise AssertionError, an HTTP 500)."""
    body = review(pod())
    for key, value in changes.items():
        if value is ...:
            body["request"].pop(key, None)
        else:
            body["request"][key] = value
    try:
        request = parse(body)
    except ReviewError as exc:
        wrong = next(key for key in ENVELOPE_FIELDS if f"request.{key} " in str(exc))
        # Every field before the one named is fine on its own.
        for key in ENVELOPE_FIELDS[:ENVELOPE_FIELDS.index(wrong)]:
            alone = review(pod())
            if key in changes:
                alone["request"][key] = body["request"].get(key)
            parse(alone)
    else:
        fields = body["request"]
        assert isinstance(fields["uid"], str) and fields["uid"] == request.uid
        assert fields["operation"] in ("CREATE", "UPDATE", "DELETE", "CONNECT")
        for key, kind in OPTIONAL_TYPES.items():
            assert fields.get(key) is None or isinstance(fields[key], kind), key


def test_optional_fields_may_be_null_or_absent():
    body = review(pod())
    body["request"].update(subResource=None, oldObject=None, dryRun=None)
    body["request"].pop("namespace", None)
    request = parse(body)
    assert (request.sub_resource, request.namespace, request.dry_run) == ("", "", False)


def test_user_groups_must_all_be_strings():
    body = review(pod())
    body["request"]["userInfo"] = {"username": "alice", "groups": ["a", 2]}
    with pytest.raises(ReviewError, match=r"userInfo\.groups must be a list of strings"):
        parse(body)
    body["request"]["userInfo"]["groups"] = ["a", "b"]
    assert parse(body).user.groups == ("a", "b")


def test_refuses_a_body_that_is_not_an_object():
    with pytest.raises(ReviewError, match="JSON object"):
        parse([1, 2])


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
