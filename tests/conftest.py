from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from volcano_guard.base.listen import Listen
from volcano_guard.base.tls import client_context, server_context
from volcano_guard.certs.generate import GeneratedCerts, generate
from volcano_guard.webhook.caches import Caches
from volcano_guard.webhook.config import Config, config_from_dict
from volcano_guard.webhook.server import running

REPO = Path(__file__).resolve().parent.parent
SERVICE, NAMESPACE = "volcano-guard", "volcano-system"
HOSTNAME = f"{SERVICE}.{NAMESPACE}.svc"
REQUEST_TIMEOUT = 20.0


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> GeneratedCerts:
    return generate(SERVICE, NAMESPACE, tmp_path_factory.mktemp("certs"), days=2)


@dataclass
class Webhook:
    """A webhook served over real TLS, with a client that verifies its CA and hostname."""

    session: aiohttp.ClientSession
    base: str
    metrics_url: str

    async def post(self, path: str, **kwargs) -> aiohttp.ClientResponse:
        response = await self.session.post(self.base + path, server_hostname=HOSTNAME, **kwargs)
        await response.read()
        return response


async def start_webhook(
    config: Config, certs: GeneratedCerts, caches: Caches | None = None
) -> AsyncGenerator[Webhook, None]:
    tls = server_context(certs.cert_file, certs.key_file)
    # A short shutdown: after a 413 aiohttp lingers reading the unread body until it is over.
    async with running(
        config,
        Listen("127.0.0.1", 0),
        Listen("127.0.0.1", 0),
        tls,
        shutdown_timeout=1,
        caches=caches,
    ) as (port, metrics_port):
        connector = aiohttp.TCPConnector(ssl=client_context(certs.ca_file))
        timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT)  # a hung answer fails the test
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            yield Webhook(
                session, f"https://127.0.0.1:{port}", f"http://127.0.0.1:{metrics_port}/metrics"
            )


@pytest.fixture
async def webhook(certs: GeneratedCerts) -> AsyncIterator[Webhook]:
    config = config_from_dict({"policies": {"resourceRequests": {"defaults": {"memory": "256Mi"}}}})
    async for served in start_webhook(config, certs):
        yield served


class SyncWebhook:
    """The webhook and its client on a private event loop, driven from synchronous code
    (hypothesis tests cannot await). Same real TLS and hostname verification."""

    def __init__(self, config: Config, certs: GeneratedCerts, caches: Caches | None = None) -> None:
        import asyncio

        self._loop = asyncio.new_event_loop()
        self._serving = start_webhook(config, certs, caches)

    def __enter__(self) -> SyncWebhook:
        self.webhook = self._loop.run_until_complete(anext(self._serving))
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.run_until_complete(self._serving.aclose())
        self._loop.close()

    def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        async def send() -> tuple[int, bytes]:
            response = await self.webhook.post(
                path, data=body, headers={"Content-Type": "application/json"}
            )
            return response.status, await response.read()

        return self._loop.run_until_complete(send())


from tests.sandbox_fixtures import api, core, custom, kubectl, sandbox  # noqa: E402, F401
