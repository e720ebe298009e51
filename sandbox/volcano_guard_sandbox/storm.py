"""Volcano's Queue status write storm (409s, a growing retry backlog), against the sandbox.

Two writers update every Queue's status over real HTTP, as Volcano's do:
- a *controller* that, on every pod event, recomputes the queue's pod counts and writes them
  with UpdateStatus (PUT /status carrying the resourceVersion its cache holds), re-queuing each
  conflicted request through a client-go-style rate-limited work queue (per-item exponential
  5 ms .. 1000 s, overall bucket 10 QPS / burst 100; requests are distinct per pod event, as
  Volcano's queue controller requests are, so they do not collapse into one key);
- a *scheduler* that writes `status.allocated` for every queue once per 1 s session.
Each reads from an informer-style cache fed by a LIST and WATCH through its own endpoint and
applied after a lag (informers lag under load; the lag is what makes writes stale). Pod churn is
simulated in-process (pods arrive, run, complete); only the status writes and informers are HTTP.

Run direct (each writer talks to the sandbox) and through one sidecar per writer, and compare
upstream writes, 409 conflicts, the retry backlog, sidecar memory and how long the final status
takes to match the writers' last desired state.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import heapq
import itertools
import json
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from kubernetes import client, config

from volcano_guard.base.informer import Informer, wait_synced
from volcano_guard.base.tls import client_context
from volcano_guard_sandbox import REPO_ROOT
from volcano_guard_sandbox.processes import cpu_seconds, free_port, memory_kib, wait_for_port

Q_PATH = "/apis/scheduling.volcano.sh/v1beta1/queues"


@dataclass(frozen=True, kw_only=True)
class StormSettings:
    queues: int = 10
    pods_per_minute: float = 20_000
    seconds: float = 30.0  # how long the writers run
    informer_lag: float = 0.05
    session_interval: float = 1.0  # the scheduler's
    flush_interval: float = 1.0  # the sidecar's
    pod_lifetime: float = 5.0  # seconds a pod runs before it completes
    controller_workers: int = 3
    settle_timeout: float = 10.0  # how long to wait for the final status after the writers stop
    seed: int = 1


@dataclass
class StormResult:
    mode: str
    queues: int
    upstream_writes: int
    conflicts: int
    max_backlog: int
    final_backlog: int
    peak_rss_mib: float | None  # of the sidecars (the largest), None when direct
    cpu_cores: float | None  # the busier sidecar's CPU time over the run, in cores
    staleness: float | None  # seconds after the writers stopped; None: did not converge
    floor: int  # the fewest upstream writes that carry every change (see floor_writes)
    intended: int  # status writes the writers made


# -- the simulated cluster --------------------------------------------------------------------


@dataclass
class Churn:
    """Pods arriving, running and completing, spread over the queues; the truth both writers
    compute their desired status from."""

    queues: list[str]
    rng: random.Random
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    transitions_due: int = 0  # pod transitions scheduled but not yet happened

    def __post_init__(self) -> None:
        for queue in self.queues:
            self.counts[queue] = {"pending": 0, "running": 0, "completed": 0}

    def controller_status(self, queue: str) -> dict[str, Any]:
        return {"state": "Open", **self.counts[queue]}

    def allocated(self, queue: str) -> dict[str, str]:
        running = self.counts[queue]["running"]
        return {"cpu": str(running * 2), "memory": f"{running * 4}Gi"}


class RateLimitedQueue:
    """client-go's workqueue with DefaultControllerRateLimiter: MaxOf(per-item exponential
    5 ms .. 1000 s, overall token bucket 10 QPS / burst 100)."""

    def __init__(self) -> None:
        self._ready: asyncio.Queue[Any] = asyncio.Queue()
        self._waiting: list[tuple[float, int, Any]] = []
        self._failures: dict[Any, int] = {}
        self._tokens, self._stamp = 100.0, time.monotonic()
        self._counter = itertools.count()
        self._wake = asyncio.Event()

    def __len__(self) -> int:
        return self._ready.qsize() + len(self._waiting)

    def add(self, item: Any) -> None:
        self._ready.put_nowait(item)

    def add_rate_limited(self, item: Any) -> None:
        failures = self._failures.get(item, 0)
        self._failures[item] = failures + 1
        per_item = min(0.005 * 2**failures, 1000.0)
        now = time.monotonic()
        self._tokens = min(100.0, self._tokens + (now - self._stamp) * 10)
        self._stamp = now
        self._tokens -= 1  # a reservation: the deficit is the wait
        bucket = max(0.0, -self._tokens / 10)
        heapq.heappush(self._waiting, (now + max(per_item, bucket), next(self._counter), item))
        self._wake.set()

    def forget(self, item: Any) -> None:
        self._failures.pop(item, None)

    async def get(self) -> Any:
        return await self._ready.get()

    async def run_delays(self) -> None:
        while True:
            now = time.monotonic()
            while self._waiting and self._waiting[0][0] <= now:
                self._ready.put_nowait(heapq.heappop(self._waiting)[2])
            self._wake.clear()
            timeout = self._waiting[0][0] - now if self._waiting else None
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wake.wait()


def queue_informer(api_client: client.ApiClient) -> Informer[dict[str, Any]]:
    """The project's one informer, listing and watching Queues through api_client."""
    api = client.CustomObjectsApi(api_client)
    list_queues = functools.partial(
        api.list_cluster_custom_object, "scheduling.volcano.sh", "v1beta1", "queues"
    )
    return Informer(
        f"queues via {api_client.configuration.host}", list_queues, extract=lambda obj: obj
    )


@dataclass(frozen=True)
class Endpoint:
    """Where one writer sends its writes and its informer's LIST and WATCH."""

    url: str
    session: aiohttp.ClientSession
    api_client: client.ApiClient


async def sidecar_endpoint(
    stack: contextlib.AsyncExitStack, url: str, kubeconfig: Path | None
) -> Endpoint:
    """A plain endpoint, or, with the kubeconfig a sidecar wrote, one as its injected app
    uses it: HTTPS verified against its CA, with its token."""
    if kubeconfig is None:
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        api_client = client.ApiClient(client.Configuration(host=url))
    else:
        await asyncio.to_thread(_wait_for_file, kubeconfig)
        api_client = config.new_client_from_config(config_file=str(kubeconfig))
        written = json.loads(kubeconfig.read_text())
        ca_file = written["clusters"][0]["cluster"]["certificate-authority"]
        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, ssl=client_context(ca_file)),
            headers={"Authorization": f"Bearer {written['users'][0]['user']['token']}"},
        )
    await stack.enter_async_context(session)
    return Endpoint(api_client.configuration.host, session, api_client)


def _wait_for_file(path: Path, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{path} was not written within {timeout:g}s")
        time.sleep(0.02)


class LaggedCache:
    """A writer's cache: its informer's snapshot as it stood `lag` seconds ago (informers lag
    under load; the lag is what makes writes stale)."""

    def __init__(self, informer: Informer[dict[str, Any]], lag: float) -> None:
        self.informer, self.lag = informer, lag
        self.items: Mapping[str, dict[str, Any]] = {}

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            loop.call_later(self.lag, setattr, self, "items", self.informer.snapshot.items)
            await asyncio.sleep(0.005)


# -- the writers -------------------------------------------------------------------------------


@dataclass
class WriterStats:
    writes: int = 0
    conflicts: int = 0
    max_backlog: int = 0
    # per queue: monotonic times of writes that changed the intended status (for the floor)
    change_times: dict[str, list[float]] = field(default_factory=dict)


async def put_status(session: aiohttp.ClientSession, url: str, obj: dict[str, Any]) -> int:
    name = obj["metadata"]["name"]
    async with session.put(
        f"{url}{Q_PATH}/{name}/status",
        data=json.dumps(obj),
        headers={"Content-Type": "application/json"},
    ) as response:
        await response.read()
        return response.status


class Controller:
    """Volcano's queue controller, as far as its status writes go."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        url: str,
        cache: LaggedCache,
        churn: Churn,
        events: asyncio.Queue[str],
        workers: int,
    ) -> None:
        self.session, self.url, self.cache, self.churn = session, url, cache, churn
        self.events, self.workers = events, workers
        self.queue = RateLimitedQueue()
        self.stats = WriterStats()
        self._last_sent: dict[str, dict[str, Any]] = {}
        self._requests = itertools.count()

    async def run(self) -> None:
        tasks = [
            asyncio.create_task(self._feed()),
            asyncio.create_task(self.queue.run_delays()),
            asyncio.create_task(self._watch_backlog()),
        ]
        tasks += [asyncio.create_task(self._work()) for _ in range(self.workers)]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()

    async def _feed(self) -> None:
        while True:  # one request per pod event, as Volcano's queue controller enqueues them
            self.queue.add((await self.events.get(), next(self._requests)))

    async def _watch_backlog(self) -> None:
        while True:
            self.stats.max_backlog = max(self.stats.max_backlog, len(self.queue))
            await asyncio.sleep(0.05)

    async def _work(self) -> None:
        while True:
            item = await self.queue.get()
            name = item[0]
            cached = self.cache.items.get(name)
            if cached is None:
                self.queue.add_rate_limited(item)
                continue
            obj = copy.deepcopy(cached)
            desired = self.churn.controller_status(name)
            obj["status"] = {**(obj.get("status") or {}), **desired}
            if self._last_sent.get(name) != desired:
                self.stats.change_times.setdefault(name, []).append(time.monotonic())
                self._last_sent[name] = desired
            self.stats.writes += 1
            code = await put_status(self.session, self.url, obj)
            if code == 409:
                self.stats.conflicts += 1
            if code >= 300:
                self.queue.add_rate_limited(item)
            else:
                self.queue.forget(item)


async def scheduler(
    session: aiohttp.ClientSession,
    url: str,
    cache: LaggedCache,
    churn: Churn,
    stats: WriterStats,
    interval: float,
) -> None:
    last_sent: dict[str, dict[str, str]] = {}
    while True:
        started = time.monotonic()
        for name in churn.queues:
            cached = cache.items.get(name)
            if cached is None:
                continue
            obj = copy.deepcopy(cached)
            allocated = churn.allocated(name)
            obj["status"] = {**(obj.get("status") or {}), "allocated": allocated}
            if last_sent.get(name) != allocated:
                stats.change_times.setdefault(name, []).append(time.monotonic())
                last_sent[name] = allocated
            stats.writes += 1
            if await put_status(session, url, obj) == 409:
                stats.conflicts += 1  # the scheduler does not retry: the next session rewrites
        await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))


async def simulate_churn(
    churn: Churn, settings: StormSettings, events: asyncio.Queue[str], until: float
) -> None:
    """Pods arrive until `until`, each pending -> running -> completed, one event a step;
    returns when the last pod has completed."""
    loop = asyncio.get_running_loop()
    tick, carry = 0.05, 0.0

    def transition(queue: str, old: str, new: str) -> None:
        churn.counts[queue][old] -= 1
        churn.counts[queue][new] += 1
        churn.transitions_due -= 1
        events.put_nowait(queue)

    while loop.time() < until:
        carry += settings.pods_per_minute / 60.0 * tick
        arrivals, carry = int(carry), carry - int(carry)
        for _ in range(arrivals):
            queue = churn.rng.choice(churn.queues)
            churn.counts[queue]["pending"] += 1
            events.put_nowait(queue)
            start = churn.rng.uniform(0.1, 1.0)
            end = start + settings.pod_lifetime * churn.rng.uniform(0.5, 1.5)
            churn.transitions_due += 2
            loop.call_later(start, transition, queue, "pending", "running")
            loop.call_later(end, transition, queue, "running", "completed")
        await asyncio.sleep(tick)
    while churn.transitions_due:
        await asyncio.sleep(tick)


def floor_writes(change_times: dict[str, list[float]], interval: float) -> int:
    """Per queue, one write per flush window in which the intent changed (+ the first)."""
    total = 0
    for times in change_times.values():
        windows = {int((t - times[0]) // interval) for t in times}
        total += len(windows)
    return total


# -- processes ----------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def _process(args: list[str], port: int) -> AsyncIterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "volcano_guard.cli", *args],
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        await asyncio.to_thread(wait_for_port, port, proc)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


# -- one run ----------------------------------------------------------------------------------


async def run_storm(
    settings: StormSettings, through_sidecar: bool, *, tls: bool = False
) -> StormResult:
    """One run; tls: each sidecar writes a kubeconfig and its writer uses it, as injected."""
    sandbox_port = free_port()
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(
            _process(["sandbox", "--listen", f"127.0.0.1:{sandbox_port}"], sandbox_port)
        )
        sandbox = f"http://127.0.0.1:{sandbox_port}"
        session = await stack.enter_async_context(
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        )
        direct = Endpoint(sandbox, session, client.ApiClient(client.Configuration(host=sandbox)))
        endpoints, sidecars = [direct, direct], []
        if through_sidecar:
            endpoints = []
            folder = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            for n in range(2):
                port, metrics_port = free_port(), free_port()
                kubeconfig = folder / str(n) / "kubeconfig" if tls else None
                written = ["--write-kubeconfig", str(kubeconfig)] if kubeconfig else []
                sidecars.append(
                    await stack.enter_async_context(
                        _process(
                            [
                                "sidecar",
                                "--upstream",
                                sandbox,
                                "--listen",
                                f"127.0.0.1:{port}",
                                "--metrics-listen",
                                f"127.0.0.1:{metrics_port}",
                                "--flush-interval",
                                str(settings.flush_interval),
                                "--max-upstream-qps",
                                "1000",
                                *written,
                            ],
                            port,
                        )
                    )
                )
                scheme = "https" if tls else "http"
                endpoints.append(
                    await sidecar_endpoint(stack, f"{scheme}://127.0.0.1:{port}", kubeconfig)
                )
        names = [f"queue-{i:03d}" for i in range(settings.queues)]
        for name in names:
            async with session.post(
                sandbox + Q_PATH,
                json={
                    "apiVersion": "scheduling.volcano.sh/v1beta1",
                    "kind": "Queue",
                    "metadata": {"name": name},
                    "spec": {"weight": 1},
                },
            ) as response:
                await response.read()
        churn = Churn(names, random.Random(settings.seed))
        informers = [queue_informer(endpoint.api_client) for endpoint in endpoints]
        for informer in informers:
            informer.start()
            stack.callback(informer.stop)
            await asyncio.to_thread(wait_synced, informer, 10)
        caches = [LaggedCache(informer, settings.informer_lag) for informer in informers]
        events: asyncio.Queue[str] = asyncio.Queue()
        scheduler_stats = WriterStats()
        background = [asyncio.create_task(cache.run()) for cache in caches]
        await asyncio.sleep(settings.informer_lag * 2)  # the lagged caches have their first list
        loop = asyncio.get_running_loop()
        started = loop.time()
        stop_at = started + settings.seconds
        the_controller = Controller(
            endpoints[0].session,
            endpoints[0].url,
            caches[0],
            churn,
            events,
            settings.controller_workers,
        )
        controller_stats = the_controller.stats
        writers = [
            asyncio.create_task(the_controller.run()),
            asyncio.create_task(
                scheduler(
                    endpoints[1].session,
                    endpoints[1].url,
                    caches[1],
                    churn,
                    scheduler_stats,
                    settings.session_interval,
                )
            ),
        ]
        await simulate_churn(churn, settings, events, stop_at)
        # The last pod has completed; the writers go on (the controller works off its backlog,
        # the scheduler keeps its sessions) and we time how long the server takes to show the
        # final truth.
        staleness = await _time_to_converge(session, sandbox, churn, settings.settle_timeout)
        backlog = len(the_controller.queue)
        for task in writers + background:
            task.cancel()
        await asyncio.gather(*writers, *background, return_exceptions=True)
        async with session.get(f"{sandbox}/sandbox/stats") as response:
            stats = await response.json()
        rss = max((memory_kib(p.pid, "VmHWM") / 1024 for p in sidecars), default=None)
        elapsed = loop.time() - started
        cpu = max((cpu_seconds(p.pid) / elapsed for p in sidecars), default=None)
    floor = floor_writes(controller_stats.change_times, settings.flush_interval) + floor_writes(
        scheduler_stats.change_times, settings.flush_interval
    )
    return StormResult(
        mode=("sidecar TLS" if tls else "sidecar") if through_sidecar else "direct",
        queues=settings.queues,
        upstream_writes=stats["writes"].get("queues/status", 0),
        conflicts=stats["conflicts"].get("queues/status", 0),
        max_backlog=controller_stats.max_backlog,
        final_backlog=backlog,
        peak_rss_mib=rss,
        cpu_cores=cpu,
        staleness=staleness,
        floor=floor,
        intended=controller_stats.writes + scheduler_stats.writes,
    )


async def _time_to_converge(
    session: aiohttp.ClientSession, sandbox: str, churn: Churn, timeout: float
) -> float | None:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        async with session.get(sandbox + Q_PATH) as response:
            listed = await response.json()
        if all(_matches(obj, churn) for obj in listed["items"]):
            return time.monotonic() - started
        await asyncio.sleep(0.05)
    return None


def _matches(obj: dict[str, Any], churn: Churn) -> bool:
    name = obj["metadata"]["name"]
    status = obj.get("status") or {}
    wanted = {**churn.controller_status(name), "allocated": churn.allocated(name)}
    return all(status.get(key) == value for key, value in wanted.items())


def format_results(results: list[StormResult]) -> str:
    header = (
        f"{'queues':>6} {'mode':<16}{'writes':>9}{'x floor':>8}{'409s':>8}"
        f"{'backlog max/end':>17}{'sidecar RSS':>13}{'CPU':>7}{'converged':>12}"
    )
    lines = [header, "-" * len(header)]
    for r in results:
        rss = f"{r.peak_rss_mib:.0f} MiB" if r.peak_rss_mib is not None else "-"
        cpu = f"{r.cpu_cores:.2f}" if r.cpu_cores is not None else "-"
        converged = f"{r.staleness:.2f}s" if r.staleness is not None else "NO"
        lines.append(
            f"{r.queues:>6} {r.mode:<16}{r.upstream_writes:>9,}"
            f"{r.upstream_writes / max(1, r.floor):>8.2f}{r.conflicts:>8,}"
            f"{f'{r.max_backlog}/{r.final_backlog}':>17}{rss:>13}{cpu:>7}"
            f"{converged:>12}"
        )
    return "\n".join(lines)
