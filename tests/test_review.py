import base64
import json

import pytest

from tests.builders import pod, review
from webhook import decision
from webhook.review import ReviewError, parse, respond


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
