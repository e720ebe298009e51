"""A flood of hostile connections against the webhook process while a real client asks, as the
API server would after its kept-alive connections went: a new TLS connection for every review.

The flood (--hostile, default 2,000, opened in waves): a third of the connections never send a
ClientHello, a third finish the handshake and stay idle, a third send a request's headers a byte
every 3 s. With --reopen each is opened again as soon as it is closed (refused, cut off or made
room for), else it stays closed. Once the flood is up, the real client sends --requests reviews
(default 500), one every 20 ms, each on a connection of its own. Printed: the real client's
p50/p99 and failures, the process tree's RSS before, at its peak and 5 s after the flood, the
connections the webhook counted as evicted, refused and timed out, and the hostile side's tally.

    .venv/bin/python -m bench.connection_flood [--workers 2] [--hostile 2000] [--reopen]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import multiprocessing
import re
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from tests.builders import container, pod, review
from tests.processes import post_review, start_cli, wait_for_log
from volcano_guard.base.connections import raise_open_file_limit
from volcano_guard.base.tls import client_context
from volcano_guard.certs.generate import generate
from volcano_guard_sandbox.processes import tree_memory_kib

HOSTNAME = "volcano-guard.volcano-guard.svc"
NO_CLUSTER = {
    "policies": {
        "nodeName": {"mode": "off", "bindingGuard": {"mode": "off"}},
        "podGroups": {"stampGenerationId": False, "deleteGuard": {"mode": "off"}},
    }
}
SLOWLORIS_GAP = 3.0  # seconds between a slow header's bytes
COUNTERS = ("evicted", "refused", "timed_out")


def memory_limit_mib(workers: int) -> int:
    """The Deployment's memory limit: 512Mi for one process, 1Gi with more (install guide)."""
    return 512 if workers == 1 else 1024


def open_files_for(connections: int) -> None:
    """Room in this process's open files for the connections (ValueError if the hard limit
    has none)."""
    raise_open_file_limit(connections + 256)


async def real_client(
    port: int, ca: Path, requests: int, latencies: list[float], failures: list[str]
) -> None:
    """`requests` reviews, 20 ms apart, each on a new TLS connection."""
    body = json.dumps(review(pod(container("c", requests={"cpu": "1", "memory": "1Gi"})))).encode()
    context = client_context(ca)
    for _ in range(requests):
        started = time.perf_counter()
        try:
            async with asyncio.timeout(10):
                reader, writer = await asyncio.open_connection(
                    "127.0.0.1", port, ssl=context, server_hostname=HOSTNAME
                )
                status = await post_review(reader, writer, body)
                writer.close()
            if status != 200:
                failures.append(f"HTTP {status}")
        except (OSError, ValueError, IndexError, asyncio.IncompleteReadError, TimeoutError) as exc:
            failures.append(repr(exc))
        latencies.append(time.perf_counter() - started)
        await asyncio.sleep(0.02)


async def hostile(
    port: int, ca: Path, kind: int, until: float, reopen: bool, tally: dict[str, int]
) -> None:
    """One hostile connection held until `until`; opened again when closed if `reopen`."""
    context = client_context(ca) if kind else None
    while time.monotonic() < until:
        try:
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, ssl=context, server_hostname=HOSTNAME if kind else None
            )
            tally["opened"] += 1
            if kind == 2:  # slowloris: a header byte every few seconds
                for byte in b"POST /validate HTTP/1.1\r\nHost: x\r\n":
                    writer.write(bytes([byte]))
                    await asyncio.sleep(SLOWLORIS_GAP)
                    if time.monotonic() > until or writer.is_closing():
                        break
            await asyncio.wait_for(reader.read(1), timeout=max(0.1, until - time.monotonic()))
            tally["closed by the webhook"] += 1
            writer.close()
        except TimeoutError:
            tally["held to the end"] += 1
            return
        except (OSError, asyncio.IncompleteReadError):
            tally["closed by the webhook"] += 1
        if not reopen:
            return


def run_flood(
    port: int, ca: Path, hostile_count: int, seconds: float, reopen: bool, shared: Any
) -> None:
    """The hostile connections, in a process of their own (so that they do not slow the real
    client's event loop), opened in waves of 250; `shared["up"]` is set once all are opened."""

    async def all_of_them() -> None:
        tally = {"opened": 0, "closed by the webhook": 0, "held to the end": 0}
        until = time.monotonic() + seconds
        tasks = []
        for n in range(hostile_count):
            tasks.append(asyncio.create_task(hostile(port, ca, n % 3, until, reopen, tally)))
            if n % 250 == 249:
                await asyncio.sleep(0.1)
        while tally["opened"] < hostile_count and time.monotonic() < until:
            await asyncio.sleep(0.1)
        shared["up"] = True
        await asyncio.gather(*tasks, return_exceptions=True)
        shared.update(tally)

    open_files_for(hostile_count)
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)  # its "SSL connection is closed"
    asyncio.run(all_of_them())


def counters(metrics_port: int) -> dict[str, float]:
    """The webhook's connection counters, from its metrics endpoint."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as page:
        text = page.read().decode()
    found = {}
    for name in COUNTERS:
        match = re.search(rf"^volcano_guard_connections_{name}_total (\S+)$", text, re.M)
        found[name] = float(match[1]) if match else 0.0
    return found


async def flood(
    port: int,
    metrics_port: int,
    pid: int,
    ca: Path,
    hostile_count: int,
    reopen: bool,
    requests: int,
    limit_mib: int,
) -> dict[str, float]:
    """Flood the webhook at port (process pid), then ask; print and return the figures:
    p99_ms, failed, and RSS before, peak, after in MiB."""
    before = tree_memory_kib(pid)
    counted_before = counters(metrics_port)
    manager = multiprocessing.Manager()
    shared = manager.dict({"up": False})
    # Up in about hostile/2,500 s; then the client's requests at 50 a second, with room.
    seconds = hostile_count / 1000 + requests / 25 + 10
    attacker = multiprocessing.Process(
        target=run_flood, args=(port, ca, hostile_count, seconds, reopen, shared)
    )
    attacker.start()
    peak = before
    while not shared["up"] and attacker.is_alive():
        peak = max(peak, tree_memory_kib(pid))
        await asyncio.sleep(0.25)
    latencies: list[float] = []
    failures: list[str] = []
    client = asyncio.create_task(real_client(port, ca, requests, latencies, failures))
    while not client.done():
        peak = max(peak, tree_memory_kib(pid))
        await asyncio.sleep(0.25)
    await client
    counted = {k: v - counted_before[k] for k, v in counters(metrics_port).items()}
    attacker.terminate()
    attacker.join(10)
    await asyncio.sleep(5.0)
    after = tree_memory_kib(pid)

    def ms(q: int) -> float:
        return statistics.quantiles(latencies, n=100)[q - 1] * 1000

    print(
        f"real client, a new connection a request: {len(latencies)} requests, p50 "
        f"{ms(50):.1f} ms, p99 {ms(99):.1f} ms, {len(failures)} failed {failures[:3]}"
    )
    tally = ", ".join(f"{name} {value:,.0f}" for name, value in counted.items())
    print(f"webhook's connection counters: {tally}")
    print(
        f"RSS of the webhook's process tree: {before / 1024:.0f} MiB before, peak "
        f"{peak / 1024:.0f} MiB, {after / 1024:.0f} MiB 5 s after (limit {limit_mib} MiB)"
    )
    print(
        f"  targets: 0 failed {'meets' if not failures else 'MISSES'}; p99 < 100 ms "
        f"{'meets' if ms(99) < 100 else 'MISSES'}; peak < {limit_mib // 2} MiB "
        f"{'meets' if peak / 1024 < limit_mib / 2 else 'MISSES'}"
    )
    return {
        "p99_ms": ms(99),
        "failed": len(failures),
        "before_mib": before / 1024,
        "peak_mib": peak / 1024,
        "after_mib": after / 1024,
        **counted,
    }


def run(
    workers: int, hostile_count: int, reopen: bool = False, requests: int = 500
) -> dict[str, float]:
    """Start a webhook process (workers), flood it, stop it; the figures."""
    work = Path(tempfile.mkdtemp(prefix="flood-"))
    made = generate("volcano-guard", "volcano-guard", work)
    config = work / "config.yaml"
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
        str(made.cert_file),
        "--tls-key",
        str(made.key_file),
        "--workers",
        str(workers),
    )
    try:
        found = wait_for_log(
            proc, r"https://[^:]+:(\d+), metrics on http://[^:]+:(\d+)", timeout=60
        )
        port, metrics_port = int(found[1]), int(found[2])
        if workers > 1:  # that was a worker's own; the parent's sums them all
            metrics_port = int(
                wait_for_log(proc, r"merged metrics on http://[^:]+:(\d+)", timeout=60)[1]
            )
        time.sleep(1.0 if workers == 1 else 3.0)
        print(
            f"webhook, {workers} process(es); {hostile_count:,} hostile connections"
            f"{', re-opened as fast as they are closed' if reopen else ''}"
        )
        return asyncio.run(
            flood(
                port,
                metrics_port,
                proc.pid,
                made.ca_file,
                hostile_count,
                reopen,
                requests,
                memory_limit_mib(workers),
            )
        )
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--hostile", type=int, default=2000)
    parser.add_argument("--reopen", action="store_true")
    parser.add_argument("--requests", type=int, default=500)
    args = parser.parse_args()
    run(args.workers, args.hostile, args.reopen, args.requests)


if __name__ == "__main__":
    main()
