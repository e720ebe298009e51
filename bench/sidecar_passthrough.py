"""What the sidecar costs everything it does not coalesce: a large LIST, a busy watch, a GET.

An upstream process serves a 200 MB protobuf-typed LIST body, a watch stream of timestamped
events and a small GET; a sidecar process relays them. The same client reads each directly
(the baseline) and through the sidecar, in the same run, and prints both and the difference:
once through a plain sidecar, once through one as injected (HTTPS with the kubeconfig it wrote).

    .venv/bin/python -m bench.sidecar_passthrough [--list-mb 200] [--events 2000] [--gets 2000]
Targets (issue 4): LIST >= 100 MB/s with < 50 MB sidecar RSS growth; < 1 ms added median delay
at 2,000 watch events/s; < 1 ms added median GET latency.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from volcano_guard.base.tls import client_context
from volcano_guard_sandbox.processes import (
    cpu_seconds,
    free_port,
    memory_kib,
    wait_for_port,
)

ROOT = Path(__file__).resolve().parent.parent

UPSTREAM = r"""
import asyncio, json, sys, time
from aiohttp import web
CHUNK = b"\x0a\x08k8s-item" * 6553  # ~64 KiB of protobuf-looking bytes
async def big(request):
    size = int(request.query["mb"]) * 1024 * 1024
    response = web.StreamResponse(headers={"Content-Type": "application/vnd.kubernetes.protobuf"})
    await response.prepare(request)
    sent = 0
    while sent < size:
        await response.write(CHUNK)
        sent += len(CHUNK)
    await response.write_eof()
    return response
async def watch(request):
    rate, count = float(request.query["rate"]), int(request.query["count"])
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    await response.prepare(request)
    start = time.perf_counter()
    for n in range(count):
        delay = start + n / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        event = {"type": "MODIFIED", "object": {"kind": "Pod", "metadata": {
            "name": f"p{n}", "resourceVersion": str(n)}, "sent": time.time()}}
        await response.write(json.dumps(event).encode() + b"\n")
    await response.write_eof()
    return response
async def small(request):
    return web.json_response({"kind": "Pod", "metadata": {"name": "p"}})
app = web.Application()
app.router.add_get("/big", big)
app.router.add_get("/api/v1/pods", watch)
app.router.add_get("/small", small)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
"""


def start(argv: list[str], port: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, *argv], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    wait_for_port(port, proc, timeout=15)
    return proc


async def read_list(session: aiohttp.ClientSession, url: str) -> tuple[float, int]:
    started = time.perf_counter()
    total = 0
    async with session.get(url) as response:
        async for chunk in response.content.iter_any():
            total += len(chunk)
    return total / (time.perf_counter() - started) / 1e6, total


async def watch_delays(session: aiohttp.ClientSession, url: str) -> list[float]:
    delays = []
    async with session.get(url, timeout=aiohttp.ClientTimeout()) as response:
        async for line in response.content:
            now = time.time()
            delays.append((now - json.loads(line)["object"]["sent"]) * 1000)
    return delays


async def get_latencies(session: aiohttp.ClientSession, url: str, count: int) -> list[float]:
    latencies = []
    for _ in range(count):
        started = time.perf_counter()
        async with session.get(url) as response:
            await response.read()
        latencies.append((time.perf_counter() - started) * 1000)
    return latencies


@dataclass(frozen=True)
class Sidecar:
    """A sidecar process and how its client reaches it."""

    proc: subprocess.Popen
    url: str
    session: aiohttp.ClientSession


async def start_sidecar(
    stack: contextlib.AsyncExitStack, upstream: str, kubeconfig: Path | None
) -> Sidecar:
    """Plain HTTP without client authentication, or, with kubeconfig, as injected: it writes a
    kubeconfig and its client uses it (HTTPS verified against its CA, its token)."""
    port, metrics_port = free_port(), free_port()
    written = ["--write-kubeconfig", str(kubeconfig)] if kubeconfig else []
    argv = ["-m", "volcano_guard.cli", "sidecar", "--upstream", upstream, "--listen"]
    proc = start(
        [*argv, f"127.0.0.1:{port}", "--metrics-listen", f"127.0.0.1:{metrics_port}", *written],
        port,
    )
    stack.callback(stop, proc)
    if kubeconfig is None:
        session = aiohttp.ClientSession(auto_decompress=False)
        url = f"http://127.0.0.1:{port}"
    else:
        while not kubeconfig.exists():  # written once its listener is up
            await asyncio.sleep(0.02)
        document = json.loads(kubeconfig.read_text())
        session = aiohttp.ClientSession(
            auto_decompress=False,
            connector=aiohttp.TCPConnector(
                ssl=client_context(document["clusters"][0]["cluster"]["certificate-authority"])
            ),
            headers={"Authorization": f"Bearer {document['users'][0]['user']['token']}"},
        )
        url = f"https://127.0.0.1:{port}"
    await stack.enter_async_context(session)
    return Sidecar(proc, url, session)


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    proc.wait(10)


async def measure(
    direct: aiohttp.ClientSession, upstream: str, sidecar: Sidecar, args: argparse.Namespace
) -> dict[str, float]:
    """LIST, WATCH and GET through one sidecar, each next to the same read direct."""
    via, session = sidecar.url, sidecar.session
    await get_latencies(session, via + "/small", 50)  # warm up connections
    rss_before = memory_kib(sidecar.proc.pid, "VmRSS")
    base_mbps, _ = await read_list(direct, f"{upstream}/big?mb={args.list_mb}")
    cpu_before = cpu_seconds(sidecar.proc.pid)
    via_mbps, size = await read_list(session, f"{via}/big?mb={args.list_mb}")
    cpu_list = cpu_seconds(sidecar.proc.pid) - cpu_before
    growth = (memory_kib(sidecar.proc.pid, "VmHWM") - rss_before) / 1024
    print(
        f"LIST {size / 1e6:,.0f} MB: direct {base_mbps:,.0f} MB/s, through the "
        f"sidecar {via_mbps:,.0f} MB/s ({via_mbps / base_mbps:.2f}x); sidecar peak RSS "
        f"growth {growth:,.1f} MiB, CPU {cpu_list:.2f}s"
    )
    print(
        f"  target >= 100 MB/s and < 50 MB growth: "
        f"{'meets' if via_mbps >= 100 and growth < 50 else 'MISSES'}"
    )

    count = int(args.events * args.seconds)
    query = f"/api/v1/pods?watch=1&rate={args.events}&count={count}"
    cpu_before = cpu_seconds(sidecar.proc.pid)
    direct_delays, via_delays = await asyncio.gather(
        watch_delays(direct, upstream + query), watch_delays(session, via + query)
    )
    cpu_watch = (cpu_seconds(sidecar.proc.pid) - cpu_before) / args.seconds
    added = watch_added = statistics.median(via_delays) - statistics.median(direct_delays)
    print(
        f"WATCH {args.events:,} events/s for {args.seconds:g}s: median delay direct "
        f"{statistics.median(direct_delays):.3f} ms, through the sidecar "
        f"{statistics.median(via_delays):.3f} ms (added {added:.3f} ms; p99 "
        f"{statistics.quantiles(via_delays, n=100)[98]:.3f} ms); sidecar CPU "
        f"{cpu_watch:.2f} cores; {len(via_delays):,}/{count:,} events relayed"
    )
    print(f"  target < 1 ms added median: {'meets' if added < 1 else 'MISSES'}")

    direct_gets = await get_latencies(direct, upstream + "/small", args.gets)
    via_gets = await get_latencies(session, via + "/small", args.gets)
    added = statistics.median(via_gets) - statistics.median(direct_gets)
    print(
        f"GET x{args.gets:,}: median direct {statistics.median(direct_gets):.3f} ms, "
        f"through the sidecar {statistics.median(via_gets):.3f} ms (added "
        f"{added:.3f} ms)"
    )
    print(f"  target < 1 ms added median: {'meets' if added < 1 else 'MISSES'}")
    return {
        "list": via_mbps / base_mbps,
        "list_cpu": cpu_list,
        "watch": watch_added,
        "watch_cpu": cpu_watch,
        "get": statistics.median(via_gets) / statistics.median(direct_gets),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list-mb", type=int, default=200)
    parser.add_argument("--events", type=int, default=2000, help="watch events per second")
    parser.add_argument("--seconds", type=float, default=5.0, help="watch duration")
    parser.add_argument("--gets", type=int, default=2000)
    args = parser.parse_args()
    up_port = free_port()
    upstream = f"http://127.0.0.1:{up_port}"
    async with contextlib.AsyncExitStack() as stack:
        stack.callback(stop, start(["-c", UPSTREAM, str(up_port)], up_port))
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        direct = await stack.enter_async_context(aiohttp.ClientSession(auto_decompress=False))
        figures = []
        for title, kubeconfig in (
            ("plain HTTP, clients not authenticated", None),
            (
                "TLS as injected (--write-kubeconfig: HTTPS, the written token)",
                folder / "kubeconfig",
            ),
        ):
            print(f"# {title}")
            sidecar = await start_sidecar(stack, upstream, kubeconfig)
            figures.append(await measure(direct, upstream, sidecar, args))
        plain, tls = figures
        print(
            f"TLS next to plain (each against direct): LIST {tls['list']:.2f}x vs "
            f"{plain['list']:.2f}x of direct (sidecar CPU {tls['list_cpu']:.2f}s vs "
            f"{plain['list_cpu']:.2f}s); WATCH added {tls['watch']:.3f} vs {plain['watch']:.3f} ms "
            f"(CPU {tls['watch_cpu']:.2f} vs {plain['watch_cpu']:.2f} cores); GET median "
            f"{tls['get']:.2f}x vs {plain['get']:.2f}x of direct"
        )


if __name__ == "__main__":
    asyncio.run(main())
