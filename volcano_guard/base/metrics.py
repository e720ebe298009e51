"""The process's Prometheus registry and the plain-HTTP app that serves it (with health probes)."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from volcano_guard.base.listen import Listen, start_site

if TYPE_CHECKING:
    from volcano_guard.base.connections import BoundedSite

PREFIX = "volcano_guard_"
REGISTRY = CollectorRegistry(auto_describe=True)
# process_resident_memory_bytes and the rest (Linux /proc): the sidecar's memory is the Queue
# status storm's whole concern, and a fail-closed webhook's OOM kill stops pod creation.
ProcessCollector(registry=REGISTRY)
METRICS_IDLE_TIMEOUT = 30.0  # a metrics port's kept-alive connections (METRICS_LIMITS)


async def start_metrics(app: web.Application, listen: Listen) -> tuple[web.AppRunner, int]:
    """app served on listen (a command's --metrics-listen): its runner, for the caller to clean
    up, and the port it bound; AddressUnusable naming the flag when it cannot bind."""
    runner = web.AppRunner(app, access_log=None, keepalive_timeout=METRICS_IDLE_TIMEOUT)
    await runner.setup()
    try:
        await start_site(metrics_site(runner, listen), "--metrics-listen", listen)
    except BaseException:
        await runner.cleanup()
        raise
    return runner, runner.addresses[0][1]


def metrics_site(
    runner: web.AppRunner, listen: Listen, sock: socket.socket | None = None
) -> BoundedSite:
    """A metrics or health port's site, under METRICS_LIMITS (on sock when bound already);
    its runner should be made with keepalive_timeout=METRICS_IDLE_TIMEOUT."""
    # Here, not at the top: connections counts its closes in this module's REGISTRY.
    from volcano_guard.base.connections import METRICS_LIMITS, BoundedSite

    return BoundedSite(
        runner, listen.host, listen.port, None, METRICS_LIMITS, sock=sock, counted=False
    )


def metrics_app(
    ready: Callable[[], bool] = lambda: True,
    unready_because: Callable[[], str | None] = lambda: None,
) -> web.Application:
    """GET /metrics, /healthz and /readyz, for the metrics port."""

    async def metrics(_: web.Request) -> web.Response:
        body = generate_latest(REGISTRY)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    add_probes(app, ready, unready_because)
    return app


def add_probes(
    app: web.Application,
    ready: Callable[[], bool],
    unready_because: Callable[[], str | None] = lambda: None,
) -> None:
    """/healthz, and /readyz: 503 while caches are not synced, or for the reason
    unready_because gives."""

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def readyz(_: web.Request) -> web.Response:
        if reason := unready_because():
            return web.Response(status=503, text=f"not ready: {reason}")
        if ready():
            return web.Response(text="ok")
        return web.Response(status=503, text="not ready: caches are not synced yet")

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
