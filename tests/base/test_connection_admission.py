"""Who gives up a seat at the cap (base/connections.py, pick_victim and the sites): quick, on
loopback, attacker connections from 127.0.0.2 and the API server's from 127.0.0.1."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.base.test_connections import BODY, closed_within, counted, webhook
from tests.conftest import HOSTNAME
from tests.processes import post_review
from volcano_guard.base.connections import ConnectionLimits, _Connection, _Source, pick_victim
from volcano_guard.base.tls import client_context

API_SERVER, POD = "127.0.0.1", "127.0.0.2"
IN_FLIGHT_HEAD = b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: 7000000\r\n\r\n{"


def seated(source: _Source, count: int) -> list[_Connection]:
    made = [_Connection(None, time.monotonic) for _ in range(count)]
    for connection in made:
        connection.seat(source)
    return made


def in_flight(connection: _Connection) -> None:
    connection._waiting.pop(connection)


def answered(connection: _Connection) -> None:
    in_flight(connection)
    connection.request_started = 0.0
    connection.answered()


def test_the_heaviest_source_gives_up_one_never_answered_before_a_kept_alive_one():
    pod, api_server = _Source(), _Source()
    kept, fresh = seated(pod, 2)
    answered(kept)
    seated(api_server, 1)
    assert pick_victim({POD: pod, API_SERVER: api_server}, API_SERVER) is fresh
    assert pick_victim({POD: pod, API_SERVER: api_server}, POD) is fresh


def test_a_lighter_source_takes_the_seat_of_the_heaviest_sources_oldest_request_in_flight():
    pod, api_server = _Source(), _Source()
    held = seated(pod, 3)
    for connection in held:
        in_flight(connection)
    answered(seated(api_server, 1)[0])
    assert pick_victim({POD: pod, API_SERVER: api_server}, API_SERVER) is held[0]
    assert pick_victim({POD: pod, API_SERVER: api_server}, "127.0.0.3") is held[0]


def test_the_heaviest_source_is_refused_rather_than_evict_its_own_requests_or_anothers():
    pod, api_server = _Source(), _Source()
    for connection in seated(pod, 3):
        in_flight(connection)
    answered(seated(api_server, 1)[0])  # kept alive, idle: not the heaviest source's
    assert pick_victim({POD: pod, API_SERVER: api_server}, POD) is None


async def connect(
    certs, port: int, source: str
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(
        "127.0.0.1",
        port,
        ssl=client_context(certs.ca_file),
        server_hostname=HOSTNAME,
        local_addr=(source, 0),
    )


async def test_bodies_never_finished_by_one_pod_leave_the_api_server_a_seat(certs):
    refused = counted("refused")
    async with webhook(certs, ConnectionLimits(max_connections=6, request_timeout=5.0)) as port:
        held = [await connect(certs, port, POD) for _ in range(6)]
        for _, writer in held:  # TLS done, headers whole, one body byte: in flight
            writer.write(IN_FLIGHT_HEAD)
            await writer.drain()
        await asyncio.sleep(0.1)
        with pytest.raises((ConnectionError, OSError, asyncio.IncompleteReadError)):
            await post_review(*await connect(certs, port, POD), BODY)  # the pod: no more
        assert await post_review(*await connect(certs, port, API_SERVER), BODY) == 200
        assert await closed_within(held[0][0], 1.0) < 1.0  # its oldest made room
        for _, writer in held:
            writer.close()
    assert counted("refused") - refused == 1


async def test_connects_that_send_nothing_never_evict_the_api_servers_kept_alive_one(certs):
    async with webhook(certs, ConnectionLimits(max_connections=6)) as port:
        kept = await connect(certs, port, API_SERVER)
        assert await post_review(*kept, BODY) == 200
        for _ in range(30):  # connect-only churn at the cap, each newcomer the latest
            await asyncio.open_connection("127.0.0.1", port, local_addr=(POD, 0))
        await asyncio.sleep(0.1)
        assert await post_review(*kept, BODY) == 200
