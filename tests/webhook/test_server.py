"""The webhook over real HTTPS: the handler contract and every edge of the transport."""

import asyncio
import base64
import json
import ssl

import aiohttp
import pytest

from tests.builders import container, pod, review
from tests.conftest import HOSTNAME, start_webhook
from volcano_guard.base.jsonpatch import apply_patch
from volcano_guard.base.tls import client_context, server_context
from volcano_guard.webhook.config import config_from_dict
from volcano_guard.webhook.server import InFlight

FULL = {"cpu": "1", "memory": "1Gi"}


async def admission(webhook, path, body):
    response = await webhook.post(path, json=body)
    assert response.status == 200, await response.text()
    return (await response.json())["response"]


async def test_health_and_readiness_probes(webhook):
    for path in ("/healthz", "/readyz"):
        response = await webhook.session.get(webhook.base + path, server_hostname=HOSTNAME)
        assert response.status == 200


async def test_denial_over_https_echoes_uid_and_carries_403(webhook):
    body = review(pod(container("trainer", requests={"memory": "1Gi"})), uid="req-42")
    response = await admission(webhook, "/validate", body)
    assert response["uid"] == "req-42"
    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    assert 'container "trainer" has no cpu request' in response["status"]["message"]


async def test_mutate_returns_a_jsonpatch_that_fills_defaults(webhook):
    obj = pod(container("trainer", requests={"cpu": "1"}))
    response = await admission(webhook, "/mutate", review(obj, uid="m-1"))
    assert response["uid"] == "m-1"
    assert response["patchType"] == "JSONPatch"
    patch = json.loads(base64.b64decode(response["patch"]))
    patched = apply_patch(obj, patch)
    assert patched["spec"]["containers"][0]["resources"]["requests"] == {
        "cpu": "1",
        "memory": "256Mi",
    }
    again = await admission(webhook, "/validate", review(patched))
    assert again["allowed"] is True


async def test_request_no_policy_handles_is_allowed_untouched(webhook):
    body = review(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "x", "namespace": "a"},
            "data": {},
        },
        uid="cm",
    )
    for path in ("/mutate", "/validate"):
        response = await admission(webhook, path, body)
        assert response == {"uid": "cm", "allowed": True}


async def test_client_that_does_not_trust_the_ca_is_refused(webhook, tmp_path):
    from volcano_guard.certs.generate import generate

    other = generate("other", "ns", tmp_path)
    connector = aiohttp.TCPConnector(ssl=client_context(other.ca_file))
    async with aiohttp.ClientSession(connector=connector) as session:
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await session.get(webhook.base + "/healthz", server_hostname=HOSTNAME)


async def test_certificate_does_not_match_another_hostname(webhook):
    with pytest.raises(aiohttp.ClientConnectorCertificateError):
        await webhook.session.get(webhook.base + "/healthz", server_hostname="evil.example.com")


def test_server_context_refuses_tls_below_1_2(certs):
    assert server_context(certs.cert_file, certs.key_file).minimum_version == (
        ssl.TLSVersion.TLSv1_2
    )


async def test_tls_1_2_client_is_served(webhook, certs):
    context = client_context(certs.ca_file)
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session:
        response = await session.get(webhook.base + "/healthz", server_hostname=HOSTNAME)
        assert response.status == 200


BAD_BODIES = [
    (b"not json at all", "not valid JSON"),
    (b"[1, 2, 3]", "not an AdmissionReview"),
    (json.dumps({"apiVersion": "v1", "kind": "Pod"}).encode(), 'expected "AdmissionReview"'),
    (
        json.dumps({**review(pod()), "apiVersion": "admission.k8s.io/v1beta1"}).encode(),
        "only admission.k8s.io/v1",
    ),
    (
        json.dumps({**review(pod()), "request": {**review(pod())["request"], "uid": ""}}).encode(),
        "request.uid",
    ),
    (
        json.dumps(
            review({**pod(), "spec": {"schedulerName": "volcano", "containers": 5}})
        ).encode(),
        "spec.containers must be a list",
    ),
    (b'{"request": {"object": {"a": ' + b"[" * 5000 + b"]" * 5000 + b"}}}", "nested too deeply"),
    (b'{"kind": "AdmissionReview", "x": ' + b"[" * 1100 + b"]" * 1100 + b"}", "nested too deeply"),
    (b"\xff\xfe\xfd", "not valid JSON"),
]


@pytest.mark.parametrize(("body", "needle"), BAD_BODIES)
@pytest.mark.parametrize("path", ["/validate", "/mutate"])
async def test_bad_input_gets_400_with_a_status_saying_what_is_wrong(webhook, path, body, needle):
    response = await webhook.post(path, data=body, headers={"Content-Type": "application/json"})
    assert response.status == 400
    status = await response.json()
    assert status["kind"] == "Status" and status["code"] == 400
    assert needle in status["message"]
    assert (
        await webhook.post("/validate", json=review(pod(container(requests=FULL))))
    ).status == 200


async def test_body_over_the_limit_gets_413_from_content_length(webhook):
    body = b"x" * (7 * 1024 * 1024 + 1)
    response = await webhook.post(
        "/validate", data=body, headers={"Content-Type": "application/json"}
    )
    assert response.status == 413
    assert "limit" in (await response.json())["message"]


async def test_chunked_body_over_the_limit_gets_413_before_the_body_ends(webhook, certs):
    """The body never ends; a server that read it whole would never answer."""
    port = int(webhook.base.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=client_context(certs.ca_file), server_hostname=HOSTNAME
    )
    writer.write(
        b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n"
    )
    chunk = b"%x\r\n%s\r\n" % (65536, b" " * 65536)
    for _ in range(7 * 16 + 2):  # just over 7 MiB, and no terminating chunk
        writer.write(chunk)
        await writer.drain()
    status_line = await asyncio.wait_for(reader.readline(), timeout=10)
    writer.close()
    assert status_line.startswith(b"HTTP/1.1 413"), status_line


async def test_wrong_content_type_gets_415(webhook):
    response = await webhook.post("/validate", data=b"{}", headers={"Content-Type": "text/yaml"})
    assert response.status == 415


async def test_get_on_an_admission_path_gets_405(webhook):
    response = await webhook.session.get(webhook.base + "/validate", server_hostname=HOSTNAME)
    assert response.status == 405


async def test_metrics_count_decisions_and_errors(webhook):
    await webhook.post("/validate", json=review(pod(container("x")), uid="metric-1"))
    await webhook.post("/validate", data=b"{", headers={"Content-Type": "application/json"})
    async with webhook.session.get(webhook.metrics_url) as response:
        text = await response.text()
    assert (
        'volcano_guard_admission_requests_total{decision="denied",kind="Pod",'
        'operation="CREATE",policy="resourceRequests"}'
    ) in text
    assert 'volcano_guard_admission_errors_total{reason="bad_review"}' in text
    assert "volcano_guard_admission_duration_seconds_bucket" in text


async def test_each_admission_is_counted_once_per_policy_that_applied(webhook):
    from volcano_guard.base.metrics import REGISTRY

    def sample(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(f"volcano_guard_{name}", labels) or 0.0

    def counts() -> tuple[float, float, float]:
        requests = "admission_requests_total"
        return (
            sample(
                requests,
                operation="CREATE",
                kind="Pod",
                policy="resourceRequests",
                decision="denied",
            ),
            sample(
                requests, operation="CREATE", kind="ConfigMap", policy="none", decision="allowed"
            ),
            sample("admission_duration_seconds_count"),
        )

    before = counts()
    await admission(webhook, "/validate", review(pod(container("x"))))
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    await admission(webhook, "/validate", review(config_map))
    after = counts()
    assert (after[0] - before[0], after[1] - before[1], after[2] - before[2]) == (1, 1, 2)


async def test_content_type_with_parameters_is_json_too(webhook):
    response = await webhook.post(
        "/validate",
        data=json.dumps(review(pod())).encode(),
        headers={"Content-Type": "Application/JSON; charset=utf-8"},
    )
    assert response.status == 200


async def test_policy_bug_fails_closed_without_a_500(certs, monkeypatch):
    import dataclasses

    from volcano_guard.webhook import evaluation
    from volcano_guard.webhook.policies import resource_requests

    def explode(*_):
        raise RuntimeError("boom")

    broken = dataclasses.replace(resource_requests.POLICY, validate=explode)
    monkeypatch.setattr(evaluation, "POLICIES", (broken,))  # before the app reads its checks
    async for webhook in start_webhook(config_from_dict({}), certs):
        response = await admission(webhook, "/validate", review(pod(), uid="bug"))
    assert response["uid"] == "bug"
    assert response["allowed"] is False
    assert response["status"]["code"] == 500
    assert response["status"]["reason"] == "InternalError"


async def test_concurrent_admissions_each_get_their_own_uid(webhook):
    async def one(i):
        body = review(pod(container(requests=FULL if i % 2 else {"cpu": "1"})), uid=f"c-{i}")
        return i, await admission(webhook, "/validate", body)

    results = await asyncio.gather(*(one(i) for i in range(200)))
    for i, response in results:
        assert response["uid"] == f"c-{i}"
        assert response["allowed"] is bool(i % 2)


async def test_in_flight_wait_ends_with_the_last_request_or_at_the_timeout():
    in_flight = InFlight()
    assert await in_flight.wait_idle(0.01)  # nothing started: at once
    in_flight.enter()
    in_flight.enter()
    waiting = asyncio.ensure_future(in_flight.wait_idle(5))
    await asyncio.sleep(0.01)
    in_flight.leave()
    await asyncio.sleep(0.01)
    assert not waiting.done()  # one is still in flight
    in_flight.leave()
    assert await asyncio.wait_for(waiting, 1)
    in_flight.enter()
    assert not await in_flight.wait_idle(0.05)  # never finishes: the wait gives up
    in_flight.leave()  # after a timed-out wait, leaving still works
    assert in_flight.count == 0
