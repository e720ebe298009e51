"""Attacks on the connection layer (issue 45, cases 2 to 4), each against a real process on
loopback: the attacker's connections come from 127.0.0.2 (a pod), the API-server-like
client's from 127.0.0.1, which asks with one kept-alive connection, a new connection per call
and the kubelet's /healthz beside (bench/connection_flood.py). Every call must be answered,
and the webhook's process tree must stay under half its memory limit (512Mi: 256 MiB).
Slow (about 30 to 50 s each), fixed counts."""

from __future__ import annotations

import asyncio
import resource
import subprocess
import sys
import time

import aiohttp
import pytest

from bench.connection_flood import memory_limit_mib, open_files_for, run
from tests.processes import wait_for_log
from volcano_guard_sandbox.apiserver.runner import SandboxThread

pytestmark = pytest.mark.slow

REQUESTS = 200  # new-connection calls; with them about 10 kept-alive calls and 10 probes


def flooded(case: str, hostile: int) -> dict:
    try:
        open_files_for(hostile)
    except ValueError as exc:
        pytest.skip(str(exc))
    return run(1, hostile, requests=REQUESTS, case=case)


def assert_api_server_kept_its_seat(figures: dict) -> None:
    assert figures["lost"] == {"new connection": 0, "kept alive": 0, "healthz": 0}, figures
    assert figures["peak_mib"] < memory_limit_mib(1) / 2, figures


def test_connections_holding_an_unfinished_body_cannot_keep_the_api_server_out():
    """2,500 connections that finish TLS, send a POST's headers (Content-Length 7000000) and
    one body byte, held: more than the cap (2,200), all in flight."""
    assert_api_server_kept_its_seat(flooded("in-flight", 2500))


def test_connects_that_send_nothing_cannot_evict_the_api_servers_connections():
    """2,500 TCP connects from one pod that send nothing, re-opened as fast as closed."""
    assert_api_server_kept_its_seat(flooded("churn", 2500))


def test_idle_connections_to_the_metrics_port_cannot_starve_admission_or_healthz():
    """2,500 idle connections to the webhook's metrics port (9090 in a pod)."""
    assert_api_server_kept_its_seat(flooded("metrics", 2500))


def sidecar_with_1024_open_files(upstream: str) -> subprocess.Popen[str]:
    """A sidecar process under an injected sidecar's open-file limit (the container's 1024)."""

    def limit() -> None:
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))

    return subprocess.Popen(
        [
            *(sys.executable, "-m", "volcano_guard.cli", "sidecar", "--upstream", upstream),
            *("--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"),
        ],
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=limit,
    )


async def hold_idle(port: int, count: int) -> list[asyncio.StreamWriter]:
    """`count` idle connections to port from 127.0.0.2 (fewer if some cannot be made)."""
    held: list[asyncio.StreamWriter] = []
    failed = 0
    while len(held) < count and failed < 5:
        try:  # a server out of files accepts no more: the kernel's backlog fills, then waits
            async with asyncio.timeout(0.5):
                _, writer = await asyncio.open_connection(
                    "127.0.0.1", port, local_addr=("127.0.0.2", 0)
                )
            held.append(writer)
        except (OSError, TimeoutError):
            failed += 1
    return held


async def proxy_calls(url: str, calls: int) -> list[str]:
    """GET /api/v1/namespaces through the sidecar up to `calls` times, 5 s each: the first
    failure, if any."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
        for _ in range(calls):
            try:
                async with session.get(f"{url}/api/v1/namespaces") as answer:
                    await answer.read()
                    if answer.status != 200:
                        return [f"HTTP {answer.status}"]
            except (aiohttp.ClientError, TimeoutError) as exc:
                return [repr(exc)]
            await asyncio.sleep(0.05)
    return []


def test_idle_connections_to_a_sidecars_metrics_port_cannot_cut_its_app_off():
    """1,030 idle connections to an injected sidecar's metrics port (9091, reachable from
    every pod): the app's calls through the proxy still reach the API server."""
    open_files_for(1100)
    with SandboxThread() as sandbox:
        proc = sidecar_with_1024_open_files(sandbox.url)
        try:
            found = wait_for_log(
                proc, r"sidecar proxy on (http://[^ ]+) .* metrics on http://[^:]+:(\d+)"
            )
            url, metrics_port = found[1], int(found[2])

            async def attack() -> list[str]:
                held = await hold_idle(metrics_port, 1030)
                await asyncio.sleep(1.0)
                try:
                    return await proxy_calls(url, 20)
                finally:
                    for writer in held:
                        writer.close()

            started = time.monotonic()
            assert asyncio.run(attack()) == []
            assert time.monotonic() - started < 30
        finally:
            proc.kill()
            proc.wait(10)
