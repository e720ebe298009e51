"""The sidecar's HTTP side: a transparent API proxy that hands coalesced status writes to the
coalescer and streams everything else through, byte for byte.

It lends its credentials to no one else: only origin-form requests addressed to its loopback
name are served, a client must present the per-pod token of the kubeconfig the sidecar wrote,
and Impersonate-* headers are dropped (the service account's token, added here, must not act
as someone the client names).

Only coalesced resources' bodies are ever decoded: their status writes, and their GET, LIST and
WATCH responses (read as they stream past, line by line for watches) to learn the versions
writers base their writes on. Every other body is relayed chunk by chunk, never whole.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web
from yarl import URL

from volcano_guard.base.jsonbody import BodyError, decode, decode_yaml
from volcano_guard.base.kubeconfig import TokenSource
from volcano_guard.base.status import status_response
from volcano_guard.sidecar import metrics
from volcano_guard.sidecar.coalescer import (
    Backpressure,
    BadWrite,
    Coalescer,
    ObjectKey,
    Passthrough,
    StatusWrite,
)
from volcano_guard.sidecar.flusher import Flusher, resolve
from volcano_guard.sidecar.routes import Route, classify

log = logging.getLogger("volcano_guard.sidecar")
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
MAX_WRITE_BODY = 3 * 1024 * 1024
MAX_OBSERVED_BODY = 64 * 1024 * 1024  # larger coalesced-resource lists pass unobserved
# Seconds an upstream answer that is not long-running may go without a byte: kube-apiserver
# itself ends such requests at 60 s (--request-timeout). Watches, followed logs and proxies
# are long-running and have none.
UPSTREAM_READ_TIMEOUT = 60.0
# Host names a browser page or a remote client cannot make a loopback listener's requests carry
# (as kubectl proxy's default --accept-hosts): a guard against DNS rebinding.
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "[::1]"})
PATCH_KINDS = {
    "application/merge-patch+json": "merge",
    "application/json-patch+json": "json",
    "application/apply-patch+yaml": "apply",
}
PROXY_KEY: web.AppKey[Proxy] = web.AppKey("proxy")


@dataclass
class Proxy:
    """What the handlers share; owned by the serving event loop."""

    upstream: str
    session: aiohttp.ClientSession
    tokens: TokenSource
    coalescer: Coalescer
    flusher: Flusher
    coalesced: frozenset[str]
    ack: str = "async"  # async | sync
    draining: bool = False
    clock: Any = field(default=time.monotonic)
    streams: set[aiohttp.ClientResponse] = field(default_factory=set)
    read_timeout: float = UPSTREAM_READ_TIMEOUT
    # The bearer token clients must present (the kubeconfig the sidecar writes holds it); None:
    # clients are not authenticated (a sidecar run by hand, writing no kubeconfig).
    client_token: str | None = None

    def close_streams(self) -> None:
        """End every relayed response (watches never end by themselves); clients re-watch."""
        for upstream in list(self.streams):
            upstream.close()


def create_app(proxy: Proxy) -> web.Application:
    app = web.Application(client_max_size=MAX_WRITE_BODY, middlewares=[_refuse_strangers])
    app[PROXY_KEY] = proxy
    app.router.add_route("*", "/{tail:.*}", handle)
    return app


@web.middleware
async def _refuse_strangers(request: web.Request, handler: Any) -> web.StreamResponse:
    """refusal() before anything, also for the targets no route matches (CONNECT, OPTIONS *)."""
    refused = refusal(request, request.app[PROXY_KEY])
    return refused if refused is not None else await handler(request)


async def handle(request: web.Request) -> web.StreamResponse:
    proxy = request.app[PROXY_KEY]
    if "upgrade" in request.headers.get("Connection", "").lower():
        return status_response(
            501,
            "the volcano-guard sidecar does not proxy upgraded "
            "connections (exec, attach, port-forward); use the API server "
            "directly for those",
        )
    route = classify(request.path, _flag(request, "watch"), proxy.coalesced)
    if (
        route is not None
        and route.name
        and route.subresource == "status"
        and request.method in ("PUT", "PATCH")
        and "dryRun" not in request.query
    ):
        return await coalesce_write(request, proxy, route)
    return await forward(request, proxy, route)


def refusal(request: web.Request, proxy: Proxy) -> web.Response | None:
    """The answer to a request the sidecar does not serve, or None."""
    if not request.raw_path.startswith("/"):
        return status_response(
            400,
            "the volcano-guard sidecar serves only origin-form request "
            "targets (a path), not an absolute URL: it is not a forward proxy",
        )
    if _host_name(request.headers.get("Host", "")) not in LOOPBACK_HOSTS:
        return status_response(
            400,
            f"Host {request.headers.get('Host', '')!r} is not the "
            "sidecar's loopback address (localhost, 127.0.0.1 or [::1])",
        )
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if proxy.client_token is not None and not (
        scheme.lower() == "bearer"
        and hmac.compare_digest(token.strip().encode(), proxy.client_token.encode())
    ):
        return status_response(
            401,
            "this request lacks the token of the kubeconfig the "
            "volcano-guard sidecar wrote (--write-kubeconfig): use that "
            "kubeconfig",
        )
    return None


def _host_name(host: str) -> str:
    """The Host header's name, lower case, without its port ("[::1]:8001" -> "[::1]")."""
    name, _, port = host.lower().rpartition(":")
    return name if name and port.isdigit() and not host.endswith("]") else host.lower()


async def coalesce_write(request: web.Request, proxy: Proxy, route: Route) -> web.StreamResponse:
    metrics.WRITES_RECEIVED.inc()
    if proxy.draining:
        return status_response(
            503,
            "the sidecar is shutting down; retry against the API server",
            headers={"Retry-After": "1"},
        )
    content_type = request.headers.get("Content-Type", "application/json").split(";")[0].strip()
    kind = "put" if request.method == "PUT" else PATCH_KINDS.get(content_type)
    if kind is None:  # e.g. strategic merge patch: not ours to interpret
        return await forward(request, proxy, route)
    body = await request.read()
    try:
        document = decode_yaml(body) if kind == "apply" else decode(body)
    except BodyError as exc:
        return status_response(400, f"the status write body is refused: {exc}")
    write = StatusWrite(route.key, kind, document, request.query.get("fieldManager", ""))
    waiter = asyncio.get_running_loop().create_future() if proxy.ack == "sync" else None
    was_pending = proxy.coalescer.is_pending(route.key)
    try:
        absorbed = proxy.coalescer.absorb(write, proxy.clock(), waiter)
        if absorbed.superseded is not None:
            metrics.STALE_DROPPED.inc()
            resolve(absorbed.superseded)
    except Passthrough:
        metrics.PASSED_THROUGH.inc()
        return await forward(request, proxy, route, body=body)
    except Backpressure:
        retry = max(1, math.ceil(proxy.coalescer.flush_interval))
        return status_response(
            429,
            f"too many objects with pending status writes (at most "
            f"{proxy.coalescer.max_pending}); retry later",
            headers={"Retry-After": str(retry)},
        )
    except BadWrite as exc:
        return status_response(exc.code, f"the patch does not apply: {exc}")
    pending_now = proxy.coalescer.is_pending(route.key)
    if not pending_now:
        metrics.NOOP_SKIPPED.inc()
    elif was_pending:
        metrics.COALESCED.inc()
    metrics.PENDING_OBJECTS.set(proxy.coalescer.pending_count)
    proxy.flusher.wake()
    if waiter is None or not pending_now:
        return web.json_response(absorbed.obj)
    code, obj = await waiter
    return web.json_response(obj, status=code or 503)


async def forward(
    request: web.Request, proxy: Proxy, route: Route | None, body: bytes | None = None
) -> web.StreamResponse:
    headers = {k: v for k, v in request.headers.items() if _relayed(k, proxy)}
    headers.update(proxy.tokens.authorization())
    data: Any = body if body is not None else (request.content if request.body_exists else None)
    timeout = (
        None
        if _long_running(request)
        else aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=proxy.read_timeout)
    )
    started = time.perf_counter()
    try:
        upstream = await proxy.session.request(  # encoded=True: the path goes as it came
            request.method,
            URL(proxy.upstream + request.raw_path, encoded=True),
            headers=headers,
            data=data,
            allow_redirects=False,
            timeout=timeout,
        )
    except TimeoutError:
        metrics.PROXIED.labels(method=request.method, code="0").inc()
        return status_response(
            504, f"the upstream API server did not answer within {proxy.read_timeout:g}s"
        )
    except aiohttp.ClientError as exc:
        metrics.PROXIED.labels(method=request.method, code="0").inc()
        return status_response(503, f"the upstream API server is unreachable: {exc}")
    response: web.StreamResponse | None = None
    proxy.streams.add(upstream)
    try:
        metrics.PROXY_LATENCY.observe(time.perf_counter() - started)
        metrics.PROXIED.labels(method=request.method, code=str(upstream.status)).inc()
        response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
        for name, value in upstream.headers.items():
            if name.lower() not in HOP_BY_HOP:
                response.headers.add(name, value)
        if upstream.content_length is not None and "Transfer-Encoding" not in upstream.headers:
            response.content_length = upstream.content_length
        observer = _observer(proxy, route, request, upstream)
        await response.prepare(request)
        async for chunk in upstream.content.iter_any():
            await response.write(chunk)
            if observer is not None:
                observer.feed(chunk)
        if observer is not None:
            observer.close()
        await response.write_eof()
        return response
    except (
        ConnectionResetError,
        aiohttp.ClientPayloadError,
        aiohttp.ClientConnectionError,
        TimeoutError,
    ):
        # One side went away (or went silent) mid-stream: the client sees its connection end,
        # as it would if the API server had dropped it. Ended, not finished: a last chunk or
        # a short Content-Length would pass a cut body off as whole, or leave it waiting.
        upstream.close()
        if response is not None and response.prepared:
            if request.transport is not None:
                request.transport.abort()
            return response
        return status_response(502, "the upstream API server closed the connection")
    except asyncio.CancelledError:
        upstream.close()  # the client left (handler cancellation): end the upstream request now
        raise
    finally:
        proxy.streams.discard(upstream)
        upstream.release()


def _relayed(header: str, proxy: Proxy) -> bool:
    """Whether a client's request header goes upstream: not hop-by-hop, no impersonation, and
    not the client's own token when the sidecar authenticated it (the upstream gets the pod's)."""
    name = header.lower()
    if name in HOP_BY_HOP or name.startswith("impersonate-"):
        return False
    return name != "authorization" or proxy.client_token is None


def _long_running(request: web.Request) -> bool:
    """Requests kube-apiserver keeps open as long as they last: watches, followed logs and
    proxied connections (exec, attach and port-forward are refused before this)."""
    if _flag(request, "watch") or (request.path.endswith("/log") and _flag(request, "follow")):
        return True
    return "/proxy/" in request.path or request.path.endswith("/proxy")


def _flag(request: web.Request, name: str) -> bool:
    """A boolean query parameter as the API server reads it (watch=true, follow=1...)."""
    return request.query.get(name) in ("1", "true", "True")


def _observer(
    proxy: Proxy, route: Route | None, request: web.Request, upstream: aiohttp.ClientResponse
) -> _Observer | None:
    if route is None or not 200 <= upstream.status < 300:
        return None
    if "json" not in upstream.headers.get("Content-Type", "application/json"):
        return None
    if upstream.headers.get("Content-Encoding", "identity") != "identity":
        return None
    if "as=" in request.headers.get("Accept", ""):  # metadata only, or a Table: no status
        return None
    if route.watch:
        return _WatchObserver(proxy.coalescer, route)
    if request.method in ("GET", "PUT", "PATCH", "POST"):
        return _BodyObserver(proxy.coalescer, route)
    return None


class _Observer:
    def __init__(self, coalescer: Coalescer, route: Route) -> None:
        self.coalescer, self.route = coalescer, route

    def feed(self, chunk: bytes) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def seen(self, obj: Any, deleted: bool = False) -> None:
        if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
            return
        if obj.get("kind") == "PartialObjectMetadata":  # no status: it would read as none
            return
        metadata = obj["metadata"]
        name = metadata.get("name")
        if not isinstance(name, str):
            return
        key = ObjectKey(self.route.resource, metadata.get("namespace") or "", name)
        if deleted:
            self.coalescer.forget(key)
        else:
            self.coalescer.observe(key, obj)


class _WatchObserver(_Observer):
    """Parses a watch stream line by line as it is relayed."""

    def __init__(self, coalescer: Coalescer, route: Route) -> None:
        super().__init__(coalescer, route)
        self._partial = b""

    def feed(self, chunk: bytes) -> None:
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()
        if len(self._partial) > MAX_OBSERVED_BODY:
            self._partial = b""
        for line in lines:
            if line.strip():
                self._event(line)

    def _event(self, line: bytes) -> None:
        try:
            event = json.loads(line)
        except (ValueError, RecursionError):  # nested past Python's stack: not a Queue's
            return
        if isinstance(event, dict) and event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
            self.seen(event.get("object"), deleted=event["type"] == "DELETED")


class _BodyObserver(_Observer):
    """Collects a (bounded) object or list body and reads it when complete."""

    def __init__(self, coalescer: Coalescer, route: Route) -> None:
        super().__init__(coalescer, route)
        self._chunks: list[bytes] | None = []
        self._size = 0

    def feed(self, chunk: bytes) -> None:
        if self._chunks is None:
            return
        self._size += len(chunk)
        if self._size > MAX_OBSERVED_BODY:
            self._chunks = None
        else:
            self._chunks.append(chunk)

    def close(self) -> None:
        if not self._chunks:
            return
        try:
            body = json.loads(b"".join(self._chunks))
        except (ValueError, RecursionError):  # nested past Python's stack: not a Queue's
            return
        items = body.get("items") if isinstance(body, dict) else None
        for obj in items if isinstance(items, list) else [body]:
            self.seen(obj)
