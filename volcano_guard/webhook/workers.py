"""`webhook --workers N`: N webhook processes share the admission port, under one parent.

One Python process uses one core; the kernel spreads connections over processes that listen on the
same port with SO_REUSEPORT. Each worker is a whole webhook (its own caches, certificate reloader
and metrics, on a loopback port). The parent owns the metrics port: /metrics sums the workers'
counters and histograms (gauges: the highest value; process memory: the sum, its own included),
/readyz is ready when every worker is, /healthz when every worker is alive. SIGTERM is passed on
and each worker drains its own requests. A worker that dies takes the parent down with it (exit 1),
so the kubelet restarts the pod instead of it running on with fewer workers than configured; a
parent that dies (even by SIGKILL) takes its workers with it, so none serves on without one.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import multiprocessing
import os
import signal
import socket
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from volcano_guard.base.listen import Listen, unusable
from volcano_guard.base.metrics import METRICS_IDLE_TIMEOUT, metrics_site

log = logging.getLogger("volcano_guard.webhook.workers")
# A worker's entry point: (its arguments, the pipe to report its bound ports on).
WorkerMain = Callable[[Any, Connection], None]
START_TIMEOUT = 60.0  # a worker imports everything and starts its caches' threads
SCRAPE_TIMEOUT = 5.0
# The parent's own process metrics, merged with its workers' (so memory counts the whole pod).
_PARENT = CollectorRegistry()
ProcessCollector(registry=_PARENT)


class WorkerError(RuntimeError):
    """A worker did not start."""


@dataclass(frozen=True)
class Worker:
    process: BaseProcess
    metrics_port: int


@contextmanager
def reserved_port(listen: Listen) -> Iterator[int]:
    """The admission port every worker binds. Port 0 is resolved once here, by a bound but not
    listening SO_REUSEPORT socket held until the workers listen, so they all get the same one."""
    with socket.socket(socket.AF_INET6 if ":" in listen.host else socket.AF_INET) as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:
            holder.bind((listen.host, listen.port))
        except OSError as exc:
            raise unusable("--listen", listen, exc) from None
        yield holder.getsockname()[1]


def start_workers(count: int, target: WorkerMain, args: Any) -> list[Worker]:
    """Spawn count workers and wait until each listens; WorkerError if one does not."""
    context = multiprocessing.get_context("spawn")  # no fork: the parent may hold threads
    started = []
    for index in range(count):
        reader, writer = context.Pipe(duplex=False)
        process = context.Process(
            target=_worker, args=(target, args, writer, os.getpid()), name=f"webhook-worker-{index}"
        )
        process.start()
        writer.close()
        started.append((process, reader))
    workers = []
    try:
        for process, reader in started:
            if not reader.poll(START_TIMEOUT):
                raise WorkerError(f"{process.name} did not start within {START_TIMEOUT:.0f}s")
            try:
                _, metrics_port = reader.recv()
            except EOFError:
                process.join(5)
                raise WorkerError(
                    f"{process.name} exited during start-up (exit code {process.exitcode})"
                ) from None
            workers.append(Worker(process, metrics_port))
    except WorkerError:
        stop_workers([process for process, _ in started], timeout=5)
        raise
    return workers


def _worker(target: WorkerMain, args: Any, report: Connection, parent: int) -> None:
    stop_with_parent(parent)
    target(args, report)


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def stop_with_parent(parent: int) -> None:
    """Have the kernel send this process SIGTERM (a graceful drain) when its parent dies, however
    it dies; if it already has, drain now. Linux only: elsewhere a SIGKILLed parent leaves its
    workers running, as it would without this."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        log.warning("cannot ask to stop with the parent: %s", os.strerror(ctypes.get_errno()))
    elif os.getppid() != parent:  # it died before the request took effect
        os.kill(os.getpid(), signal.SIGTERM)


def stop_workers(processes: list[BaseProcess], timeout: float) -> None:
    """SIGTERM every worker, wait up to timeout for their drains, then kill what is left."""
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(timeout)
        if process.is_alive():
            log.warning("%s did not stop within %.0fs; killing it", process.name, timeout)
            process.kill()
            process.join()


async def supervise(
    workers: list[Worker], metrics_socket: socket.socket, shutdown_timeout: float
) -> int:
    """Serve the metrics port (bound before the workers started, so that an address in use
    starts none) until SIGTERM/SIGINT (exit status 0) or a worker dies (1)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    processes = [worker.process for worker in workers]
    died: asyncio.Future[Any] = loop.run_in_executor(
        None, wait, [process.sentinel for process in processes]
    )
    runner = web.AppRunner(
        aggregator_app(workers), access_log=None, keepalive_timeout=METRICS_IDLE_TIMEOUT
    )
    await runner.setup()
    host, port = metrics_socket.getsockname()[:2]
    await metrics_site(runner, Listen(host, port), metrics_socket).start()
    log.info("%d webhook workers; merged metrics on http://%s:%d", len(workers), host, port)
    stopping: asyncio.Future[Any] = asyncio.ensure_future(stop.wait())
    await asyncio.wait([stopping, died], return_when=asyncio.FIRST_COMPLETED)
    status = 0
    if not stop.is_set():
        dead = [w.process.name for w in workers if not w.process.is_alive()]
        log.error("%s exited; stopping the other workers", ", ".join(dead))
        status = 1
    stopping.cancel()
    await loop.run_in_executor(None, stop_workers, processes, shutdown_timeout + 5)
    await runner.cleanup()
    return status


def aggregator_app(workers: list[Worker]) -> web.Application:
    """The parent's metrics port: GET /metrics, /healthz, /readyz over all workers."""

    async def get_all(session: aiohttp.ClientSession, path: str) -> list[tuple[int, str]]:
        async def one(worker: Worker) -> tuple[int, str]:
            url = f"http://127.0.0.1:{worker.metrics_port}{path}"
            try:
                async with session.get(url) as response:
                    return response.status, await response.text()
            except (aiohttp.ClientError, TimeoutError) as exc:
                return 503, f"{worker.process.name}: {exc!r}"

        return await asyncio.gather(*(one(worker) for worker in workers))

    async def metrics(_: web.Request) -> web.Response:
        async with _session() as session:
            answers = await get_all(session, "/metrics")
        failed = [text for status, text in answers if status != 200]
        if failed:
            return web.Response(status=503, text="; ".join(failed))
        texts = [text for _, text in answers] + [generate_latest(_PARENT).decode()]
        body = generate_latest(_Families(merge_metrics(texts)))
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def readyz(_: web.Request) -> web.Response:
        async with _session() as session:
            answers = await get_all(session, "/readyz")
        not_ready = [
            f"{w.process.name}: {text.strip()}"
            for w, (status, text) in zip(workers, answers, strict=True)
            if status != 200
        ]
        if not_ready:
            return web.Response(status=503, text="not ready: " + "; ".join(not_ready))
        return web.Response(text="ok")

    async def healthz(_: web.Request) -> web.Response:
        dead = [w.process.name for w in workers if not w.process.is_alive()]
        if dead:
            return web.Response(status=503, text=f"{', '.join(dead)} exited")
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/healthz", healthz)
    return app


def _session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=SCRAPE_TIMEOUT))


# How the parent merges one sample that several processes export (anything else is summed):
# when a series began is its earliest start, a gauge its highest value, but for the gauges
# that add up over the pod's processes (its memory, its open files, its open connections).
_EARLIEST = ("_created", "process_start_time_seconds")
_SUMMED_GAUGES = frozenset(
    {
        "process_resident_memory_bytes",
        "process_virtual_memory_bytes",
        "process_open_fds",
        "volcano_guard_connections_open",
    }
)


def merge_metrics(texts: list[str]) -> list[Metric]:
    """Processes' exposition texts -> one set of families: samples with the same name and
    labels are summed, except `_created` and start times (the earliest) and gauges (the
    highest, or the sum for memory and open files). prometheus_client exposes a counter's
    `_created` as a gauge family of its own, so the name is looked at before the type."""
    merged: dict[str, Metric] = {}
    values: dict[tuple[str, str, tuple[tuple[str, str], ...]], float] = {}
    for text in texts:
        for family in text_string_to_metric_families(text):
            merged.setdefault(family.name, Metric(family.name, family.documentation, family.type))
            for sample in family.samples:
                key = (family.name, sample.name, tuple(sorted(sample.labels.items())))
                if key not in values:
                    values[key] = sample.value
                elif sample.name.endswith(_EARLIEST):
                    values[key] = min(values[key], sample.value)
                elif family.type == "gauge" and sample.name not in _SUMMED_GAUGES:
                    values[key] = max(values[key], sample.value)
                else:
                    values[key] += sample.value
    for (family_name, sample_name, labels), value in values.items():
        merged[family_name].add_sample(sample_name, dict(labels), value)
    return list(merged.values())


class _Families:
    """What generate_latest needs from a registry: collect()."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> list[Metric]:
        return self._families
