"""The process's Prometheus registry and the plain-HTTP app that serves it (with health probes)."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator

from aiohttp import web
from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.utils import floatToGoString

PREFIX = "volcano_guard_"
REGISTRY = CollectorRegistry(auto_describe=True)
# process_resident_memory_bytes and the rest (Linux /proc): the sidecar's memory is the Queue
# status storm's whole concern, and a fail-closed webhook's OOM kill stops pod creation.
ProcessCollector(registry=REGISTRY)


class OwnedCounter:
    """A labelled counter with one owner: the event loop, which also serves the scrapes.

    prometheus_client's Counter takes a lock on every labels() and inc(): with the histogram
    below, a tenth of an admission's own work (BENCHMARKS.md). One owner needs no lock, so an
    increment is one dict update. Never touch it from another thread."""

    def __init__(self, name: str, documentation: str, labelnames: tuple[str, ...],
                 registry: CollectorRegistry = REGISTRY) -> None:
        self._name, self._documentation, self._labelnames = name, documentation, labelnames
        self._counts: dict[tuple[str, ...], int] = {}
        registry.register(self)

    def inc(self, *labels: str) -> None:
        """+1 for these label values, in labelnames order."""
        self._counts[labels] = self._counts.get(labels, 0) + 1

    def value(self, *labels: str) -> int:
        return self._counts.get(labels, 0)

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(self._name, self._documentation, labels=self._labelnames)
        for labels, count in self._counts.items():
            family.add_metric(labels, count)
        yield family


class OwnedHistogram:
    """An unlabelled histogram with one owner (see OwnedCounter): a bisect and two additions
    per observation."""

    def __init__(self, name: str, documentation: str, buckets: tuple[float, ...],
                 registry: CollectorRegistry = REGISTRY) -> None:
        self._name, self._documentation = name, documentation
        self._bounds = tuple(sorted(buckets))
        self._counts = [0] * (len(self._bounds) + 1)  # the last is +Inf's own
        self._sum = 0.0
        registry.register(self)

    def observe(self, amount: float) -> None:
        self._counts[bisect_left(self._bounds, amount)] += 1  # le: a bound holds its equal
        self._sum += amount

    def count(self) -> int:
        return sum(self._counts)

    def collect(self) -> Iterator[Metric]:
        cumulative, buckets = 0, []
        for bound, count in zip((*self._bounds, float("inf")), self._counts, strict=True):
            cumulative += count
            buckets.append((floatToGoString(bound), cumulative))
        yield HistogramMetricFamily(self._name, self._documentation, buckets=buckets,
                                    sum_value=self._sum)


def metrics_app(ready: Callable[[], bool] = lambda: True) -> web.Application:
    """GET /metrics, /healthz and /readyz, for the metrics port."""

    async def metrics(_: web.Request) -> web.Response:
        body = generate_latest(REGISTRY)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    add_probes(app, ready)
    return app


def add_probes(app: web.Application, ready: Callable[[], bool]) -> None:
    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def readyz(_: web.Request) -> web.Response:
        if ready():
            return web.Response(text="ok")
        return web.Response(status=503, text="not ready: caches are not synced yet")

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
