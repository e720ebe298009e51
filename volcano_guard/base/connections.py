"""A TLS listener whose every connection has a bounded cost and a deadline.

aiohttp's own TLS listener (asyncio's `create_server(ssl=...)`) accepts without limit, gives a
peer 60 s to finish its handshake and no deadline at all to send its headers or body, keeps idle
connections 75 s, and allocates a 256 KiB read buffer for every connection, even one that never
sends a ClientHello. In front of a fail-closed webhook that is an OOM kill waiting to happen.
This listener, as Envoy's `max_connections`, `request_headers_timeout` and `idle_timeout` and
Go's net/http server (ReadHeaderTimeout, IdleTimeout) do, holds each connection to:

- a cap per process, shared fairly between source addresses: at `max_connections`, the
  source holding the most connections gives one up for the newcomer (PickVictim): the oldest
  of its connections that never had an answer and has no request in flight (a handshake, a
  connect that sent nothing, headers still coming), else the one of its kept-alive
  connections idle longest, else (only when the newcomer's source holds fewer) its oldest
  request in flight. A newcomer from the heaviest source itself with nothing of its own to
  give up is closed at once, before any TLS work. Both are counted. So one address (an
  attacker's pod) churning connects, dribbling headers or holding bodies it never finishes
  only ever evicts its own connections, and the API server, which holds few, always gets its
  seat and keeps the kept-alive connections it made;
- a handshake deadline (asyncio's own `ssl_handshake_timeout`);
- a first-request deadline: a connection must begin its first request within
  `first_request_timeout` of its accept (TLS handshake included);
- a request deadline: from a request's first byte to the first byte of its answer, headers
  and body included (a peer dribbling bytes is closed when it passes). One sweep a second (a
  quarter of the shortest deadline if shorter) closes the connections past either deadline: a
  timer per request would cost more than the rest of the connection layer together;
- an idle keep-alive timeout (aiohttp's `keepalive_timeout`, set on the runner);
- a 16 KiB TLS read buffer (one TLS record) instead of asyncio's 256 KiB, one for all the
  connections of an event loop rather than one each;
- and when a crowd of connections has gone (half the peak, at least TRIM_AFTER fewer), the
  memory they held is handed back to the system (glibc's malloc_trim): otherwise the heap keeps
  its high-water mark and the next flood starts from there.

The same site serves plain HTTP (no ssl_context): the metrics and health ports, under
METRICS_LIMITS, so that no port of the process can take more than its share of the open
files (docs/decisions/security.md).
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import math
import resource
import socket
import ssl
import struct
import threading
from asyncio import sslproto, transports
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from prometheus_client import Counter, Gauge

from volcano_guard.base.metrics import METRICS_IDLE_TIMEOUT, PREFIX, REGISTRY

REFUSED = Counter(
    f"{PREFIX}connections_refused_total",
    "Connections closed on arrival: max_connections open, each with a request in flight.",
    registry=REGISTRY,
)
EVICTED = Counter(
    f"{PREFIX}connections_evicted_total",
    "Idle connections closed to make room for a new one at max_connections.",
    registry=REGISTRY,
)
TIMED_OUT = Counter(
    f"{PREFIX}connections_timed_out_total",
    "Connections closed because a request passed its deadline.",
    registry=REGISTRY,
)
OPEN = Gauge(
    f"{PREFIX}connections_open", "Connections open on the admission port.", registry=REGISTRY
)


END_OF_HEADERS = b"\r\n\r\n"
TRIM_AFTER = 100  # connections gone since the peak before memory is handed back
# A pod's connections, split among its --workers: what fits in half the default Deployment's
# memory limit (512 MiB, one process idling at 71 MiB) at the cost of a hostile connection
# under the worst flood measured (10,000 re-opened as fast as closed, bench/connection_flood.py:
# 69 to 75 KiB each, handshakes under way included): (256 - 71 MiB) / 75 KiB = 2,525, less a
# tenth for the peaks' variance between runs. Two workers idle at 225 MiB, hence their 1 GiB.
MAX_CONNECTIONS = 2200


@dataclass(frozen=True, kw_only=True)
class ConnectionLimits:
    max_connections: int = MAX_CONNECTIONS
    # The API server times a webhook call out after at most 30 s (timeoutSeconds) and sends its
    # request at once, so 10 s cuts off no real caller.
    handshake_timeout: float = 10.0
    # From the accept to the first request's first byte; with request_timeout, a connection
    # has sent its first request whole within 30 s of its accept, TLS included.
    first_request_timeout: float = 20.0
    request_timeout: float = 10.0
    # Go's net/http IdleTimeout; the API server's webhook client keeps an idle connection as
    # long, and sends again on a fresh one when a kept one was closed before it wrote.
    idle_timeout: float = 90.0


# A metrics or health port: the kubelet's probes (a new connection each) and one Prometheus
# scrape (kept alive) need a handful; 64 leaves room for several scrapers and probes at once,
# and costs the process 64 of its open files at most, however many a stranger opens.
METRICS_LIMITS = ConnectionLimits(
    max_connections=64,
    handshake_timeout=5.0,
    first_request_timeout=5.0,
    request_timeout=10.0,
    idle_timeout=METRICS_IDLE_TIMEOUT,
)


class _Source:
    """One source address's connections, each in accept order (oldest first): all of them,
    those never answered with no request in flight (`fresh`), and those answered before with
    no request in flight (`kept`, the one idle longest first)."""

    __slots__ = ("all", "fresh", "kept")

    def __init__(self) -> None:
        self.all: dict[_Connection, None] = {}
        self.fresh: dict[_Connection, None] = {}
        self.kept: dict[_Connection, None] = {}


def pick_victim(sources: dict[str, _Source], newcomer: str) -> _Connection | None:
    """The connection to close for a newcomer from `newcomer` at the cap, or None to refuse
    the newcomer: the heaviest source gives one up, the newcomer's own source only what has
    no request in flight (module docstring)."""
    heaviest = max(sources.values(), key=lambda source: len(source.all))
    own = sources.get(newcomer)
    for waiting in (heaviest.fresh, heaviest.kept):
        if waiting:
            return next(iter(waiting))
    if own is not None and len(own.all) + 1 >= len(heaviest.all):
        return None  # the newcomer's source is (nearly) the heaviest: its requests go first
    return next(iter(heaviest.all))


class BoundedSite(web.TCPSite):
    """An aiohttp site serving TLS (ssl_context) or plain HTTP under ConnectionLimits (the
    runner should be made with `keepalive_timeout=limits.idle_timeout`); on `sock` when
    given (bound already), else on host:port. counted: whether its connections go into the
    admission port's metrics."""

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        ssl_context: ssl.SSLContext | None,
        limits: ConnectionLimits,
        *,
        reuse_port: bool | None = None,
        sock: socket.socket | None = None,
        counted: bool = True,
    ) -> None:
        super().__init__(runner, host, port, reuse_port=reuse_port)
        self._tls, self._limits, self._sock, self._counted = ssl_context, limits, sock, counted
        self._connections: dict[_Connection, str] = {}  # each with its source address
        self._sources: dict[str, _Source] = {}
        self._peak = 0  # most connections open since memory was last handed back
        self._sweeper: asyncio.TimerHandle | None = None

    @property
    def name(self) -> str:
        if self._sock is not None:
            host, port = self._sock.getsockname()[:2]
            return f"{'https' if self._tls else 'http'}://{host}:{port}"
        return super().name

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with its runner
        loop = asyncio.get_running_loop()
        if self._sock is not None:
            self._server = await loop.create_server(
                self._accept, sock=self._sock, backlog=self._backlog
            )
        else:
            self._server = await loop.create_server(
                self._accept,
                self._host,
                self._port,
                backlog=self._backlog,
                reuse_address=self._reuse_address,
                reuse_port=self._reuse_port,
            )
        self._sweep()

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        await super().stop()

    def _accept(self) -> asyncio.BaseProtocol:
        handler, loop = self._runner.server, asyncio.get_running_loop()
        assert handler is not None
        connection = _Connection(handler(), loop.time)
        if self._tls is None:
            return _BoundedPlainProtocol(connection, self._admit, self._closed)
        return _BoundedSSLProtocol(
            loop,
            connection,
            self._tls,
            None,
            server_side=True,
            ssl_handshake_timeout=self._limits.handshake_timeout,
            admit=self._admit,
            closed=self._closed,
        )

    def _admit(self, connection: _Connection, source: str) -> bool:
        """Seat connection (from source), making room at the cap; False: refuse it."""
        if len(self._connections) >= self._limits.max_connections:
            victim = pick_victim(self._sources, source)
            if victim is None:
                if self._counted:
                    REFUSED.inc()
                return False
            if self._counted:
                EVICTED.inc()
            victim.close()
            self._closed(victim)  # its seat is free now, not when its loss is reported
        seat = self._sources.setdefault(source, _Source())
        connection.seat(seat)
        self._connections[connection] = source
        self._peak = max(self._peak, len(self._connections))
        if self._counted:
            OPEN.inc()
        return True

    def _closed(self, connection: _Connection) -> None:
        source = self._connections.pop(connection, None)
        if source is None:  # refused, or closed already
            return
        seat = self._sources[source]
        for group in (seat.all, seat.fresh, seat.kept):
            group.pop(connection, None)
        if not seat.all:
            del self._sources[source]
        if self._counted:
            OPEN.dec()
        still_open = len(self._connections)
        if self._peak - still_open >= max(TRIM_AFTER, self._peak // 2):
            self._peak = still_open
            asyncio.get_running_loop().call_soon(release_free_memory)

    def _sweep(self) -> None:
        """Close the connections past a deadline; run again later."""
        loop = asyncio.get_running_loop()
        limits = self._limits
        now = loop.time()
        late, unasked = now - limits.request_timeout, now - limits.first_request_timeout
        for connection in [
            c
            for c in self._connections
            if c.request_started < late or c.awaiting_first_request_since < unasked
        ]:
            if self._counted:
                TIMED_OUT.inc()
            connection.close()
            self._closed(connection)
        shortest = min(limits.request_timeout, limits.first_request_timeout)
        self._sweeper = loop.call_later(min(1.0, shortest / 4), self._sweep)


def raise_open_file_limit(files: int) -> None:
    """Raise this process's soft limit of open files to `files` (never above the hard limit,
    never down); ValueError naming both when the hard limit is lower."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < files:
        raise ValueError(f"{files} open files needed; the hard limit is {hard}")
    if soft != resource.RLIM_INFINITY and soft < files:
        resource.setrlimit(resource.RLIMIT_NOFILE, (files, hard))


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


def _source_of(transport: transports.BaseTransport) -> str:
    peer = transport.get_extra_info("peername")
    return str(peer[0]) if isinstance(peer, tuple) and peer else ""


def _reset(transport: transports.BaseTransport) -> None:
    """Close with an RST, not a graceful close: the peer learns at once, and no TLS work."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    assert isinstance(transport, asyncio.Transport)
    transport.abort()


Admit = Callable[["_Connection", str], bool]
Closed = Callable[["_Connection"], None]


def _take_seat(admit: Admit, connection: _Connection, transport: transports.BaseTransport) -> bool:
    """Seat connection (its socket's transport), or reset it before any TLS work; whether
    it was seated."""
    if not admit(connection, _source_of(transport)):
        _reset(transport)
        return False
    connection.closes_with(transport)
    return True


class _ReadBuffer(threading.local):
    """One TLS record's room, one per thread (an event loop's): the loop reads into it and
    hands the bytes on before it reads for another connection (get_buffer, recv_into,
    buffer_updated in one callback), so one serves all its connections, 16 KiB each saved."""

    def __init__(self) -> None:
        self.room = bytearray(16 * 1024)
        self.view = memoryview(self.room)


_READ_BUFFER = _ReadBuffer()


class _BoundedSSLProtocol(sslproto.SSLProtocol):
    """asyncio's TLS protocol with a one-record read buffer, seated by the site (or reset)
    before any TLS work, reporting when it closes, and handing its connection the socket's
    transport (to close it even mid-handshake)."""

    max_size = 16 * 1024

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        connection: _Connection,
        *args: Any,
        admit: Admit,
        closed: Closed,
        **kwargs: Any,
    ) -> None:
        super().__init__(loop, connection, *args, **kwargs)
        self._connection, self._admit, self._on_closed = connection, admit, closed
        self._ssl_buffer, self._ssl_buffer_view = _READ_BUFFER.room, _READ_BUFFER.view
        self._seated = False

    def connection_made(self, transport: transports.BaseTransport) -> None:
        self._seated = _take_seat(self._admit, self._connection, transport)
        if self._seated:
            super().connection_made(transport)

    def connection_lost(self, exc: BaseException | None) -> None:
        if not self._seated:
            return
        try:
            super().connection_lost(exc)
        finally:
            self._on_closed(self._connection)


class _BoundedPlainProtocol(asyncio.Protocol):
    """The plain-HTTP counterpart: seats its connection (or resets it) and reports its close."""

    def __init__(self, connection: _Connection, admit: Admit, closed: Closed) -> None:
        self._connection, self._admit, self._on_closed = connection, admit, closed
        self._seated = False

    def connection_made(self, transport: transports.BaseTransport) -> None:
        self._seated = _take_seat(self._admit, self._connection, transport)
        if self._seated:
            self._connection.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self._connection.data_received(data)

    def eof_received(self) -> bool | None:
        return self._connection.eof_received()

    def connection_lost(self, exc: BaseException | None) -> None:
        if not self._seated:
            return
        try:
            self._connection.connection_lost(exc)
        finally:
            self._on_closed(self._connection)

    def pause_writing(self) -> None:
        self._connection.pause_writing()

    def resume_writing(self) -> None:
        self._connection.resume_writing()


class _Connection(asyncio.Protocol):
    """Between TLS and aiohttp's request handler: notes when a request's first byte came (its
    deadline runs from there) until the handler starts writing its answer (aiohttp's keep-alive
    timer then takes over), and keeps itself in its source's `fresh` (never answered) or
    `kept` (answered before) while no request is in flight, that is until a request's headers
    have come whole: a peer dribbling its headers has asked nothing yet, and counted as busy,
    dribblers would hold the cap and leave together at one deadline. Made at the accept,
    before the TLS handshake; seated by the site once its source is known."""

    def __init__(self, handler: Any, clock: Callable[[], float]) -> None:
        self._handler, self._clock = handler, clock
        self.request_started = math.inf  # no request under way
        self.awaiting_first_request_since = clock()  # inf once a request has begun
        self._tail = b""  # the last bytes of a request's headers so far
        self._socket: transports.BaseTransport | None = None  # the socket's, from the accept
        self._seat = _Source()  # its source's, once seated
        self._waiting = self._seat.fresh  # where it waits while no request is in flight

    def seat(self, source: _Source) -> None:
        self._seat, self._waiting = source, source.fresh
        source.all[self] = None
        source.fresh[self] = None

    def connection_made(self, transport: transports.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._handler.connection_made(_AnsweringTransport(transport, self))

    def data_received(self, data: bytes) -> None:
        if self.request_started == math.inf:
            self.request_started = self._clock()
            self.awaiting_first_request_since = math.inf
            self._tail = b""
        if self in self._waiting:  # in flight once its headers are whole
            if END_OF_HEADERS in data or END_OF_HEADERS in self._tail + data[:3]:
                self._waiting.pop(self)
            self._tail = (self._tail + data[-3:])[-3:]
        self._handler.data_received(data)

    def answered(self) -> None:
        if self.request_started != math.inf:
            self.request_started = math.inf
            self._waiting.pop(self, None)  # a request answered before its headers were whole
            self._waiting = self._seat.kept
            self._waiting[self] = None  # the most recently idle: last in line to make room

    def close(self) -> None:
        """Abort the connection, even mid-handshake."""
        self.request_started = self.awaiting_first_request_since = math.inf
        self._waiting.pop(self, None)
        if self._socket is not None:
            assert isinstance(self._socket, asyncio.Transport)
            self._socket.abort()

    def closes_with(self, transport: transports.BaseTransport) -> None:
        self._socket = transport

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
