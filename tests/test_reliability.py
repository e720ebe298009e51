"""Reliability: an upstream outage while the sidecar holds pending writes, and TLS peers the
webhook must refuse or that must refuse it."""

import asyncio
import datetime
import ssl

import aiohttp
import pytest

from certs.generate import cert_pem, issue_ca, issue_leaf, key_pem, write_pem
from certs.tls import client_context, server_context
from sandbox.resources import find
from sandbox.runner import running as sandbox_running
from sidecar.service import SidecarSettings
from sidecar.service import running as sidecar_running
from tests.conftest import HOSTNAME
from volcano_guard.kubeconfig import Cluster
from volcano_guard.listen import Listen
from volcano_guard.processes import free_port
from webhook.config import config_from_dict
from webhook.server import running

pytestmark = pytest.mark.reliability
Q = "/apis/scheduling.volcano.sh/v1beta1/queues"
QUEUES = find("scheduling.volcano.sh", "v1beta1", "queues")


class Outage:
    """A TCP forwarder in front of the sandbox that can be taken down and brought back on the
    same port, as an API server restart looks to a client."""

    def __init__(self, target_port: int) -> None:
        self.target_port, self.port = target_port, free_port()
        self.server: asyncio.Server | None = None
        self.links: set[asyncio.StreamWriter] = set()

    async def up(self) -> None:
        self.server = await asyncio.start_server(self._link, "127.0.0.1", self.port)

    async def down(self) -> None:
        assert self.server is not None
        self.server.close()
        for writer in list(self.links):
            writer.close()
        await self.server.wait_closed()

    async def _link(self, reader, writer) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self.links.update({writer, up_writer})

        async def pipe(src, dst):
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))


async def test_pending_writes_survive_an_api_server_outage_and_converge_after_it():
    async with sandbox_running() as sandbox:
        sandbox.seed([{"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
                       "metadata": {"name": "q1"}, "spec": {"weight": 1}}])
        outage = Outage(int(sandbox.url.rsplit(":", 1)[1]))
        await outage.up()
        settings = SidecarSettings(listen_port=0, metrics_port=0, flush_interval=0.2)
        async with sidecar_running(Cluster(f"http://127.0.0.1:{outage.port}"), settings) as sc, \
                aiohttp.ClientSession() as session:
            async with session.get(f"{sc.url}{Q}/q1") as response:
                base = await response.json()
            await outage.down()
            for n in range(20):  # the writer keeps writing while the API server is gone
                body = {**base, "status": {"pending": n}}
                async with session.put(f"{sc.url}{Q}/q1/status", json=body) as response:
                    assert response.status == 200
                await asyncio.sleep(0.05)
            await asyncio.sleep(1.5)  # the flusher fails and backs off meanwhile
            assert "status" not in sandbox.store.get(QUEUES, "", "q1").object()
            await outage.up()
            for _ in range(150):
                obj = sandbox.store.get(QUEUES, "", "q1").object()
                if obj.get("status") == {"pending": 19}:
                    break
                await asyncio.sleep(0.1)
            assert obj.get("status") == {"pending": 19}
        await outage.down()


def write_pair(directory, now, not_before_days, not_after_days, names):
    start = now + datetime.timedelta(days=not_before_days)
    end = now + datetime.timedelta(days=not_after_days)
    ca_key, ca_cert = issue_ca("test-ca", start, end)
    key, cert = issue_leaf(ca_key, ca_cert, names, start, end)
    write_pem(directory / "ca.crt", cert_pem(ca_cert))
    write_pem(directory / "tls.crt", cert_pem(cert))
    write_pem(directory / "tls.key", key_pem(key), private=True)
    return directory / "ca.crt", directory / "tls.crt", directory / "tls.key"


@pytest.mark.parametrize(("start", "end", "names", "needle"), [
    (-30, -1, (HOSTNAME,), "expired"),
    (-1, 30, ("someone-else.example.com",), "match"),
])
async def test_clients_refuse_an_expired_or_misnamed_serving_cert(tmp_path, start, end, names,
                                                                   needle):
    now = datetime.datetime.now(datetime.UTC)
    ca, cert, key = write_pair(tmp_path, now, start, end, names)
    config = config_from_dict({"policies": {"nodeName": {"mode": "off",
                                                          "bindingGuard": {"mode": "off"}}}})
    async with running(config, Listen("127.0.0.1", 0), Listen("127.0.0.1", 0),
                       server_context(cert, key)) as (port, _):
        with pytest.raises(ssl.SSLCertVerificationError) as info:
            await asyncio.open_connection("127.0.0.1", port, ssl=client_context(ca),
                                          server_hostname=HOSTNAME)
    assert needle in str(info.value).lower()
