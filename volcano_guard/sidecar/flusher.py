"""The flusher: sends each due object's merge patch upstream and records the answer.

One asyncio task owns the schedule; each object has at most one write in flight, and a global
token bucket caps upstream write QPS, oldest pending object first.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable

import aiohttp

from volcano_guard.base.kubeconfig import TokenSource
from volcano_guard.sidecar import metrics
from volcano_guard.sidecar.coalescer import Coalescer, FlushPlan, ObjectKey, Settled
from volcano_guard.sidecar.routes import object_path

log = logging.getLogger("volcano_guard.sidecar")
MERGE_PATCH = "application/merge-patch+json"
WRITE_TIMEOUT = 10.0
# While writes are backing off and nothing else is sent, the oldest one is tried this often:
# when it lands, every backed-off write is retried at once, so they land within a few seconds
# of the upstream's return however long the outage was (their own backoff reaches 30 s).
PROBE_INTERVAL = 2.0


class TokenBucket:
    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate, self.capacity = rate, max(1.0, rate)
        self._tokens, self._clock = self.capacity, clock
        self._stamp = clock()

    def wait_time(self) -> float:
        """Seconds until a token is available; takes it when that is 0."""
        now = self._clock()
        self._tokens = min(self.capacity, self._tokens + (now - self._stamp) * self.rate)
        self._stamp = now
        if self._tokens >= 1:
            self._tokens -= 1
            return 0.0
        return (1 - self._tokens) / self.rate


class Flusher:
    def __init__(
        self,
        coalescer: Coalescer,
        session: aiohttp.ClientSession,
        upstream: str,
        tokens: TokenSource,
        max_qps: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.coalescer, self.session, self.upstream = coalescer, session, upstream
        self.tokens, self.clock = tokens, clock
        self.bucket = TokenBucket(max_qps, clock)
        self.draining = False
        self._wakeup = asyncio.Event()
        self._flights: set[asyncio.Task[None]] = set()
        self._task: asyncio.Task[None] | None = None
        self._last_sent = clock()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="flusher")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for flight in list(self._flights):
            flight.cancel()
        await asyncio.gather(*self._flights, return_exceptions=True)

    def wake(self) -> None:
        self._wakeup.set()

    async def drain(self, timeout: float) -> list[ObjectKey]:
        """Flush everything pending now (no interval wait); the keys still pending after
        timeout seconds."""
        self.draining = True
        self.wake()
        deadline = self.clock() + timeout
        while (self.coalescer.pending_count or self._flights) and self.clock() < deadline:
            await asyncio.sleep(0.02)
            self.wake()
        return self.coalescer.pending_keys()

    async def _run(self) -> None:
        while True:
            for key in self.coalescer.due(self.clock(), all_pending=self.draining) or self._probe():
                while (wait := self.bucket.wait_time()) > 0:
                    await asyncio.sleep(wait)
                self._start(key)
            metrics.PENDING_OBJECTS.set(self.coalescer.pending_count)
            self._wakeup.clear()
            wake_times = [self.coalescer.next_due_at()]
            if self.coalescer.backing_off():
                wake_times.append(self._last_sent + PROBE_INTERVAL)
            next_at = min((t for t in wake_times if t is not None), default=None)
            timeout = None if next_at is None else max(0.0, next_at - self.clock())
            if self.draining:
                timeout = 0.05 if timeout is None else min(timeout, 0.05)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wakeup.wait()

    def _probe(self) -> list[ObjectKey]:
        """The oldest backed-off write, when nothing has been sent for PROBE_INTERVAL."""
        if self._flights or self.clock() - self._last_sent < PROBE_INTERVAL:
            return []
        return self.coalescer.backing_off()[:1]

    def _start(self, key: ObjectKey) -> None:
        if not self.coalescer.is_pending(key):
            return  # settled meanwhile (e.g. dropped as stale)
        plan = self.coalescer.plan(key)
        if isinstance(plan, Settled):
            metrics.NOOP_SKIPPED.inc()
            resolve(plan)
            return
        self._last_sent = self.clock()
        flight = asyncio.create_task(self._send(plan))
        self._flights.add(flight)
        flight.add_done_callback(self._flights.discard)

    async def _send(self, plan: FlushPlan) -> None:
        headers = {
            "Content-Type": MERGE_PATCH,
            "Accept": "application/json",
            **self.tokens.authorization(),
        }
        code, body, retry_after = 0, None, None
        try:
            async with self.session.patch(
                self.upstream + object_path(plan.key, "status"),
                data=json.dumps(plan.patch),
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=WRITE_TIMEOUT),
            ) as response:
                code = response.status
                body = await _json(response)
                retry_after = _retry_after(response.headers.get("Retry-After"))
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning("status write of %s failed: %s", plan.key, exc)
        metrics.UPSTREAM_WRITES.labels(code=str(code)).inc()
        settled = self.coalescer.complete(plan, code, body, self.clock(), retry_after)
        if settled.outcome == "written":
            metrics.FLUSH_DELAY.observe(self.clock() - plan.first_at)
        elif settled.outcome == "stale":
            metrics.STALE_DROPPED.inc()
            if code == 409:
                metrics.CONFLICTS.inc()
            log.info(
                "dropped the pending status of %s: upstream answered %d (replaced or deleted)",
                plan.key,
                code,
            )
        elif settled.outcome == "failed":
            log.warning(
                "dropped the pending status of %s: upstream answered %d: %s", plan.key, code, body
            )
        resolve(settled)
        metrics.PENDING_OBJECTS.set(self.coalescer.pending_count)
        self.wake()


def resolve(settled: Settled) -> None:
    """Answer the sync-ack writers waiting on this outcome."""
    for waiter in settled.waiters:
        if isinstance(waiter, asyncio.Future) and not waiter.done():
            waiter.set_result((settled.code, settled.obj))


async def _json(response: aiohttp.ClientResponse) -> object:
    try:
        return json.loads(await response.read())
    except ValueError:
        return None


def _retry_after(value: str | None) -> float | None:
    try:
        return float(value) if value else None
    except ValueError:
        return None
