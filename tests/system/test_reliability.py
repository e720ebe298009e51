"""Reliability under faults: the API server failing, slow or gone while the sidecar holds
pending writes and while the webhook's caches watch it; TLS peers the webhook must refuse or
that must refuse it, and a certificate swap under load."""

import asyncio
import datetime
import ssl
import warnings

import aiohttp
import pytest
from cryptography import x509

from tests.builders import container, pod, review
from tests.conftest import HOSTNAME, NAMESPACE, SERVICE
from tests.outage import Outage
from volcano_guard.base.kubeconfig import Cluster
from volcano_guard.base.listen import Listen
from volcano_guard.base.tls import client_context, server_context
from volcano_guard.certs.generate import (
    cert_pem,
    generate,
    issue_ca,
    issue_leaf,
    key_pem,
    write_pem,
)
from volcano_guard.certs.reload import CertReloader
from volcano_guard.certs.rotate import rotate
from volcano_guard.sidecar.service import SidecarSettings
from volcano_guard.sidecar.service import running as sidecar_running
from volcano_guard.webhook.caches import Caches
from volcano_guard.webhook.config import config_from_dict
from volcano_guard.webhook.server import running
from volcano_guard_sandbox.apiserver.faults import FaultRule
from volcano_guard_sandbox.apiserver.resources import ResourceType, find
from volcano_guard_sandbox.apiserver.runner import running as sandbox_running

pytestmark = pytest.mark.reliability
Q = "/apis/scheduling.volcano.sh/v1beta1/queues"
_QUEUES = find("scheduling.volcano.sh", "v1beta1", "queues")
assert _QUEUES is not None
QUEUES: ResourceType = _QUEUES


def without_node_cache():
    """A config whose policies need no node cache (the TLS tests have no cluster)."""
    return config_from_dict(
        {"policies": {"nodeName": {"mode": "off", "bindingGuard": {"mode": "off"}}}}
    )


@pytest.mark.slow  # a fault run
async def test_pending_writes_survive_an_api_server_outage_and_converge_after_it():
    async with sandbox_running() as sandbox:
        sandbox.seed(
            [
                {
                    "apiVersion": "scheduling.volcano.sh/v1beta1",
                    "kind": "Queue",
                    "metadata": {"name": "q1"},
                    "spec": {"weight": 1},
                }
            ]
        )
        outage = Outage(int(sandbox.url.rsplit(":", 1)[1]))
        await outage.up()
        settings = SidecarSettings(listen_port=0, metrics_port=0, flush_interval=0.2)
        async with (
            sidecar_running(Cluster(f"http://127.0.0.1:{outage.port}"), settings) as sc,
            aiohttp.ClientSession() as session,
        ):
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


async def converge_after_outage(outage_seconds: float, queues: int = 5) -> float:
    """Seconds from the API server's return until every queue's last write has landed, after
    an outage of outage_seconds during which the writer kept writing."""
    async with sandbox_running() as sandbox:
        sandbox.seed(
            [
                {
                    "apiVersion": "scheduling.volcano.sh/v1beta1",
                    "kind": "Queue",
                    "metadata": {"name": f"q{n}"},
                    "spec": {"weight": 1},
                }
                for n in range(queues)
            ]
        )
        outage = Outage(int(sandbox.url.rsplit(":", 1)[1]))
        await outage.up()
        settings = SidecarSettings(listen_port=0, metrics_port=0, flush_interval=0.5)
        async with (
            sidecar_running(Cluster(f"http://127.0.0.1:{outage.port}"), settings) as sc,
            aiohttp.ClientSession() as session,
        ):
            bases = []
            for n in range(queues):
                async with session.get(f"{sc.url}{Q}/q{n}") as response:
                    bases.append(await response.json())
            await outage.down()
            loop = asyncio.get_running_loop()
            ends = loop.time() + outage_seconds
            count = 0
            while loop.time() < ends:  # the writer keeps writing while the API server is gone
                for n, base in enumerate(bases):
                    body = {**base, "status": {"pending": count}}
                    async with session.put(f"{sc.url}{Q}/q{n}/status", json=body) as response:
                        assert response.status == 200
                count += 1
                await asyncio.sleep(0.25)
            await outage.up()
            back = loop.time()
            wanted = {"pending": count - 1}
            while any(
                sandbox.store.get(QUEUES, "", f"q{n}").object().get("status") != wanted
                for n in range(queues)
            ):
                assert loop.time() - back < 60, "pending writes never landed"
                await asyncio.sleep(0.05)
            landed = loop.time() - back
        await outage.down()
    return landed


@pytest.mark.slow
async def test_pending_writes_land_within_5_s_of_the_api_servers_return():
    landed = await converge_after_outage(8.0)
    print(f"\nafter an 8 s outage, every pending write landed {landed:.2f} s after the return")
    assert landed < 5.0


@pytest.mark.slow
@pytest.mark.parametrize("outage_seconds", [15.0, 40.0])
async def test_pending_writes_land_within_5_s_of_the_return_however_long_the_outage(outage_seconds):
    """By then each object's own backoff has grown to 8-30 s; the probe finds the return."""
    landed = await converge_after_outage(outage_seconds)
    print(
        f"\nafter a {outage_seconds:.0f} s outage, every pending write landed {landed:.2f} s "
        "after the return"
    )
    assert landed < 5.0


def write_pair(directory, now, not_before_days, not_after_days, names):
    start = now + datetime.timedelta(days=not_before_days)
    end = now + datetime.timedelta(days=not_after_days)
    ca_key, ca_cert = issue_ca("test-ca", start, end)
    key, cert = issue_leaf(ca_key, ca_cert, names, start, end)
    write_pem(directory / "ca.crt", cert_pem(ca_cert))
    write_pem(directory / "tls.crt", cert_pem(cert))
    write_pem(directory / "tls.key", key_pem(key), private=True)
    return directory / "ca.crt", directory / "tls.crt", directory / "tls.key"


@pytest.mark.parametrize(
    ("start", "end", "names", "needle"),
    [
        (-30, -1, (HOSTNAME,), "expired"),
        (-1, 30, ("someone-else.example.com",), "match"),
    ],
)
async def test_clients_refuse_an_expired_or_misnamed_serving_cert(
    tmp_path, start, end, names, needle
):
    now = datetime.datetime.now(datetime.UTC)
    ca, cert, key = write_pair(tmp_path, now, start, end, names)
    config = without_node_cache()
    async with running(
        config, Listen("127.0.0.1", 0), Listen("127.0.0.1", 0), server_context(cert, key)
    ) as (port, _):
        with pytest.raises(ssl.SSLCertVerificationError) as info:
            await asyncio.open_connection(
                "127.0.0.1", port, ssl=client_context(ca), server_hostname=HOSTNAME
            )
    assert needle in str(info.value).lower()


def node_guard_config(fail_closed: bool):
    return config_from_dict(
        {
            "failClosed": fail_closed,
            "policies": {
                "nodeName": {
                    "managedNodeSelectors": ["volcano.sh/role:train"],
                    "bindingGuard": {"mode": "off"},
                },
                "podGroups": {"stampGenerationId": False, "deleteGuard": {"mode": "off"}},
                "queues": {"mode": "off"},
            },
        }
    )


async def _eventually(check, seconds: float) -> bool:
    for _ in range(int(seconds / 0.1)):
        if await check():
            return True
        await asyncio.sleep(0.1)
    return False


@pytest.mark.slow  # a fault run
@pytest.mark.parametrize("fail_closed", [True, False])
async def test_webhook_turns_unready_while_the_api_server_is_gone_and_decisions_follow_fail_closed(
    certs, fail_closed
):
    async with sandbox_running() as sandbox:
        sandbox.seed([{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "cpu-1"}}])
        outage = Outage(int(sandbox.url.rsplit(":", 1)[1]))
        await outage.up()
        config = node_guard_config(fail_closed)
        caches = Caches.for_config(config, Cluster(f"http://127.0.0.1:{outage.port}"))
        caches.start()
        obj = pod(container("c", requests={"cpu": "1", "memory": "1Gi"}))
        obj["spec"]["nodeName"] = "cpu-1"
        body = review(obj)
        try:
            async with (
                running(
                    config,
                    Listen("127.0.0.1", 0),
                    Listen("127.0.0.1", 0),
                    server_context(certs.cert_file, certs.key_file),
                    caches=caches,
                ) as (port, _),
                aiohttp.ClientSession(
                    connector=aiohttp.TCPConnector(ssl=client_context(certs.ca_file))
                ) as http,
            ):
                base = f"https://127.0.0.1:{port}"

                async def ready() -> bool:
                    async with http.get(f"{base}/readyz", server_hostname=HOSTNAME) as answer:
                        return answer.status == 200

                async def allowed() -> tuple[bool, str]:
                    async with http.post(
                        f"{base}/validate", json=body, server_hostname=HOSTNAME
                    ) as answer:
                        response = (await answer.json())["response"]
                    return response["allowed"], response.get("status", {}).get("message", "")

                assert await _eventually(ready, 10)
                assert await allowed() == (True, "")  # cpu-1 is known and not Volcano's

                await outage.down()
                assert await _eventually(lambda: _not(ready()), 10), "still ready without an API"
                async with http.get(f"{base}/readyz", server_hostname=HOSTNAME) as answer:
                    assert "cache lost the API server" in await answer.text()
                verdict, message = await allowed()
                assert verdict is (not fail_closed)
                if fail_closed:
                    assert "not synced" in message and "unreachable" in message

                await outage.up()
                assert await _eventually(ready, 20), "not ready again after the API came back"
                assert await allowed() == (True, "")
        finally:
            caches.stop()
            await outage.down()


async def _not(answer) -> bool:
    return not await answer


QUEUE_NAMES = [f"q{i}" for i in range(5)]


async def _write_through_a_fault(fault: str) -> None:
    """A writer keeps writing every queue's status through the sidecar while the upstream has
    the fault; afterwards every queue must hold the last value written (none lost)."""
    async with sandbox_running() as sandbox:
        sandbox.seed(
            [
                {
                    "apiVersion": "scheduling.volcano.sh/v1beta1",
                    "kind": "Queue",
                    "metadata": {"name": name},
                    "spec": {"weight": 1},
                }
                for name in QUEUE_NAMES
            ]
        )
        outage = Outage(int(sandbox.url.rsplit(":", 1)[1]))
        await outage.up()
        settings = SidecarSettings(listen_port=0, metrics_port=0, flush_interval=0.2)
        async with (
            sidecar_running(Cluster(f"http://127.0.0.1:{outage.port}"), settings) as sc,
            aiohttp.ClientSession() as session,
        ):
            bases = {}
            for name in QUEUE_NAMES:
                async with session.get(f"{sc.url}{Q}/{name}") as response:
                    bases[name] = await response.json()

            async def write_all(n: int) -> None:
                for name in QUEUE_NAMES:
                    body = {**bases[name], "status": {"pending": n, "running": n % 7}}
                    async with session.put(f"{sc.url}{Q}/{name}/status", json=body) as answer:
                        assert answer.status == 200, await answer.text()

            await write_all(0)
            if fault == "down":
                await outage.down()
            else:
                sandbox.set_faults(
                    {
                        "503": FaultRule(verbs=frozenset({"patch"}), error_rate=1.0),
                        "429": FaultRule(verbs=frozenset({"patch"}), throttle_rate=1.0),
                        "slow": FaultRule(verbs=frozenset({"patch"}), latency=2.0),
                    }[fault]
                )
            window = 10.0 if fault == "down" else 4.0
            for n in range(1, int(window / 0.1) + 1):
                await write_all(n)
                await asyncio.sleep(0.1)
            last = n
            if fault == "down":
                await outage.up()
            else:
                sandbox.set_faults()
            want = {"pending": last, "running": last % 7}

            def converged() -> bool:
                return all(
                    sandbox.store.get(QUEUES, "", name).object().get("status") == want
                    for name in QUEUE_NAMES
                )

            for _ in range(200):
                if converged():
                    break
                await asyncio.sleep(0.1)
            assert converged(), {
                name: sandbox.store.get(QUEUES, "", name).object().get("status")
                for name in QUEUE_NAMES
            }
        await outage.down()


@pytest.mark.slow
async def test_no_pending_write_is_lost_through_upstream_errors_throttling_slowness_or_outage():
    # The four faults run side by side, each on its own sandbox, to keep the suite short.
    await asyncio.gather(
        *(_write_through_a_fault(fault) for fault in ("503", "429", "slow", "down"))
    )


def _legacy_client(maximum: ssl.TLSVersion) -> ssl.SSLContext:
    """A client willing to speak old TLS (security level 0, so OpenSSL itself allows it)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    context.set_ciphers("DEFAULT:@SECLEVEL=0")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # TLSv1/1.1 are deprecated names
        context.minimum_version = ssl.TLSVersion.TLSv1
        context.maximum_version = maximum
    return context


async def test_a_tls_1_1_client_is_refused_and_the_same_client_on_tls_1_2_is_served(certs):
    config = without_node_cache()
    async with running(
        config,
        Listen("127.0.0.1", 0),
        Listen("127.0.0.1", 0),
        server_context(certs.cert_file, certs.key_file),
    ) as (port, _):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            old = _legacy_client(ssl.TLSVersion.TLSv1_1)
        # The server hangs up on the hello (a client-side refusal would be "no protocols").
        with pytest.raises((ssl.SSLError, ConnectionResetError)) as info:
            _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=old)
            writer.close()
        assert "NO_PROTOCOLS_AVAILABLE" not in str(info.value)
        _, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=_legacy_client(ssl.TLSVersion.TLSv1_2)
        )
        assert writer.get_extra_info("ssl_object").version() == "TLSv1.2"
        writer.close()


@pytest.mark.slow  # a fault run under load
async def test_a_certificate_swap_under_load_fails_no_request(tmp_path):
    made = generate(SERVICE, NAMESPACE, tmp_path, days=365)  # the CA stays; the leaf renews
    tls = server_context(made.cert_file, made.key_file)
    reloader = CertReloader(tls, made.cert_file, made.key_file)
    config = without_node_cache()
    body = review(pod(container("c", requests={"cpu": "1", "memory": "1Gi"})))
    answered, failures, serials = [], [], set()
    async with running(config, Listen("127.0.0.1", 0), Listen("127.0.0.1", 0), tls) as (port, _):
        watcher = asyncio.create_task(reloader.watch(interval=0.05))

        async def client(keep_alive: bool, until: float) -> None:
            connector = aiohttp.TCPConnector(
                ssl=client_context(made.ca_file), force_close=not keep_alive
            )
            async with aiohttp.ClientSession(connector=connector) as session:
                while asyncio.get_running_loop().time() < until:
                    try:
                        async with session.post(
                            f"https://127.0.0.1:{port}/validate",
                            json=body,
                            server_hostname=HOSTNAME,
                        ) as response:
                            answered.append(response.status)
                            await response.read()
                    except (aiohttp.ClientError, ssl.SSLError, OSError) as exc:
                        failures.append(repr(exc))

        async def handshakes(until: float) -> None:
            """Which certificate a new connection gets, every 20 ms."""
            while asyncio.get_running_loop().time() < until:
                _, writer = await asyncio.open_connection(
                    "127.0.0.1", port, ssl=client_context(made.ca_file), server_hostname=HOSTNAME
                )
                der = writer.get_extra_info("ssl_object").getpeercert(True)
                serials.add(x509.load_der_x509_certificate(der).serial_number)
                writer.close()
                await asyncio.sleep(0.02)

        until = asyncio.get_running_loop().time() + 3.0
        load = [asyncio.create_task(client(keep_alive=n % 2 == 0, until=until)) for n in range(8)]
        load.append(asyncio.create_task(handshakes(until)))
        await asyncio.sleep(1.0)
        assert rotate(tmp_path, force_leaf=True).leaf_renewed  # a new serving cert, mid-load
        await asyncio.gather(*load)
        watcher.cancel()
    assert failures == []
    assert set(answered) == {200} and len(answered) > 300
    assert reloader.reloads == 1
    assert len(serials) == 2, "new connections did not see the new certificate"
