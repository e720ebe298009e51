"""The webhook's connections: at the cap the idle longest makes room (a new one is refused only
when all are busy), deadlines for the handshake, the first request, a request and idle
keep-alive, and the memory an idle TLS connection costs (and gives back)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from tests.builders import container, pod, review
from tests.conftest import HOSTNAME
from tests.processes import post_review, start_cli, wait_for_log
from volcano_guard.base.connections import ConnectionLimits
from volcano_guard.base.listen import Listen
from volcano_guard.base.metrics import REGISTRY
from volcano_guard.base.tls import client_context, server_context
from volcano_guard.webhook.config import config_from_dict
from volcano_guard.webhook.server import running
from volcano_guard_sandbox.processes import memory_kib

pytestmark = pytest.mark.reliability
NO_CLUSTER = {
    "policies": {
        "nodeName": {"mode": "off", "bindingGuard": {"mode": "off"}},
        "podGroups": {"stampGenerationId": False, "deleteGuard": {"mode": "off"}},
        "queues": {"mode": "off"},
    }
}
BODY = json.dumps(review(pod(container("c", requests={"cpu": "1", "memory": "1Gi"})))).encode()
QUICK = ConnectionLimits(
    max_connections=1000,
    handshake_timeout=0.5,
    first_request_timeout=1.0,
    request_timeout=0.5,
    idle_timeout=0.8,
)


@asynccontextmanager
async def webhook(certs, limits: ConnectionLimits = QUICK) -> AsyncIterator[int]:
    config = config_from_dict({**NO_CLUSTER, "maxConnections": limits.max_connections})
    async with running(
        config,
        Listen("127.0.0.1", 0),
        Listen("127.0.0.1", 0),
        server_context(certs.cert_file, certs.key_file),
        limits=limits,
    ) as (port, _):
        yield port


async def tls_connect(certs, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(
        "127.0.0.1", port, ssl=client_context(certs.ca_file), server_hostname=HOSTNAME
    )


async def post(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> int:
    return await post_review(reader, writer, BODY)


async def closed_within(reader: asyncio.StreamReader, seconds: float) -> float:
    """Seconds until the server closes the connection (fails after `seconds`)."""
    started = time.monotonic()
    async with asyncio.timeout(seconds):
        while True:
            try:
                if not await reader.read(1024):
                    break
            except (ConnectionError, OSError):
                break
    return time.monotonic() - started


def counted(name: str) -> float:
    return REGISTRY.get_sample_value(f"volcano_guard_connections_{name}_total") or 0


async def test_at_the_cap_a_new_connection_takes_the_place_of_the_one_idle_longest(certs):
    limits = ConnectionLimits(max_connections=20)
    evicted, refused = counted("evicted"), counted("refused")
    async with webhook(certs, limits) as port:
        hostile = [await asyncio.open_connection("127.0.0.1", port)]  # never a ClientHello
        hostile += [await tls_connect(certs, port) for _ in range(18)]  # never a request
        real = await tls_connect(certs, port)  # the API server's kept-alive connection
        assert await post(*real) == 200
        newcomers = []
        for _ in range(3):
            started = time.monotonic()
            newcomers.append(await tls_connect(certs, port))
            assert await post(*newcomers[-1]) == 200
            assert time.monotonic() - started < 1.0
        assert await post(*real) == 200  # idle more recently than the hostile ones: kept
        for reader, _ in hostile[:3]:  # the three idle longest made room
            assert await closed_within(reader, 1.0) < 1.0
    assert counted("evicted") - evicted == 3 and counted("refused") == refused


async def test_at_the_cap_a_connection_still_sending_its_headers_makes_room(certs):
    limits = ConnectionLimits(max_connections=3, request_timeout=5.0)
    evicted, refused = counted("evicted"), counted("refused")
    async with webhook(certs, limits) as port:
        dribblers = [await tls_connect(certs, port) for _ in range(3)]
        for _, writer in dribblers:  # a request begun, its headers never finished
            writer.write(b"POST /validate HTTP/1.1\r\nHost: x\r\n")
            await writer.drain()
        await asyncio.sleep(0.1)
        newcomer = await tls_connect(certs, port)
        assert await post(*newcomer) == 200
        assert await closed_within(dribblers[0][0], 1.0) < 1.0  # the one idle longest
    assert counted("evicted") - evicted == 1 and counted("refused") == refused


@pytest.mark.parametrize("chunk", [1, 2, 64], ids=["byte by byte", "two bytes", "whole"])
async def test_a_new_connection_is_refused_only_when_every_one_has_a_request_in_flight(
    certs, chunk
):
    limits = ConnectionLimits(max_connections=3, request_timeout=5.0)
    refused = counted("refused")
    head = b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: 99\r\n\r\n"
    async with webhook(certs, limits) as port:
        busy = [await tls_connect(certs, port) for _ in range(3)]
        for _, writer in busy:  # headers sent (however cut), the body never comes
            for at in range(0, len(head), chunk):
                writer.write(head[at : at + chunk])
                await writer.drain()
        await asyncio.sleep(0.1)
        started = time.monotonic()
        with pytest.raises((ConnectionError, OSError, asyncio.IncompleteReadError)):
            await tls_connect(certs, port)
        assert time.monotonic() - started < 1.0, "not refused fast"
        for _, writer in busy:
            writer.close()
    assert counted("refused") - refused == 1


async def test_a_connection_that_never_asks_is_closed_at_the_first_request_deadline(certs):
    async with webhook(certs) as port:
        reader, _ = await tls_connect(certs, port)
        assert 0.8 < await closed_within(reader, 3.0) < 1.6  # QUICK: 1 s from the accept


async def test_a_peer_that_never_sends_a_client_hello_is_closed_at_the_handshake_deadline(certs):
    async with webhook(certs) as port:
        reader, _ = await asyncio.open_connection("127.0.0.1", port)
        assert 0.4 < await closed_within(reader, 3.0) < 1.5


@pytest.mark.parametrize("headers_first", [False, True], ids=["slow headers", "slow body"])
async def test_a_request_dribbled_past_its_deadline_is_cut_off(certs, headers_first):
    timed_out = REGISTRY.get_sample_value("volcano_guard_connections_timed_out_total") or 0
    async with webhook(certs) as port:
        reader, writer = await tls_connect(certs, port)
        head = (
            b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(BODY)}\r\n\r\n".encode()
        )
        if headers_first:
            writer.write(head)
        dribble = BODY if headers_first else head

        async def slowly() -> None:
            for byte in dribble:
                writer.write(bytes([byte]))
                await asyncio.sleep(0.1)

        sender = asyncio.create_task(slowly())
        try:
            assert 0.4 < await closed_within(reader, 3.0) < 1.5
        finally:
            sender.cancel()
    assert REGISTRY.get_sample_value("volcano_guard_connections_timed_out_total") > timed_out


async def test_keep_alive_serves_request_after_request_and_closes_when_idle(certs):
    async with webhook(certs) as port:
        reader, writer = await tls_connect(certs, port)
        for _ in range(5):  # 1.2 s in all: longer than a request deadline, each idle < 0.8 s
            await asyncio.sleep(0.3)
            assert await post(reader, writer) == 200
        assert 0.6 < await closed_within(reader, 3.0) < 1.5  # idle for 0.8 s


async def test_any_answer_meets_the_deadline_even_one_aiohttp_writes_itself(certs):
    """A 404 (aiohttp's own answer) and a probe meet the request deadline as an admission
    does: the kept-alive connection is closed by the idle timeout, not cut as late."""
    timed_out = REGISTRY.get_sample_value("volcano_guard_connections_timed_out_total") or 0
    async with webhook(certs) as port:
        reader, writer = await tls_connect(certs, port)
        for path in (b"/nowhere", b"/healthz", b"/nowhere"):
            writer.write(b"GET " + path + b" HTTP/1.1\r\nHost: x\r\n\r\n")
            assert int((await reader.readline()).split()[1]) in (200, 404)
            while (line := await reader.readline()) != b"\r\n":
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            await reader.readexactly(length)
            await asyncio.sleep(0.3)  # idle past the 0.5 s request deadline in all
        assert 0.3 < await closed_within(reader, 3.0) < 1.5  # the idle timeout, 0.8 s
    assert REGISTRY.get_sample_value("volcano_guard_connections_timed_out_total") == timed_out


@pytest.mark.slow  # 600 connections to a process of its own
async def answer_to(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, body: bytes
) -> dict:
    """POST body to /validate; the AdmissionReview answered."""
    writer.write(
        b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    await writer.drain()
    await reader.readline()
    length = 0
    while (line := await reader.readline()) != b"\r\n":
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return json.loads(await reader.readexactly(length))


async def test_connections_reading_at_once_each_get_their_own_bytes(certs):
    """Many connections send reviews of many TLS records at once through the loop's one read
    buffer: every answer is to its own review (its uid, its verdict)."""

    async def client(index: int) -> None:
        reader, writer = await tls_connect(certs, port)
        for round_ in range(4):
            requests = {"cpu": "1", "memory": "1Gi"} if (index + round_) % 2 else {}
            sent = review(pod(container("c", requests=requests)), uid=f"{index}-{round_}")
            sent["request"]["object"]["metadata"]["annotations"] = {"pad": str(index) * 70_000}
            answer = await answer_to(reader, writer, json.dumps(sent).encode())
            assert answer["response"]["uid"] == f"{index}-{round_}"
            assert answer["response"]["allowed"] == bool(requests)
        writer.close()

    limits = ConnectionLimits(request_timeout=10.0)
    async with webhook(certs, limits) as port:
        await asyncio.gather(*(client(index) for index in range(40)))


@pytest.mark.slow  # 1,200 TLS connections held and closed: 10 s of a core
def test_an_idle_tls_connection_costs_at_most_32_kib_and_closing_them_leaks_nothing(
    certs, tmp_path: Path
):
    config = tmp_path / "config.yaml"
    config.write_text(json.dumps(NO_CLUSTER))
    proc = start_cli(
        "webhook",
        "--config",
        str(config),
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "127.0.0.1:0",
        "--tls-cert",
        str(certs.cert_file),
        "--tls-key",
        str(certs.key_file),
    )
    try:
        port = int(wait_for_log(proc, r"https://[^:]+:(\d+), metrics")[1])

        async def hold(count: int) -> int:
            """The server's RSS while count connections are open; then they close."""
            connections = [await tls_connect(certs, port) for _ in range(count)]
            await asyncio.sleep(0.5)
            held = memory_kib(proc.pid)
            for _, writer in connections:
                writer.close()
            await asyncio.sleep(1.0)
            return held

        count = 600
        before = memory_kib(proc.pid)
        first, second = asyncio.run(hold(count)), asyncio.run(hold(count))
    finally:
        proc.kill()
        proc.wait(10)
    each = (first - before) / count
    print(
        f"\n{count} idle TLS connections: RSS {before / 1024:.1f} -> {first / 1024:.1f} MiB "
        f"({each:.1f} KiB each); {second / 1024:.1f} MiB with {count} more after they closed"
    )
    assert each <= 32  # the TLS read buffer is the loop's, not each connection's
    # Whether the allocator hands freed pages back to the OS is its own affair (glibc often
    # keeps them); that the next connections reuse them is the server's: nothing leaked.
    assert second - first < (first - before) / 2, "the closed connections' memory was not reused"
