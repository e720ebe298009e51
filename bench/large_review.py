"""The largest review a stranger can send, judged while an API-server-like client asks.

The forged review of issue 45: a Volcano pod with 200,000 containers without requests (just
under the 7 MiB body limit; gzipped it is ~480 KB). An attacker process sends it --rounds times,
one after the other, plain, and once more gzipped; meanwhile a client on one kept-alive
connection sends a small pod review every 5 ms. Printed: the client's p50/p99 with no attacker
(the baseline, same process, same run) and while the attacker's reviews are judged, the
attacker's statuses and answer sizes, and the webhook's RSS before and at its peak.

    .venv/bin/python -m bench.large_review [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import multiprocessing
import ssl
import statistics
import time
from pathlib import Path
from typing import Any

import orjson

from bench.connection_flood import HOSTNAME, NO_CLUSTER, memory_limit_mib
from tests.builders import container, pod, review
from tests.processes import post_review, webhook_process
from volcano_guard.base.tls import client_context
from volcano_guard_sandbox.processes import tree_memory_kib

CONTAINERS = 200_000
CLIENT_GAP = 0.005  # seconds between the client's reviews


def forged_review() -> bytes:
    """A Volcano pod with CONTAINERS containers, none with requests."""
    containers = ({"name": f"c{i}", "image": "busybox"} for i in range(CONTAINERS))
    return orjson.dumps(review(pod(*containers)))


def attack(port: int, ca: Path, rounds: int, results: Any) -> None:
    """Send the forged review rounds times plain and once gzipped, each on its own
    connection; record (status, answer bytes, seconds) for each in results."""
    plain = forged_review()
    zipped = gzip.compress(plain)
    context = client_context(ca)
    for body, encoding in [(plain, None)] * rounds + [(zipped, "gzip")]:
        results.append(asyncio.run(_send(port, context, body, encoding)))


async def _send(
    port: int, context: ssl.SSLContext, body: bytes, encoding: str | None
) -> tuple[int, int, float]:
    started = time.perf_counter()
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=context, server_hostname=HOSTNAME, limit=2**20
    )
    extra = f"Content-Encoding: {encoding}\r\n" if encoding else ""
    writer.write(
        b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"{extra}Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )
    await writer.drain()
    answer = await reader.read()  # to the end: the connection closes after it
    writer.close()
    status = int(answer.split(b" ", 2)[1]) if answer else 0
    return status, len(answer), time.perf_counter() - started


async def client(port: int, ca: Path, stop: asyncio.Event, latencies: list[float]) -> int:
    """Small reviews on one kept-alive connection until stop; the count of non-200 answers."""
    body = json.dumps(review(pod(container("c", requests={"cpu": "1", "memory": "1Gi"})))).encode()
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=client_context(ca), server_hostname=HOSTNAME
    )
    failed = 0
    while not stop.is_set():
        started = time.perf_counter()
        failed += await post_review(reader, writer, body) != 200
        latencies.append(time.perf_counter() - started)
        await asyncio.sleep(CLIENT_GAP)
    writer.close()
    return failed


def quantile_ms(latencies: list[float], q: int) -> float:
    return statistics.quantiles(latencies, n=100)[q - 1] * 1000


async def measure(port: int, pid: int, ca: Path, rounds: int, baseline_s: float) -> dict[str, Any]:
    before = tree_memory_kib(pid)
    quiet: list[float] = []
    stop = asyncio.Event()
    task = asyncio.create_task(client(port, ca, stop, quiet))
    await asyncio.sleep(baseline_s)
    stop.set()
    failed = await task
    manager = multiprocessing.Manager()
    results = manager.list()
    attacker = multiprocessing.Process(target=attack, args=(port, ca, rounds, results))
    loaded: list[float] = []
    stop = asyncio.Event()
    task = asyncio.create_task(client(port, ca, stop, loaded))
    attacker.start()
    peak = before
    while attacker.is_alive():
        peak = max(peak, tree_memory_kib(pid))
        await asyncio.sleep(0.05)
    stop.set()
    failed += await task
    answers = list(results)
    figures = {
        "quiet_p50_ms": quantile_ms(quiet, 50),
        "quiet_p99_ms": quantile_ms(quiet, 99),
        "attacked_p50_ms": quantile_ms(loaded, 50),
        "attacked_p99_ms": quantile_ms(loaded, 99),
        "attacked_max_ms": max(loaded) * 1000,
        "client_failed": failed,
        "answers": answers,
        "before_mib": before / 1024,
        "peak_mib": peak / 1024,
    }
    print(
        f"client, one kept-alive connection, a review every {CLIENT_GAP * 1000:.0f} ms: quiet "
        f"{len(quiet)} reviews p50 {figures['quiet_p50_ms']:.1f} ms p99 "
        f"{figures['quiet_p99_ms']:.1f} ms; while the forged reviews are judged {len(loaded)} "
        f"reviews p50 {figures['attacked_p50_ms']:.1f} ms p99 {figures['attacked_p99_ms']:.1f} "
        f"ms max {figures['attacked_max_ms']:.0f} ms; {failed} failed"
    )
    for (status, size, seconds), kind in zip(answers, ["plain"] * rounds + ["gzip"], strict=False):
        print(f"attacker, {kind}: HTTP {status}, answer {size:,} bytes, {seconds:.2f} s")
    print(
        f"webhook RSS: {figures['before_mib']:.0f} MiB before, peak {figures['peak_mib']:.0f} "
        f"MiB (limit {memory_limit_mib(1)} MiB)"
    )
    return figures


def run(rounds: int = 3, baseline_s: float = 3.0) -> dict[str, Any]:
    """Start a webhook process, measure, stop it; the figures."""
    with webhook_process(NO_CLUSTER) as webhook:
        time.sleep(1.0)
        body = forged_review()
        print(
            f"forged review: {CONTAINERS:,} containers, {len(body):,} bytes, "
            f"{len(gzip.compress(body)):,} gzipped"
        )
        return asyncio.run(measure(webhook.port, webhook.pid, webhook.ca_file, rounds, baseline_s))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    run(args.rounds)


if __name__ == "__main__":
    main()
