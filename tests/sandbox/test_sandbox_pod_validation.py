"""The sandbox refuses what kube-apiserver refuses in a pod's resources, where it refuses it:
an unparsable quantity when the body is decoded (400, before any webhook), a negative quantity
or a request above its limit in the Pod's own validation (422, after the mutating webhooks and
before the validating ones)."""

from __future__ import annotations

import base64
import json
from typing import Any

from tests.sandbox.admission_chain import PODS, pod

FORMAT_WRONG = (
    'Pod in version "v1" cannot be handled as a Pod: quantities must match the '
    "regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)


def resourced(
    name: str, requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None
) -> dict[str, Any]:
    created = pod(name)
    created["spec"]["containers"][0]["resources"] = {
        key: value for key, value in (("requests", requests), ("limits", limits)) if value
    }
    return created


async def test_a_negative_request_is_invalid_with_the_apiservers_message(box):
    status, body, _ = await box.call("POST", PODS, resourced("neg", {"cpu": "-1"}))
    assert (status, body["reason"]) == (422, "Invalid")
    assert body["message"] == (
        'Pod "neg" is invalid: spec.containers[0].resources.requests[cpu]: '
        'Invalid value: "-1": must be greater than or equal to 0'
    )


async def test_a_request_above_its_limit_names_the_limit_as_kubernetes_prints_it(box):
    status, body, _ = await box.call(
        "POST", PODS, resourced("over", {"memory": "2048Mi"}, {"memory": "1.5Gi"})
    )
    assert status == 422
    assert body["message"] == (
        'Pod "over" is invalid: spec.containers[0].resources.requests: '
        'Invalid value: "2Gi": must be less than or equal to memory limit '
        "of 1536Mi"
    )


async def test_several_problems_are_listed_in_brackets(box):
    bad = resourced("two", {"cpu": "-500m"}, {"memory": "-1"})
    bad["spec"]["initContainers"] = [
        {
            "name": "init",
            "image": "busybox",
            "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}},
        }
    ]
    status, body, _ = await box.call("POST", PODS, bad)
    assert status == 422
    assert body["message"] == (
        'Pod "two" is invalid: [spec.containers[0].resources.limits[memory]: Invalid value: '
        '"-1": must be greater than or equal to 0, spec.containers[0].resources.requests[cpu]: '
        'Invalid value: "-500m": must be greater than or equal to 0, '
        # the limit defaulted into the missing request (SetDefaults_Pod), so said twice
        'spec.containers[0].resources.requests[memory]: Invalid value: "-1": must be greater '
        'than or equal to 0, spec.initContainers[0].resources.requests: Invalid value: "2": '
        "must be less than or equal to cpu limit of 1]"
    )


async def test_an_unparsable_quantity_is_a_bad_request_no_webhook_sees(box, scripted):
    await box.register("validating", "sees-all", box.hook("v.example.com", "/v"))
    await box.register("mutating", "sees-all", box.hook("m.example.com", "/m"))
    status, body, _ = await box.call("POST", PODS, resourced("typo", {"cpu": "1 core"}))
    assert (status, body["reason"], body["message"]) == (400, "BadRequest", FORMAT_WRONG)
    status, body, _ = await box.call("POST", PODS, resourced("suffix", {"memory": "32MMi"}))
    assert (status, body["message"]) == (
        400,
        'Pod in version "v1" cannot be handled as a Pod: unable to parse quantity\'s suffix',
    )
    assert scripted.calls == []


async def test_validation_judges_the_mutated_pod_before_any_validating_webhook(box, scripted):
    await box.register("validating", "sees-all", box.hook("v.example.com", "/v"))
    await box.register("mutating", "negates", box.hook("m.example.com", "/m"))
    negate = [
        {"op": "add", "path": "/spec/containers/0/resources", "value": {"requests": {"cpu": "-2"}}}
    ]
    patch = base64.b64encode(json.dumps(negate).encode()).decode()
    scripted.answer = lambda request: (
        {"allowed": True, "patchType": "JSONPatch", "patch": patch}
        if request["kind"]["kind"] == "Pod"
        else {"allowed": True}
    )
    status, body, _ = await box.call("POST", PODS, resourced("mutated", {"cpu": "1"}))
    assert status == 422 and '"-2": must be greater than or equal to 0' in body["message"]
    assert [path for path, _, _ in scripted.calls] == ["/m"]


async def test_a_pod_with_sound_quantities_is_created(box):
    status, _, _ = await box.call(
        "POST",
        PODS,
        resourced("sound", {"cpu": "500m", "memory": 1073741824}, {"cpu": "1", "memory": "1Gi"}),
    )
    assert status == 201
