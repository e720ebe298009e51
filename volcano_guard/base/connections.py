"""A TLS listener whose every connection has a bounded cost and a deadline.

aiohttp's own TLS listener (asyncio's `create_server(ssl=...)`) accepts without limit, gives a
peer 60 s to finish its handshake and no deadline at all to send its headers or body, keeps idle
connections 75 s, and allocates a 256 KiB read buffer for every connection, even one that never
sends a ClientHello. In front of a fail-closed webhook that is an OOM kill waiting to happen.
This listener, as Envoy's `max_connections`, `request_headers_timeout` and `idle_timeout` and
kube-apiserver's own server do, holds each connection to:

- a cap per process: past `max_connections`, a new connection is closed at once, before any
  TLS work, and counted; the connections already open keep being served;
- a handshake deadline (asyncio's own `ssl_handshake_timeout`);
- a request deadline: from a request's first byte to the first byte of its answer, headers
  and body included (a peer dribbling bytes is closed when it passes). One sweep a second (a
  quarter of the deadline if shorter) closes the connections past it: a timer per request
  would cost more than the rest of the connection layer together;
- an idle keep-alive timeout (aiohttp's `keepalive_timeout`, set on the runner);
- a 16 KiB TLS read buffer (one TLS record) instead of asyncio's 256 KiB;
- and when a crowd of connections has gone (half the peak, at least TRIM_AFTER fewer), the
  memory they held is handed back to the system (glibc's malloc_trim): otherwise the heap keeps
  its high-water mark and the next flood starts from there.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import math
import socket
import ssl
import struct
from asyncio import sslproto, transports
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from prometheus_client import Counter, Gauge

from volcano_guard.base.metrics import PREFIX, REGISTRY

REFUSED = Counter(f"{PREFIX}connections_refused_total",
                  "Connections closed on arrival because the process had max_connections open.",
                  registry=REGISTRY)
TIMED_OUT = Counter(f"{PREFIX}connections_timed_out_total",
                    "Connections closed because a request passed its deadline.",
                    registry=REGISTRY)
OPEN = Gauge(f"{PREFIX}connections_open", "Connections open on the admission port.",
             registry=REGISTRY)


TRIM_AFTER = 100  # connections gone since the peak before memory is handed back


@dataclass(frozen=True, kw_only=True)
class ConnectionLimits:
    max_connections: int = 1000
    # The API server times a webhook call out after at most 30 s (timeoutSeconds) and sends its
    # request at once, so 10 s cuts off no real caller.
    handshake_timeout: float = 10.0
    request_timeout: float = 10.0
    # Above the 90 s for which the API server's webhook client keeps an idle connection, so the
    # client closes first and never sends a request on a connection the server is closing.
    idle_timeout: float = 95.0


class BoundedTLSSite(web.TCPSite):
    """An aiohttp site serving TLS under ConnectionLimits (the runner should be made with
    `keepalive_timeout=limits.idle_timeout`)."""

    def __init__(self, runner: web.BaseRunner, host: str, port: int, ssl_context: ssl.SSLContext,
                 limits: ConnectionLimits, *, reuse_port: bool | None = None) -> None:
        super().__init__(runner, host, port, reuse_port=reuse_port)
        self._tls, self._limits = ssl_context, limits
        self._connections: set[_Connection] = set()
        self._peak = 0  # most connections open since memory was last handed back
        self._sweeper: asyncio.TimerHandle | None = None

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with its runner
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._accept, self._host, self._port, backlog=self._backlog,
            reuse_address=self._reuse_address, reuse_port=self._reuse_port)
        self._sweep()

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        await super().stop()

    def _accept(self) -> asyncio.BaseProtocol:
        if len(self._connections) >= self._limits.max_connections:
            REFUSED.inc()
            return _Refused()
        handler, loop = self._runner.server, asyncio.get_running_loop()
        assert handler is not None
        connection = _Connection(handler(), loop.time)
        self._connections.add(connection)
        self._peak = max(self._peak, len(self._connections))
        OPEN.inc()
        return _BoundedSSLProtocol(
            loop, connection, self._tls, None, server_side=True,
            ssl_handshake_timeout=self._limits.handshake_timeout,
            closed=lambda: self._closed(connection))

    def _closed(self, connection: _Connection) -> None:
        self._connections.discard(connection)
        OPEN.dec()
        still_open = len(self._connections)
        if self._peak - still_open >= max(TRIM_AFTER, self._peak // 2):
            self._peak = still_open
            asyncio.get_running_loop().call_soon(release_free_memory)

    def _sweep(self) -> None:
        """Close the connections whose request has passed its deadline; run again later."""
        loop = asyncio.get_running_loop()
        timeout = self._limits.request_timeout
        late = loop.time() - timeout
        for connection in [c for c in self._connections if c.request_started < late]:
            connection.expire()
        self._sweeper = loop.call_later(min(1.0, timeout / 4), self._sweep)


def _malloc_trim() -> Any:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):  # not glibc
        return None


_TRIM = _malloc_trim()


def release_free_memory() -> None:
    """Hand the heap's free pages back to the system, where the C library can (glibc)."""
    if _TRIM is not None:
        _TRIM(0)


class _Refused(asyncio.Protocol):
    def connection_made(self, transport: transports.BaseTransport) -> None:
        sock = transport.get_extra_info("socket")
        if sock is not None:  # RST, not a graceful close: the peer learns at once
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        assert isinstance(transport, asyncio.Transport)
        transport.abort()


class _BoundedSSLProtocol(sslproto.SSLProtocol):
    """asyncio's TLS protocol with a one-record read buffer, reporting when it closes."""

    max_size = 16 * 1024

    def __init__(self, *args: Any, closed: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._on_closed = closed

    def connection_lost(self, exc: BaseException | None) -> None:
        try:
            super().connection_lost(exc)
        finally:
            self._on_closed()


class _Connection(asyncio.Protocol):
    """Between TLS and aiohttp's request handler: notes when a request's first byte came (its
    deadline runs from there) until the handler starts writing its answer (aiohttp's keep-alive
    timer then takes over)."""

    def __init__(self, handler: Any, clock: Callable[[], float]) -> None:
        self._handler, self._clock = handler, clock
        self.request_started = math.inf  # no request under way
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: transports.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._handler.connection_made(_AnsweringTransport(transport, self))

    def data_received(self, data: bytes) -> None:
        if self.request_started == math.inf:
            self.request_started = self._clock()
        self._handler.data_received(data)

    def answered(self) -> None:
        self.request_started = math.inf

    def expire(self) -> None:
        TIMED_OUT.inc()
        self.answered()
        if self._transport is not None:
            self._transport.abort()

    def eof_received(self) -> bool | None:
        return self._handler.eof_received()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._handler.connection_lost(exc)

    def pause_writing(self) -> None:
        self._handler.pause_writing()

    def resume_writing(self) -> None:
        self._handler.resume_writing()


class _AnsweringTransport:
    """The TLS transport as aiohttp's handler sees it: writing meets the request's deadline,
    whatever route (or aiohttp itself, for a 404) answers. Everything else is the transport's."""

    def __init__(self, transport: asyncio.Transport, connection: _Connection) -> None:
        self._transport, self._connection = transport, connection
        # Asked on every request: the transport's own methods, with no call in between.
        self.is_closing = transport.is_closing
        self.pause_reading, self.resume_reading = transport.pause_reading, transport.resume_reading

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._connection.answered()
        self._transport.write(data)

    def writelines(self, chunks: Iterable[bytes | bytearray | memoryview]) -> None:
        self._connection.answered()
        self._transport.writelines(chunks)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)
