"""Sandbox API server throughput and memory, so later benchmarks know it is not the bottleneck.

Runs the sandbox as its own process (pinned to one core when the machine has two), drives it
from this process over loopback with keep-alive connections, and prints requests/s for GET of a
pod and for status PUT of a queue, next to a baseline: a bare aiohttp server answering the same
bytes from memory, measured by the same client in the same run. Then the memory 100k pods take
in a fresh store (RSS growth of a child process).

    .venv/bin/python -m bench.sandbox_bench [--seconds 5] [--pods 100000]
Target (issue 3): > 3,000 simple requests/s on one core; 100k pods well under 1 GiB.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import aiohttp

from volcano_guard_sandbox.processes import free_port, memory_kib, wait_for_port

ROOT = Path(__file__).resolve().parent.parent
Q = "/apis/scheduling.volcano.sh/v1beta1/queues"
CONCURRENCY = 32


def start(argv: list[str], port: int) -> subprocess.Popen:
    pin = ["taskset", "-c", "0"] if (os.cpu_count() or 1) > 1 else []
    proc = subprocess.Popen(
        [*pin, sys.executable, *argv],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for_port(port, proc, timeout=15)
    return proc


async def load(url: str, method: str, body_for, seconds: float) -> float:
    """Requests per second answered 2xx by url, CONCURRENCY keep-alive connections."""
    done = 0
    failures = 0
    connector = aiohttp.TCPConnector(limit=CONCURRENCY)
    async with aiohttp.ClientSession(connector=connector) as session:
        stop = time.perf_counter() + seconds

        async def worker(worker_id: int) -> None:
            nonlocal done, failures
            n = 0
            while time.perf_counter() < stop:
                n += 1
                data = body_for(worker_id, n)
                async with session.request(
                    method, url, data=data, headers={"Content-Type": "application/json"}
                ) as r:
                    await r.read()
                    if r.status < 300:
                        done += 1
                    else:
                        failures += 1

        started = time.perf_counter()
        await asyncio.gather(*(worker(i) for i in range(CONCURRENCY)))
        elapsed = time.perf_counter() - started
    if failures:
        print(f"  ({failures} non-2xx answers)")
    return done / elapsed


BASELINE = """
import sys
from aiohttp import web
body = open(sys.argv[2], "rb").read()
async def handler(request):
    await request.read()
    return web.Response(body=body, content_type="application/json")
app = web.Application()
app.router.add_route("*", "/{tail:.*}", handler)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
"""


async def throughput(seconds: float) -> None:
    port = free_port()
    sandbox = start(["-m", "volcano_guard.cli", "sandbox", "--listen", f"127.0.0.1:{port}"], port)
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession(base) as session:
            await session.post("/api/v1/namespaces", json={"metadata": {"name": "bench"}})
            await session.post(
                "/api/v1/namespaces/bench/pods",
                json={
                    "metadata": {"name": "p"},
                    "spec": {"containers": [{"name": "c", "image": "x"}]},
                },
            )
            await session.post(Q, json={"metadata": {"name": "q"}, "spec": {"weight": 1}})
            async with session.get("/api/v1/namespaces/bench/pods/p") as response:
                pod_bytes = await response.read()
            async with session.get(f"{Q}/q") as response:
                queue = await response.json()
        queue["metadata"].pop("resourceVersion")

        def status_body(worker: int, n: int) -> bytes:
            queue["status"] = {"allocated": {"cpu": str(worker * 1000 + n)}}  # a quantity
            return json.dumps(queue).encode()

        get_rps = await load(
            f"{base}/api/v1/namespaces/bench/pods/p", "GET", lambda *_: None, seconds
        )
        put_rps = await load(f"{base}{Q}/q/status", "PUT", status_body, seconds)
    finally:
        sandbox.terminate()
        sandbox.wait(10)

    body_file = ROOT / "bench" / ".baseline-body.json"
    body_file.write_bytes(pod_bytes)
    port = free_port()
    baseline = start(["-c", BASELINE, str(port), str(body_file)], port)
    try:
        base_get = await load(f"http://127.0.0.1:{port}/pod", "GET", lambda *_: None, seconds)
        base_put = await load(f"http://127.0.0.1:{port}/status", "PUT", status_body, seconds)
    finally:
        baseline.terminate()
        baseline.wait(10)
        body_file.unlink()
    print(f"{'request':<22}{'sandbox req/s':>15}{'bare aiohttp req/s':>20}{'ratio':>8}")
    print(f"{'GET pod':<22}{get_rps:>15,.0f}{base_get:>20,.0f}{get_rps / base_get:>8.2f}")
    print(f"{'PUT queue status':<22}{put_rps:>15,.0f}{base_put:>20,.0f}{put_rps / base_put:>8.2f}")
    verdict = "meets" if min(get_rps, put_rps) > 3000 else "MISSES"
    print(f"target > 3,000 req/s on one core: {verdict}")


def seed_pods(count: int, result: multiprocessing.Queue) -> None:
    from volcano_guard_sandbox.apiserver.runner import seed
    from volcano_guard_sandbox.apiserver.store import Store

    store = Store()
    before = memory_kib()
    started = time.perf_counter()
    pods = (
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"worker-{i}",
                "namespace": f"team-{i % 50}",
                "labels": {"volcano.sh/job-name": f"job-{i // 8}", "app": "train"},
                "annotations": {"scheduling.k8s.io/group-name": f"pg-{i // 8}"},
            },
            "spec": {
                "schedulerName": "volcano",
                "nodeName": f"node-{i % 500}",
                "containers": [
                    {
                        "name": "main",
                        "image": "pytorch/pytorch:2.3.0",
                        "resources": {
                            "requests": {"cpu": "4", "memory": "16Gi"},
                            "limits": {"cpu": "4", "memory": "16Gi"},
                        },
                    }
                ],
            },
        }
        for i in range(count)
    )
    seed(store, pods)
    result.put((memory_kib() - before, time.perf_counter() - started))


def memory(count: int) -> None:
    result: multiprocessing.Queue = multiprocessing.Queue()
    child = multiprocessing.Process(target=seed_pods, args=(count, result))
    child.start()
    grown_kib, seconds = result.get(timeout=600)
    child.join()
    mib = grown_kib / 1024
    print(
        f"\n{count:,} pods in a fresh store: RSS +{mib:,.0f} MiB "
        f"({grown_kib * 1024 / count:,.0f} bytes a pod), seeded in {seconds:.1f}s"
    )
    print(f"target well under 1 GiB: {'meets' if mib < 1024 else 'MISSES'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--pods", type=int, default=100_000)
    args = parser.parse_args()
    asyncio.run(throughput(args.seconds))
    memory(args.pods)


if __name__ == "__main__":
    main()
