"""Hostile connections against the webhook process while an API-server-like client asks.

The attacker (its own process, source address 127.0.0.2) runs one of these cases (--case):

- mixed (--hostile, default 2,000, opened in waves): a third of the connections never send a
  ClientHello, a third finish the handshake and stay idle, a third send a request's headers a
  byte every 3 s;
- in-flight: TLS done, a POST's headers with `Content-Length: 7000000` and one body byte, held;
- churn: TCP connects that send nothing, opened as fast as they are closed (always re-opened);
- largest: --hostile connections each sending reviews of --review-bytes (default: the body
  limit) one after another, every container without requests;
- metrics: idle TCP connections to the metrics port (2,500 exhaust the open files on main).

With --reopen a closed connection is opened again at once (churn always is). Once the flood is
up, the client (source 127.0.0.1) asks as the API server does: --requests reviews (default
500), one every 20 ms, each on a connection of its own; beside them one kept-alive connection
asked every 2 s; and a kubelet's /healthz on the metrics port every 0.5 s. Printed: the
client's p50/p99 beside a baseline measured the same way before the flood (and their ratio),
the calls lost of each kind, the process tree's RSS before, at its peak and 5 s after, the
connections the webhook counted as evicted, refused and timed out, and the attacker's tally.
The webhook starts with a container's soft open-file limit (1,024), which it raises.

    .venv/bin/python -m bench.connection_flood [--case in-flight] [--workers 2] [--hostile N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import multiprocessing
import re
import resource
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.builders import container, pod, review
from tests.processes import post_review, wait_for_log
from volcano_guard.base.connections import raise_open_file_limit
from volcano_guard.base.tls import client_context
from volcano_guard.certs.generate import generate
from volcano_guard.webhook.config import DEFAULT_MAX_REQUEST_BYTES
from volcano_guard_sandbox.processes import tree_memory_kib

HOSTNAME = "volcano-guard.volcano-guard.svc"
NO_CLUSTER = {
    "policies": {
        "nodeName": {"mode": "off", "bindingGuard": {"mode": "off"}},
        "podGroups": {"stampGenerationId": False, "deleteGuard": {"mode": "off"}},
        "queues": {"mode": "off"},
    }
}
CLIENT, ATTACKER = "127.0.0.1", "127.0.0.2"  # the API server's source, and a pod's;
# the webhook listens on 127.0.0.1 alone
SLOWLORIS_GAP = 3.0  # seconds between a slow header's bytes
# Seconds between the kept-alive connection's calls (the API server's idle gaps between
# reviews: under churn a connection idle 6 s was evicted on main), and the probes'.
KEPT_GAP, PROBE_GAP = 2.0, 0.5
# The webhook's soft open-file limit at its start: a container's common 1,024 (it raises it
# for its connection caps, up to the hard limit).
OPEN_FILES = 1024
IN_FLIGHT_HEAD = (
    b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Length: 7000000\r\n\r\n{"
)
COUNTERS = ("evicted", "refused", "timed_out")
CASES = ("mixed", "in-flight", "churn", "largest", "metrics")
DEFAULT_HOSTILE = {"mixed": 2000, "in-flight": 2500, "churn": 2500, "largest": 4, "metrics": 2500}


def memory_limit_mib(workers: int) -> int:
    """The Deployment's memory limit: 512Mi for one process, 1Gi with more (install guide)."""
    return 512 if workers == 1 else 1024


def open_files_for(connections: int) -> None:
    """Room in this process's open files for the connections (ValueError if the hard limit
    has none)."""
    raise_open_file_limit(connections + 256)


def largest_review(size: int) -> bytes:
    """A pod's AdmissionReview of about `size` bytes (at most): containers without requests."""
    one = len(json.dumps(container("c0000000"))) + 2
    body = review(pod(*(container(f"c{n:07d}") for n in range(max(1, size // one - 40)))))
    return json.dumps(body, separators=(",", ":")).encode()


@dataclass
class Calls:
    """One kind of the client's calls: latencies (seconds) and the failures."""

    latencies: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def quantile_ms(self, q: int) -> float:
        if len(self.latencies) < 2:
            return self.latencies[0] * 1000 if self.latencies else float("nan")
        return statistics.quantiles(self.latencies, n=100)[q - 1] * 1000


FAILED = (OSError, ValueError, IndexError, asyncio.IncompleteReadError, TimeoutError)


async def timed(calls: Calls, call: Any) -> None:
    started = time.perf_counter()
    try:
        async with asyncio.timeout(10):
            status = await call()
        if status != 200:
            calls.failures.append(f"HTTP {status}")
    except FAILED as exc:
        calls.failures.append(repr(exc))
    calls.latencies.append(time.perf_counter() - started)


async def connect(
    port: int, context: ssl.SSLContext
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(
        "127.0.0.1", port, ssl=context, server_hostname=HOSTNAME, local_addr=(CLIENT, 0)
    )


async def new_connection_calls(port: int, ca: Path, requests: int, calls: Calls) -> None:
    """`requests` reviews, 20 ms apart, each on a new TLS connection."""
    body = json.dumps(review(pod(container("c", requests={"cpu": "1", "memory": "1Gi"})))).encode()
    context = client_context(ca)

    async def one() -> int:
        reader, writer = await connect(port, context)
        try:
            return await post_review(reader, writer, body)
        finally:
            writer.close()

    for _ in range(requests):
        await timed(calls, one)
        await asyncio.sleep(0.02)


async def kept_alive_calls(port: int, ca: Path, until: float, calls: Calls) -> None:
    """A review every KEPT_GAP on one kept-alive connection (a new one only after a loss)."""
    body = json.dumps(review(pod(container("c", requests={"cpu": "1", "memory": "1Gi"})))).encode()
    context = client_context(ca)
    kept: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def one() -> int:
        if not kept:
            kept.append(await connect(port, context))
        try:
            reader, writer = kept[0]
            return await post_review(reader, writer, body)
        except BaseException:
            kept.pop()[1].close()
            raise

    while time.monotonic() < until:
        await timed(calls, one)
        await asyncio.sleep(KEPT_GAP)
    if kept:
        kept[0][1].close()


async def probe_calls(metrics_port: int, until: float, calls: Calls) -> None:
    """The kubelet's GET /healthz every PROBE_GAP, a new connection each."""

    async def one() -> int:
        reader, writer = await asyncio.open_connection(CLIENT, metrics_port, local_addr=(CLIENT, 0))
        try:
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            return int((await reader.readline()).split()[1])
        finally:
            writer.close()

    while time.monotonic() < until:
        await timed(calls, one)
        await asyncio.sleep(PROBE_GAP)


async def ask(port: int, metrics_port: int, ca: Path, requests: int) -> dict[str, Calls]:
    """The client's three kinds of calls together, for as long as the new-connection ones."""
    found = {"new connection": Calls(), "kept alive": Calls(), "healthz": Calls()}
    until = time.monotonic() + requests * 0.025 + 1
    await asyncio.gather(
        new_connection_calls(port, ca, requests, found["new connection"]),
        kept_alive_calls(port, ca, until, found["kept alive"]),
        probe_calls(metrics_port, until, found["healthz"]),
    )
    return found


async def hostile(
    target: tuple[int, int],
    ca: Path,
    kind: str,
    until: float,
    reopen: bool,
    tally: dict[str, int],
    body: bytes,
) -> None:
    """One hostile connection of `kind` held until `until`; opened again when closed if
    `reopen`."""
    port, metrics_port = target
    tls = kind in ("handshake", "slowloris", "in-flight", "largest")
    context = client_context(ca) if tls else None
    while time.monotonic() < until:
        try:
            reader, writer = await asyncio.open_connection(
                "127.0.0.1",
                metrics_port if kind == "metrics" else port,
                ssl=context,
                server_hostname=HOSTNAME if tls else None,
                local_addr=(ATTACKER, 0),
            )
            tally["opened"] += 1
            if kind == "slowloris":  # a header byte every few seconds
                for byte in b"POST /validate HTTP/1.1\r\nHost: x\r\n":
                    writer.write(bytes([byte]))
                    await asyncio.sleep(SLOWLORIS_GAP)
                    if time.monotonic() > until or writer.is_closing():
                        break
            elif kind == "in-flight":
                writer.write(IN_FLIGHT_HEAD)
            elif kind == "largest":
                while time.monotonic() < until:
                    await post_review(reader, writer, body)
                    tally["largest reviews answered"] += 1
            await asyncio.wait_for(reader.read(1), timeout=max(0.1, until - time.monotonic()))
            tally["closed by the webhook"] += 1
            writer.close()
        except TimeoutError:
            tally["held to the end"] += 1
            return
        except (OSError, ValueError, IndexError, asyncio.IncompleteReadError):
            tally["closed by the webhook"] += 1
        if not reopen:
            return


def kinds_of(case: str) -> tuple[str, ...]:
    if case == "mixed":
        return ("no hello", "handshake", "slowloris")
    return ("connect only",) if case == "churn" else (case,)


def run_flood(
    target: tuple[int, int],
    ca: Path,
    case: str,
    hostile_count: int,
    seconds: float,
    reopen: bool,
    review_bytes: int,
    shared: Any,
) -> None:
    """The hostile connections, in a process of their own (so that they do not slow the
    client's event loop), opened in waves of 250; `shared["up"]` is set once all are opened."""
    kinds = kinds_of(case)
    body = largest_review(review_bytes) if case == "largest" else b""

    async def all_of_them() -> None:
        tally = {"opened": 0, "closed by the webhook": 0, "held to the end": 0}
        tally["largest reviews answered"] = 0
        until = time.monotonic() + seconds
        tasks = []
        for n in range(hostile_count):
            kind = kinds[n % len(kinds)]
            again = reopen or case == "churn"
            tasks.append(asyncio.create_task(hostile(target, ca, kind, until, again, tally, body)))
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


@dataclass(frozen=True)
class Target:
    port: int
    metrics_port: int
    pid: int
    ca: Path
    limit_mib: int


async def flood(
    target: Target, case: str, hostile_count: int, reopen: bool, requests: int, review_bytes: int
) -> dict[str, Any]:
    """A baseline of the client's calls, then the flood and the calls again; print and return
    the figures."""
    baseline = await ask(target.port, target.metrics_port, target.ca, min(requests, 200))
    before = tree_memory_kib(target.pid)
    counted_before = counters(target.metrics_port)
    manager = multiprocessing.Manager()
    shared = manager.dict({"up": False})
    # Up in about hostile/2,500 s; then the client's requests at 40 a second, with room.
    seconds = hostile_count / 1000 + requests / 25 + 10
    attacker = multiprocessing.Process(
        target=run_flood,
        args=(
            (target.port, target.metrics_port),
            target.ca,
            case,
            hostile_count,
            seconds,
            reopen,
            review_bytes,
            shared,
        ),
    )
    attacker.start()
    peak = before
    while not shared["up"] and attacker.is_alive():
        peak = max(peak, tree_memory_kib(target.pid))
        await asyncio.sleep(0.25)
    client = asyncio.create_task(ask(target.port, target.metrics_port, target.ca, requests))
    while not client.done():
        peak = max(peak, tree_memory_kib(target.pid))
        await asyncio.sleep(0.25)
    found = await client
    counted = {k: v - counted_before[k] for k, v in counters(target.metrics_port).items()}
    attacker.terminate()
    attacker.join(10)
    await asyncio.sleep(5.0)
    after = tree_memory_kib(target.pid)
    tally = {k: v for k, v in shared.items() if k != "up"}
    print("  attacker's tally: " + ", ".join(f"{k} {v:,}" for k, v in tally.items()))
    return report(found, baseline, counted, (before, peak, after), target.limit_mib)


def report(
    found: dict[str, Calls],
    baseline: dict[str, Calls],
    counted: dict[str, float],
    memory: tuple[int, int, int],
    limit_mib: int,
) -> dict[str, Any]:
    lost = {name: len(calls.failures) for name, calls in found.items()}
    for name, calls in found.items():
        base = baseline[name]
        print(
            f"  {name:>14}: {len(calls.latencies)} calls, {lost[name]} lost; p50 "
            f"{calls.quantile_ms(50):.1f} ms, p99 {calls.quantile_ms(99):.1f} ms; baseline p99 "
            f"{base.quantile_ms(99):.1f} ms, x{calls.quantile_ms(99) / base.quantile_ms(99):.2f} "
            f"{calls.failures[:2]}"
        )
    print(
        "  webhook's connection counters: " + ", ".join(f"{k} {v:,.0f}" for k, v in counted.items())
    )
    before, peak, after = (kib / 1024 for kib in memory)
    print(
        f"  RSS of the webhook's process tree: {before:.0f} MiB before, peak {peak:.0f} MiB, "
        f"{after:.0f} MiB 5 s after (limit {limit_mib} MiB)"
    )
    print(
        f"  targets: 0 lost {'meets' if not sum(lost.values()) else 'MISSES'}; peak < "
        f"{limit_mib // 2} MiB {'meets' if peak < limit_mib / 2 else 'MISSES'}"
    )
    new = found["new connection"]
    return {
        "lost": lost,
        "p50_ms": new.quantile_ms(50),
        "p99_ms": new.quantile_ms(99),
        "p99_ratio": new.quantile_ms(99) / baseline["new connection"].quantile_ms(99),
        "failed": sum(lost.values()),
        "before_mib": before,
        "peak_mib": peak,
        "after_mib": after,
        **counted,
    }


def run(
    workers: int,
    hostile_count: int,
    reopen: bool = False,
    requests: int = 500,
    case: str = "mixed",
    review_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
) -> dict[str, Any]:
    """Start a webhook process (workers), flood it, stop it; the figures."""
    work = Path(tempfile.mkdtemp(prefix="flood-"))
    made = generate("volcano-guard", "volcano-guard", work)
    config = work / "config.yaml"
    config.write_text(json.dumps(NO_CLUSTER))
    proc = start_webhook(
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
        threading.Thread(target=drain, args=(proc,), daemon=True).start()
        time.sleep(1.0 if workers == 1 else 3.0)
        print(
            f"case {case}: webhook, {workers} process(es); {hostile_count:,} hostile connections"
            f"{', re-opened as fast as they are closed' if reopen or case == 'churn' else ''}"
            f"{f', reviews of {review_bytes:,} bytes' if case == 'largest' else ''}"
        )
        target = Target(port, metrics_port, proc.pid, made.ca_file, memory_limit_mib(workers))
        return asyncio.run(flood(target, case, hostile_count, reopen, requests, review_bytes))
    finally:
        stop(proc)


def start_webhook(*args: str) -> subprocess.Popen[str]:
    """start_cli, with the soft open-file limit of a container (OPEN_FILES)."""

    def container_limit() -> None:
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (OPEN_FILES, hard))

    return subprocess.Popen(
        [sys.executable, "-m", "volcano_guard.cli", *args],
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=container_limit,
    )


def drain(proc: subprocess.Popen[str]) -> None:
    """Read the webhook's log to its end: a full pipe would stop the process at its next
    line."""
    assert proc.stderr is not None
    for _ in proc.stderr:
        pass


def stop(proc: subprocess.Popen[str]) -> None:
    """SIGTERM, then SIGKILL: requests whose peer left mid-body can hold a graceful stop
    to its 30 s (on main as well)."""
    proc.terminate()
    try:
        proc.wait(40)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=CASES, default="mixed")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--hostile", type=int, help="default: 2,000; 2,500; 2,500; 4; 2,500")
    parser.add_argument("--reopen", action="store_true")
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument(
        "--review-bytes", type=int, default=DEFAULT_MAX_REQUEST_BYTES, help="largest: their size"
    )
    args = parser.parse_args()
    hostile_count = args.hostile or DEFAULT_HOSTILE[args.case]
    run(args.workers, hostile_count, args.reopen, args.requests, args.case, args.review_bytes)


if __name__ == "__main__":
    main()
