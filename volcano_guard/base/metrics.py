"""The process's Prometheus registry and the plain-HTTP app that serves it (with health probes)."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from volcano_guard.base.listen import Listen, start_site

PREFIX = "volcano_guard_"
REGISTRY = CollectorRegistry(auto_describe=True)
# process_resident_memory_bytes and the rest (Linux /proc): the sidecar's memory is the Queue
# status storm's whole concern, and a fail-closed webhook's OOM kill stops pod creation.
ProcessCollector(registry=REGISTRY)


async def start_metrics(app: web.Application, listen: Listen) -> tuple[web.AppRunner, int]:
    """app served on listen (a command's --metrics-listen): its runner, for the caller to clean
    up, and the port it bound; AddressUnusable naming the flag when it cannot bind."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await start_site(web.TCPSite(runner, listen.host, listen.port), "--metrics-listen", listen)
    except BaseException:
        await runner.cleanup()
        raise
    return runner, runner.addresses[0][1]


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
