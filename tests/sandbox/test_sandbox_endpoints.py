"""A webhook Service with several endpoints, as a ClusterIP leads to them: each new connection
reaches one ready endpoint, a kept-alive connection stays where it is, and a Service with no
ready endpoint refuses the connection."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from tests.conftest import NAMESPACE, SERVICE
from tests.sandbox.admission_chain import Box, ScriptedWebhook
from volcano_guard.base.tls import server_context
from volcano_guard_sandbox.apiserver.endpoints import ServiceEndpoints
from volcano_guard_sandbox.apiserver.runner import running
from volcano_guard_sandbox.apiserver.server import SandboxSettings

KEY = (NAMESPACE, SERVICE, 443)
PODS = "/api/v1/namespaces/team-a/pods"


def pod(name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


def closing(request: dict) -> web.Response:
    """An allowing answer that ends its connection, so the next call opens a new one."""
    review = {"uid": request["uid"], "allowed": True}
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": review}
    response = web.json_response(body)
    response.force_close()
    return response


async def webhook(certs) -> tuple[ScriptedWebhook, web.AppRunner]:
    hook = ScriptedWebhook()
    app = web.Application()
    app.router.add_post("/{path:.*}", hook.handle)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    tls = server_context(certs.cert_file, certs.key_file)
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls)
    await site.start()
    hook.port = runner.addresses[0][1]
    return hook, runner


@pytest.fixture
async def replicas(certs) -> AsyncIterator[list[ScriptedWebhook]]:
    started = [await webhook(certs) for _ in range(2)]
    yield [hook for hook, _ in started]
    for _, runner in started:
        await runner.cleanup()


@pytest.fixture
async def endpoints(replicas) -> ServiceEndpoints:
    return ServiceEndpoints({KEY: [("127.0.0.1", hook.port) for hook in replicas]})


@pytest.fixture
async def box(certs, endpoints) -> AsyncIterator[Box]:
    async with (
        running(settings=SandboxSettings(services=endpoints)) as sandbox,
        aiohttp.ClientSession() as session,
    ):
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}
        sandbox.seed([namespace])
        yield Box(sandbox.url, session, base64.b64encode(certs.ca_file.read_bytes()).decode())


async def test_new_connections_reach_every_ready_endpoint(box, replicas):
    for hook in replicas:
        hook.answer = closing
    await box.register("validating", "guard", box.hook("v.example.com"))
    for number in range(40):
        status, body, _ = await box.call("POST", PODS, pod(f"p{number}"))
        assert status == 201, body
    counts = [len(hook.calls) for hook in replicas]
    assert sum(counts) == 40 and min(counts) >= 5, counts  # 1 in 10^10 to miss by chance


async def test_an_endpoint_taken_out_gets_no_new_connection(box, replicas, endpoints):
    for hook in replicas:
        hook.answer = closing
    await box.register("validating", "guard", box.hook("v.example.com"))
    endpoints.set(KEY, [("127.0.0.1", replicas[1].port)])
    for number in range(10):
        status, body, _ = await box.call("POST", PODS, pod(f"p{number}"))
        assert status == 201, body
    assert [len(hook.calls) for hook in replicas] == [0, 10]


async def test_a_kept_alive_connection_stays_with_an_endpoint_taken_out(box, replicas, endpoints):
    await box.register("validating", "guard", box.hook("v.example.com"))
    status, body, _ = await box.call("POST", PODS, pod("first"))
    assert status == 201, body
    [reached] = [hook for hook in replicas if hook.calls]
    endpoints.set(KEY, [("127.0.0.1", hook.port) for hook in replicas if hook is not reached])
    status, body, _ = await box.call("POST", PODS, pod("second"))
    assert status == 201, body
    assert len(reached.calls) == 2  # through the connection it kept, as conntrack keeps it


async def test_a_service_without_ready_endpoints_refuses_the_connection(box, endpoints):
    await box.register("validating", "guard", box.hook("v.example.com"))
    endpoints.set(KEY, [])
    status, body, _ = await box.call("POST", PODS, pod("p"))
    assert status == 500
    assert body["message"] == (
        'Internal error occurred: failed calling webhook "v.example.com": failed to call '
        f'webhook: Post "https://{SERVICE}.{NAMESPACE}.svc:443/validate?timeout=10s": '
        f"dial tcp {SERVICE}.{NAMESPACE}.svc:443: connect: connection refused"
    )
