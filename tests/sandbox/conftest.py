"""Fixtures for the admission-chain tests: a scripted webhook over real TLS, and a sandbox
(with a token file) whose service map sends webhook calls to it."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from tests.conftest import NAMESPACE, SERVICE
from tests.sandbox.admission_chain import Box, ScriptedWebhook
from volcano_guard.base.tls import server_context
from volcano_guard_sandbox.apiserver.authn import load_token_file
from volcano_guard_sandbox.apiserver.endpoints import ServiceEndpoints
from volcano_guard_sandbox.apiserver.runner import running
from volcano_guard_sandbox.apiserver.server import SandboxSettings


@pytest.fixture
async def scripted(certs) -> AsyncIterator[ScriptedWebhook]:
    hook = ScriptedWebhook()
    app = web.Application()
    app.router.add_post("/{path:.*}", hook.handle)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)  # a slow answer ends
    await runner.setup()
    site = web.TCPSite(
        runner, "127.0.0.1", 0, ssl_context=server_context(certs.cert_file, certs.key_file)
    )
    await site.start()
    hook.port = runner.addresses[0][1]
    yield hook
    await runner.cleanup()


@pytest.fixture
async def box(certs, scripted, tmp_path) -> AsyncIterator[Box]:
    tokens = tmp_path / "tokens.csv"
    tokens.write_text(
        'admin,kubernetes-admin,0,"system:masters"\nalice-token,alice,a1,"team-a,devs"\n'
    )
    settings = SandboxSettings(
        services=ServiceEndpoints({(NAMESPACE, SERVICE, 443): [("127.0.0.1", scripted.port)]}),
        tokens=load_token_file(tokens),
    )
    async with (
        running(settings=settings) as sandbox,
        aiohttp.ClientSession(headers={"Authorization": "Bearer admin"}) as session,
    ):
        sandbox.seed(
            [
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": "team-a", "labels": {"tier": "gold"}},
                }
            ]
        )
        yield Box(sandbox.url, session, base64.b64encode(certs.ca_file.read_bytes()).decode())
