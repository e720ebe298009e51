"""`volcano-guard sidecar`: wire the proxy, the flusher and the metrics port, and drain on
SIGTERM (refuse new coalesced writes, flush everything pending, then exit 0)."""

from __future__ import annotations

import asyncio
import logging
import signal
import ssl
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from aiohttp import web

from volcano_guard.base.kubeconfig import Cluster, TokenSource, write_kubeconfig
from volcano_guard.base.listen import Listen, start_site
from volcano_guard.base.metrics import METRICS_IDLE_TIMEOUT, metrics_app, metrics_site
from volcano_guard.base.tls import server_context
from volcano_guard.sidecar.coalescer import Coalescer
from volcano_guard.sidecar.flusher import Flusher
from volcano_guard.sidecar.identity import Identity, load_or_make
from volcano_guard.sidecar.proxy import UPSTREAM_READ_TIMEOUT, Proxy, create_app
from volcano_guard.sidecar.routes import DEFAULT_COALESCED

log = logging.getLogger("volcano_guard.sidecar")


@dataclass(frozen=True, kw_only=True)
class SidecarSettings:
    listen_host: str = "127.0.0.1"
    listen_port: int = 8001
    metrics_host: str = "127.0.0.1"
    metrics_port: int = 9091
    flush_interval: float = 1.0
    ack: str = "async"
    max_pending: int = 10_000
    max_upstream_qps: float = 50.0
    drain_timeout: float = 20.0
    coalesce: tuple[str, ...] = DEFAULT_COALESCED
    write_kubeconfig: str | None = None  # where to write a kubeconfig that points at the proxy
    upstream_read_timeout: float = UPSTREAM_READ_TIMEOUT  # for requests that are not long-running


@dataclass
class RunningSidecar:
    url: str
    metrics_url: str
    proxy: Proxy
    ca_file: Path | None = None  # the CA of its loopback certificate, when it serves TLS


def _loopback_tls(kubeconfig: str) -> tuple[ssl.SSLContext, Identity]:
    """A TLS context for loopback and the token clients must present: those an earlier run of
    this sidecar wrote beside the kubeconfig if still good (an app that loaded the kubeconfig
    keeps working after a restart), else new ones."""
    identity = load_or_make(Path(kubeconfig))
    return server_context(identity.cert_file, identity.key_file), identity


@asynccontextmanager
async def running(cluster: Cluster, settings: SidecarSettings) -> AsyncIterator[RunningSidecar]:
    """Serve inside the block (ports 0 pick free ones); leaving it drains and stops."""
    connector = aiohttp.TCPConnector(ssl=cluster.ssl_context(), limit=0)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
    session = aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False)
    tokens = TokenSource(cluster)
    coalescer = Coalescer(settings.flush_interval, settings.max_pending)
    flusher = Flusher(coalescer, session, cluster.url, tokens, settings.max_upstream_qps)
    # The kubeconfig it writes holds a token of the sidecar's own: only the containers that
    # mount that file (the pod's served containers) can use the proxy's credentials. client-go
    # sends a kubeconfig's credentials to https servers only, so the proxy then serves TLS, with
    # a certificate for loopback whose CA the kubeconfig names. Both outlive a restart.
    tls = _loopback_tls(settings.write_kubeconfig) if settings.write_kubeconfig else None
    client_token = tls[1].token if tls else None
    proxy = Proxy(
        cluster.url,
        session,
        tokens,
        coalescer,
        flusher,
        frozenset(settings.coalesce),
        settings.ack,
        clock=time.monotonic,
        read_timeout=settings.upstream_read_timeout,
        client_token=client_token,
    )
    # auto_decompress=False: a gzip request body is relayed compressed, as the client sent it.
    # handler_cancellation: a client that leaves cancels its handler, which ends the upstream
    # request at once; a watch would otherwise stay open upstream until its next event.
    api = web.AppRunner(
        create_app(proxy),
        access_log=None,
        shutdown_timeout=2,
        auto_decompress=False,
        handler_cancellation=True,
    )
    probes = web.AppRunner(metrics_app(), access_log=None, keepalive_timeout=METRICS_IDLE_TIMEOUT)
    await api.setup()
    await probes.setup()
    flusher.start()
    try:
        await start_site(
            web.TCPSite(
                api, settings.listen_host, settings.listen_port, ssl_context=tls[0] if tls else None
            ),
            "--listen",
            Listen(settings.listen_host, settings.listen_port),
        )
        await start_site(
            metrics_site(probes, Listen(settings.metrics_host, settings.metrics_port)),
            "--metrics-listen",
            Listen(settings.metrics_host, settings.metrics_port),
        )
        scheme = "https" if tls else "http"
        yield RunningSidecar(
            f"{scheme}://{settings.listen_host}:{api.addresses[0][1]}",
            f"http://{settings.metrics_host}:{probes.addresses[0][1]}",
            proxy,
            tls[1].ca_file if tls else None,
        )
        proxy.draining = True
        left = await flusher.drain(settings.drain_timeout)
        if left:
            log.error(
                "drain timed out after %.0fs; status not written for: %s",
                settings.drain_timeout,
                ", ".join(str(key) for key in left),
            )
        else:
            log.info("drained: every pending status was written")
    finally:
        proxy.close_streams()
        await flusher.stop()
        await api.cleanup()
        await probes.cleanup()
        await session.close()


async def serve(cluster: Cluster, settings: SidecarSettings) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with running(cluster, settings) as sidecar:
        if settings.write_kubeconfig:
            write_kubeconfig(
                settings.write_kubeconfig,
                sidecar.url,
                token=sidecar.proxy.client_token,
                ca_file=sidecar.ca_file,
            )
        else:
            log.warning(
                "no --write-kubeconfig: clients are not authenticated, and any process "
                "that reaches %s borrows the upstream credentials",
                sidecar.url,
            )
        where = (
            "loopback only"
            if settings.listen_host in ("127.0.0.1", "::1", "localhost")
            else "NOT loopback: reachable from outside the pod"
        )
        log.info(
            "sidecar proxy on %s (%s) -> %s; coalescing status writes of %s; metrics on %s",
            sidecar.url,
            where,
            cluster.url,
            ", ".join(settings.coalesce),
            sidecar.metrics_url,
        )
        await stop.wait()
        log.info("SIGTERM: refusing new status writes, draining pending ones")
    return 0
