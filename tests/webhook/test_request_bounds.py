"""Bounded work per request: what a body may be, and how much one answer may say."""

import gzip
import json

import orjson

from tests.builders import container, pod, review
from volcano_guard.webhook.policies.base import REPORTED_FINDINGS, reported

BARE = {"name": "c", "image": "busybox"}  # no requests: two problems (cpu, memory) each


async def test_gzipped_review_gets_415_naming_the_encoding_and_is_not_decoded(webhook):
    body = gzip.compress(json.dumps(review(pod(container("trainer")))).encode())
    response = await webhook.post(
        "/validate",
        data=body,
        headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
    )
    assert response.status == 415
    message = (await response.json())["message"]
    assert message == 'Content-Encoding "gzip" is not accepted; send the review uncompressed'


async def test_identity_content_encoding_is_served(webhook):
    body = json.dumps(review(pod(container("trainer", requests={"cpu": "1"})))).encode()
    response = await webhook.post(
        "/validate",
        data=body,
        headers={"Content-Type": "application/json", "Content-Encoding": "identity"},
    )
    assert response.status == 200


async def test_a_denial_reports_the_first_findings_and_counts_the_rest(webhook):
    obj = pod(*({**BARE, "name": f"c{i}"} for i in range(500)))
    response = await webhook.post("/validate", json=review(obj))
    assert response.status == 200
    status = (await response.json())["response"]["status"]
    message = status["message"]
    assert message.count(" request (spec.containers[") == REPORTED_FINDINGS
    assert message.startswith('Pod "team-a/train-0": container "c0" has no cpu request')
    assert message.endswith(f"; and {1000 - REPORTED_FINDINGS:,} more")


async def test_a_large_review_is_judged_off_the_loop_with_the_same_answer(webhook):
    """Over LARGE_BODY the review is decoded in a thread: the answer must not change."""
    obj = pod(*({**BARE, "name": f"c{i}"} for i in range(12_000)))
    body = orjson.dumps(review(obj, uid="big-1"))
    assert len(body) > 256 * 1024
    response = await webhook.post(
        "/validate", data=body, headers={"Content-Type": "application/json"}
    )
    assert response.status == 200
    answer = (await response.json())["response"]
    assert answer["uid"] == "big-1"
    assert answer["allowed"] is False
    assert answer["status"]["message"].endswith(f"and {24_000 - REPORTED_FINDINGS:,} more")
    assert len(await response.read()) < 8 * 1024


async def test_an_answer_over_the_size_cap_is_a_413_denial(webhook, monkeypatch):
    """A patch for thousands of containers (the fixture fills missing memory) over the cap."""
    monkeypatch.setattr("volcano_guard.webhook.server.MAX_ANSWER_BYTES", 64 * 1024)
    obj = pod(*(container(f"c{i}", requests={"cpu": "1"}) for i in range(2_000)))
    response = await webhook.post("/mutate", json=review(obj, uid="m-big"))
    assert response.status == 200
    answer = (await response.json())["response"]
    assert answer["uid"] == "m-big"
    assert answer["allowed"] is False
    assert answer["status"]["code"] == 413
    assert "over the 65,536-byte limit" in answer["status"]["message"]
    assert "patch" not in answer


def test_findings_past_the_cap_are_counted_in_one_line():
    findings = tuple(f"problem {i}" for i in range(REPORTED_FINDINGS + 5))
    shown = reported(findings)
    assert shown == (*findings[:REPORTED_FINDINGS], "and 5 more")
    assert reported(findings[:3]) == findings[:3]


async def test_mutate_refuses_to_fill_more_containers_than_an_answer_can_patch(
    webhook, monkeypatch
):
    monkeypatch.setattr("volcano_guard.webhook.policies.resource_requests.FILLED_CONTAINERS", 10)
    obj = pod(*(container(f"c{i}", requests={"cpu": "1"}) for i in range(11)))
    response = await webhook.post("/mutate", json=review(obj))
    answer = (await response.json())["response"]
    assert answer["allowed"] is False
    assert answer["status"]["message"] == (
        'Pod "team-a/train-0": has 11 containers, more than the 10 whose requests one answer '
        "can fill"
    )
    assert "patch" not in answer
