"""A flood of hostile connections against the webhook process, while the API server's own
kept-alive connection goes on asking: its latency, and the webhook's memory during and after.

The flood (--hostile, default 2,000, in waves): a third of the connections never send a
ClientHello, a third finish the handshake and stay idle, a third send their headers a byte a
second (slowloris). The real client sends a pod review every 20 ms on one connection opened
before the flood. Printed: the real client's p50/p99 and failures, the process tree's RSS before,
at its peak and 5 s after the flood, and how many hostile connections were refused or cut off.

    .venv/bin/python -m bench.connection_flood [--workers 2] [--hostile 2000] [--seconds 15]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import multiprocessing
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.builders import container, pod, review
from tests.processes import post_review, start_cli, wait_for_log
from volcano_guard.base.processes import tree_memory_kib
from volcano_guard.base.tls import client_context
from volcano_guard.certs.generate import generate

HOSTNAME = "volcano-guard.volcano-guard.svc"
NO_CLUSTER = {"policies": {"nodeName": {"mode": "off", "bindingGuard": {"mode": "off"}},
                           "podGroups": {"stampGenerationId": False,
                                         "deleteGuard": {"mode": "off"}}}}
def memory_limit_mib(workers: int) -> int:
    """The Deployment's memory limit: 512Mi for one process, 768Mi with more (install guide)."""
    return 512 if workers == 1 else 768


async def real_client(port: int, ca: Path, stop: asyncio.Event, latencies: list[float],
                      failures: list[str]) -> None:
    body = json.dumps(review(pod(container("c", requests={"cpu": "1", "memory": "1Gi"})))).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_context(ca),
                                                   server_hostname=HOSTNAME)
    while not stop.is_set():
        started = time.perf_counter()
        try:
            status = await post_review(reader, writer, body)
            if status != 200:
                failures.append(f"HTTP {status}")
        except (OSError, ValueError, IndexError, asyncio.IncompleteReadError) as exc:
            failures.append(repr(exc))
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, ssl=client_context(ca), server_hostname=HOSTNAME)
        latencies.append(time.perf_counter() - started)
        await asyncio.sleep(0.02)
    writer.close()


async def hostile(port: int, ca: Path, kind: int, until: float, outcome: Any) -> None:
    """Keep one hostile connection open (reopening when cut off) until `until`."""
    while time.monotonic() < until:
        try:
            if kind == 0:  # no ClientHello
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            else:
                reader, writer = await asyncio.open_connection(
                    "127.0.0.1", port, ssl=client_context(ca), server_hostname=HOSTNAME)
                if kind == 2:  # slowloris: headers a byte a second
                    for byte in b"POST /validate HTTP/1.1\r\nHost: x\r\n":
                        writer.write(bytes([byte]))
                        await asyncio.sleep(1.0)
                        if time.monotonic() > until:
                            break
            await asyncio.wait_for(reader.read(1), timeout=max(0.1, until - time.monotonic()))
            outcome["cut off"] += 1
            writer.close()
        except TimeoutError:
            outcome["held to the end"] += 1
            return
        except (OSError, asyncio.IncompleteReadError):
            outcome["refused or reset"] += 1
            await asyncio.sleep(0.5)


def run_flood(port: int, ca: Path, hostile_count: int, seconds: float, outcome: Any) -> None:
    """The hostile connections, in a process of their own (so that they do not slow the real
    client's event loop), ramped up in waves of 200."""
    async def all_of_them() -> None:
        until = time.monotonic() + seconds
        tasks = []
        for n in range(hostile_count):
            tasks.append(asyncio.create_task(hostile(port, ca, n % 3, until, outcome)))
            if n % 200 == 199:
                await asyncio.sleep(0.2)
        await asyncio.gather(*tasks, return_exceptions=True)

    logging.getLogger("asyncio").setLevel(logging.CRITICAL)  # its "SSL connection is closed"
    asyncio.run(all_of_them())


async def flood(port: int, pid: int, ca: Path, hostile_count: int, seconds: float,
                limit_mib: int) -> dict[str, float]:
    """Run the flood against the webhook at port (process pid); print and return its figures:
    p99_ms (the real client's during the flood), failed, and RSS before, peak, after in MiB."""
    latencies: list[float] = []
    failures: list[str] = []
    stop = asyncio.Event()
    client = asyncio.create_task(real_client(port, ca, stop, latencies, failures))
    await asyncio.sleep(1.0)
    baseline = latencies[:]
    before = tree_memory_kib(pid)
    outcome = multiprocessing.Manager().dict({"cut off": 0, "refused or reset": 0,
                                              "held to the end": 0})
    attacker = multiprocessing.Process(target=run_flood,
                                       args=(port, ca, hostile_count, seconds, outcome))
    attacker.start()
    peak = before
    while attacker.is_alive():
        peak = max(peak, tree_memory_kib(pid))
        await asyncio.sleep(0.25)
    during = latencies[len(baseline):]
    await asyncio.sleep(5.0)
    after = tree_memory_kib(pid)
    stop.set()
    await client

    def ms(values: list[float], q: int) -> float:
        return statistics.quantiles(values, n=100)[q - 1] * 1000

    print(f"real client before the flood: {len(baseline)} requests, p50 {ms(baseline, 50):.1f} "
          f"ms, p99 {ms(baseline, 99):.1f} ms")
    print(f"real client during the flood: {len(during)} requests, p50 {ms(during, 50):.1f} ms, "
          f"p99 {ms(during, 99):.1f} ms, {len(failures)} failed {failures[:3]}")
    print(f"hostile connections: {dict(outcome)}")
    print(f"RSS of the webhook's process tree: {before / 1024:.0f} MiB before, peak "
          f"{peak / 1024:.0f} MiB, {after / 1024:.0f} MiB 5 s after (limit {limit_mib} MiB)")
    print(f"  targets: p99 < 100 ms {'meets' if ms(during, 99) < 100 else 'MISSES'}; "
          f"peak < {limit_mib // 2} MiB {'meets' if peak / 1024 < limit_mib / 2 else 'MISSES'}; "
          f"back down {'meets' if after - before < (peak - before) / 2 else 'MISSES'}")
    return {"p99_ms": ms(during, 99), "failed": len(failures), "before_mib": before / 1024,
            "peak_mib": peak / 1024, "after_mib": after / 1024}


def run(workers: int, hostile_count: int, seconds: float) -> dict[str, float]:
    """Start a webhook process (workers), flood it, stop it; the figures."""
    work = Path(tempfile.mkdtemp(prefix="flood-"))
    made = generate("volcano-guard", "volcano-guard", work)
    config = work / "config.yaml"
    config.write_text(json.dumps(NO_CLUSTER))
    proc = start_cli("webhook", "--config", str(config), "--listen", "127.0.0.1:0",
                     "--metrics-listen", "127.0.0.1:0", "--tls-cert", str(made.cert_file),
                     "--tls-key", str(made.key_file), "--workers", str(workers))
    try:
        port = int(wait_for_log(proc, r"https://[^:]+:(\d+), metrics", timeout=60)[1])
        time.sleep(1.0 if workers == 1 else 3.0)
        print(f"webhook, {workers} process(es); {hostile_count} hostile connections for "
              f"{seconds:.0f} s")
        return asyncio.run(flood(port, proc.pid, made.ca_file, hostile_count, seconds,
                                 memory_limit_mib(workers)))
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--hostile", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=15.0)
    args = parser.parse_args()
    run(args.workers, args.hostile, args.seconds)


if __name__ == "__main__":
    main()
