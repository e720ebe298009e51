"""The admission webhook's HTTP side: transport checks, the handler contract, serving.

request bytes ── size limit (413), content type (415)
  └─ review.parse: JSON decode and envelope check in one pass (400) ── evaluation.evaluate
       ── review.respond (always echoes request.uid)
Metrics wrap the handler; policies never see aiohttp.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, get_args

import msgspec
import orjson
from aiohttp import web

from volcano_guard.base.config_reload import POLL_INTERVAL, ConfigReloader
from volcano_guard.base.connections import (
    METRICS_LIMITS,
    BoundedSite,
    ConnectionLimits,
    raise_open_file_limit,
)
from volcano_guard.base.jsonbody import shown
from volcano_guard.base.listen import Listen, start_site
from volcano_guard.base.metrics import (
    METRICS_IDLE_TIMEOUT,
    add_probes,
    metrics_app,
    metrics_site,
)
from volcano_guard.base.status import status_response
from volcano_guard.certs.reload import CertReloader
from volcano_guard.webhook import decision as decisions
from volcano_guard.webhook import review
from volcano_guard.webhook.caches import Caches
from volcano_guard.webhook.config import (
    Config,
    config_from_bytes,
    exempt_own_namespace,
    load_config,
)
from volcano_guard.webhook.evaluation import (
    NO_POLICY,
    EnabledChecks,
    Phase,
    enabled_checks,
    evaluate,
)
from volcano_guard.webhook.metrics import ADMISSION_DURATION, ADMISSION_ERRORS, admission_counter
from volcano_guard.webhook.policies.base import PolicyContext
from volcano_guard.webhook.policies.queues import HIERARCHY_POLICY
from volcano_guard.webhook.registrations import TIMEOUT_SECONDS
from volcano_guard.webhook.workloads import ObjectShapeError

log = logging.getLogger("volcano_guard.webhook")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_READ_CHUNK = 64 * 1024
SHUTDOWN_TIMEOUT = 30.0  # seconds SIGTERM waits for started requests
OTHER_FILES = 256  # beside its connections: listeners, the caches' connections, logs, libraries
# Bodies over LARGE_BODY (or of unknown length) wait for one of LARGE_REVIEWS_AT_ONCE slots before
# being read, and are decoded and judged in a thread. The API server's reviews are a few KB;
# a 7 MiB one costs ~100 MiB decoded, so one at a time keeps a worker far under its memory limit.
LARGE_BODY = 256 * 1024
LARGE_REVIEWS_AT_ONCE = 1
# Kinds whose decision walks a whole cache (a Queue: its hierarchy, up to ~1 s among 100,000
# queues) are judged in a thread, one at a time: on the loop they would stall every pod's
# review for as long (docs/decisions/security.md, "Queue requests").
CACHE_WALKS = HIERARCHY_POLICY.kinds or frozenset()
# How long such a review waits for its turn: the API server gives up after its timeoutSeconds,
# and a forged flood of them would otherwise queue decisions nobody waits for.
WALK_WAIT = float(TIMEOUT_SECONDS)
# An answer larger than the API server's own request-body limit (3 MiB, MaxRequestBodyBytes)
# would patch an object past what it stores: refused instead of sent.
MAX_ANSWER_BYTES = 3 * 1024 * 1024


@dataclass(frozen=True)
class Slots:
    """What runs one at a time off the loop: a large review, a cache walk (CACHE_WALKS)."""

    large: asyncio.Semaphore
    walk: asyncio.Semaphore


class InFlight:
    """Requests being handled now. aiohttp stops reading a connection once shutdown begins, so
    graceful shutdown first closes the listener, then waits here for every started request,
    its body included, before handing over to aiohttp's cleanup. Event-loop owned: no lock.
    Only a waiter gets a future to wake: a request's count costs two additions."""

    def __init__(self) -> None:
        self.count = 0
        self._idle: asyncio.Future[None] | None = None

    def enter(self) -> None:
        self.count += 1

    def leave(self) -> None:
        self.count -= 1
        if self.count == 0 and self._idle is not None and not self._idle.done():
            self._idle.set_result(None)

    async def wait_idle(self, timeout: float) -> bool:
        if self.count == 0:
            return True
        self._idle = asyncio.get_running_loop().create_future()
        try:
            async with asyncio.timeout(timeout):
                await self._idle
        except TimeoutError:
            return False
        finally:
            self._idle = None
        return True


IN_FLIGHT_KEY = web.AppKey("in_flight", InFlight)


class Drain:
    """SIGTERM's notice period, before the listener closes: /readyz answers 503 and every
    answer ends its connection, so that a client reaching this pod through a Service (the API
    server, through a ClusterIP) reconnects to a pod that stays, while the endpoints that still
    list this pod are updated. Event-loop owned: no lock."""

    def __init__(self) -> None:
        self.begun = False

    def reason(self) -> str | None:
        return "shutting down" if self.begun else None


class RequestError(Exception):
    """A request refused at the transport: HTTP status, reason label, message."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status, self.reason, self.message = status, reason, message


class Served:
    """A config in force and what the server works out from it once: its checks for each
    phase. Immutable: a reload builds a new one and swaps the reference (LiveConfig)."""

    __slots__ = ("checks", "config")

    def __init__(self, config: Config) -> None:
        self.config = config
        self.checks: Mapping[Phase, EnabledChecks] = MappingProxyType(
            {phase: enabled_checks(phase, config) for phase in get_args(Phase)}
        )


class LiveConfig:
    """The config every request is answered with, swapped whole between two requests' reads:
    a request takes `current` once and decides with it alone, so it is answered by the old
    config or the new, never a mixture. Event-loop owned: no lock."""

    def __init__(self, config: Config) -> None:
        self.current = Served(config)

    def swap(self, config: Config) -> None:
        self.current = Served(config)


def create_app(
    config: Config,
    caches: Caches | None = None,
    unready_because: Callable[[], str | None] = lambda: None,
    live: LiveConfig | None = None,
    drain: Drain | None = None,
) -> web.Application:
    """The admission app: POST /mutate, POST /validate, GET /healthz, GET /readyz (ready once
    the caches have synced, unless unready_because gives a reason or the drain has begun).
    Requests are decided with live's current config (default: config, for good); the body
    limit is config's."""
    caches = caches or Caches()
    live = live or LiveConfig(config)
    drain = drain or Drain()
    app = web.Application(client_max_size=config.maxRequestBytes + 1)
    in_flight = app[IN_FLIGHT_KEY] = InFlight()
    # shared by /mutate and /validate: one large review, one cache walk at a time
    slots = Slots(asyncio.Semaphore(LARGE_REVIEWS_AT_ONCE), asyncio.Semaphore(1))
    for phase in get_args(Phase):
        app.router.add_post(
            f"/{phase}",
            _handler(phase, config.maxRequestBytes, live, caches, in_flight, slots, drain),
        )
    add_probes(app, caches.ready, _reasons(unready_because, caches, drain))
    return app


def _reasons(
    unready_because: Callable[[], str | None], caches: Caches, drain: Drain
) -> Callable[[], str | None]:
    """Why /readyz answers 503: shutting down, the caller's reason (an expired certificate),
    else the caches'."""
    return lambda: drain.reason() or unready_because() or caches.unready_reason()


def _handler(
    phase: Phase,
    limit: int,
    live: LiveConfig,
    caches: Caches,
    in_flight: InFlight,
    slots: Slots,
    drain: Drain,
) -> Handler:
    async def handle(request: web.Request) -> web.StreamResponse:
        # Counted here rather than in a middleware: aiohttp's middleware chain costs about as
        # much as a policy on every request (bench/admission_load.py).
        in_flight.enter()
        try:
            response = await _answer(request, phase, limit, live, caches, slots)
        except ConnectionResetError:
            # The peer left, or its connection was closed for a deadline or a newcomer:
            # nobody to answer. Left to aiohttp, a traceback per connection: a stranger's
            # flood of them filled the log (and a full stderr pipe stopped the process).
            return web.Response(status=499)
        finally:
            in_flight.leave()
        if drain.begun:
            response.force_close()  # `Connection: close`: the client's next call reconnects
        return response

    return handle


async def _answer(
    request: web.Request,
    phase: Phase,
    limit: int,
    live: LiveConfig,
    caches: Caches,
    slots: Slots,
) -> web.StreamResponse:
    try:
        check_headers(request, limit)
        source = request.remote or ""  # whose turn a live lookup takes (lookup_slots.py)
        if is_small(request):  # every review the API server sends in practice: on the loop
            body = await read_body(request, limit)
            return await _judge(body, phase, live, caches, source, slots)
        async with slots.large:  # one large review decoded at a time, its body read only then
            body = await read_body(request, limit)
            return await _judge(body, phase, live, caches, source, None)
    except RequestError as exc:
        ADMISSION_ERRORS.labels(reason=exc.reason).inc()
        return status_response(exc.status, exc.message)


async def _judge(
    body: bytes,
    phase: Phase,
    live: LiveConfig,
    caches: Caches,
    source: str,
    slots: Slots | None,
) -> web.Response:
    """Decode, look up what the policies need, decide, encode. A large body (slots None: its
    slot is held) is decoded and judged in a thread: a 7 MiB review costs about a second of
    Python, which on the loop would stall every other caller for as long
    (docs/decisions/webhook.md); a small one of a kind in CACHE_WALKS is judged in a thread
    once it holds slots.walk."""
    started = time.perf_counter()
    on_loop = slots is not None
    if on_loop:
        review_request = parse_review(body)
    else:
        review_request = await asyncio.to_thread(parse_review, body)
    listed = {}
    kind = review_request.kind
    # One config and one snapshot per decision, taken with no await between them (a
    # reload swaps on this loop): every policy sees the same config and cluster view.
    served = live.current
    snapshots = caches.snapshots()
    checks = served.checks[phase]
    for lookup in checks.for_kind(kind.group, kind.kind).lookups:  # most kinds: none
        if lookup.wanted(review_request, snapshots):  # the rare requests that list live
            listed[lookup] = await caches.live_list(lookup, review_request.namespace, source)
    context = PolicyContext(served.config, snapshots, listed)
    if slots is not None and (kind.group, kind.kind) in CACHE_WALKS:
        await _take_turn(slots.walk)
        try:
            encoded = await asyncio.to_thread(answer_bytes, phase, review_request, context, checks)
        finally:
            slots.walk.release()
    elif on_loop:
        encoded = answer_bytes(phase, review_request, context, checks)
    else:
        encoded = await asyncio.to_thread(answer_bytes, phase, review_request, context, checks)
    ADMISSION_DURATION.observe(time.perf_counter() - started)
    return web.Response(body=encoded, content_type="application/json")


async def _take_turn(walk: asyncio.Semaphore) -> None:
    """The walk slot within WALK_WAIT, else 429: the API server has given up by then."""
    try:
        await asyncio.wait_for(walk.acquire(), WALK_WAIT)
    except TimeoutError:
        raise RequestError(
            429, "busy", f"other Queue reviews held the webhook for {WALK_WAIT:g} s; retry"
        ) from None


def answer_bytes(
    phase: Phase,
    request: review.AdmissionRequest,
    context: PolicyContext,
    checks: EnabledChecks | None = None,
) -> bytes:
    """The encoded answer, at most MAX_ANSWER_BYTES: a larger one (a patch for a forged
    object) is replaced by a denial saying so."""
    encoded = orjson.dumps(decide(phase, request, context, checks))
    if len(encoded) <= MAX_ANSWER_BYTES:
        return encoded
    ADMISSION_ERRORS.labels(reason="answer_too_large").inc()
    message = (
        f"{request.describe()}: the answer would be {len(encoded):,} bytes, over the "
        f"{MAX_ANSWER_BYTES:,}-byte limit (a patch larger than any object the API server stores)"
    )
    return orjson.dumps(review.respond(request.uid, decisions.denied(message, code=413)))


def is_small(request: web.Request) -> bool:
    length = request.content_length
    return length is not None and length <= LARGE_BODY


def check_headers(request: web.Request, limit: int) -> None:
    """Refuse, before any body byte is read: a content type other than JSON (415), any
    Content-Encoding (415: the API server never compresses a review, and decoding one would
    turn 454 KB into 7 MB), a declared length over limit (413)."""
    content_type = request.headers.get("Content-Type", "application/json")
    if (
        content_type != "application/json"  # what the API server sends: skip the parsing
        and content_type.split(";")[0].strip().lower() != "application/json"
    ):
        raise RequestError(
            415, "content_type", f"Content-Type {content_type!r} is not application/json"
        )
    encoding = request.headers.get("Content-Encoding")
    if encoding is not None and encoding.strip().lower() != "identity":
        raise RequestError(
            415,
            "content_encoding",
            f"Content-Encoding {shown(encoding)} is not accepted; send the review uncompressed",
        )
    length = request.content_length
    if length is not None and length > limit:
        raise RequestError(
            413, "too_large", f"body of {length} bytes is over the {limit}-byte limit"
        )


async def read_body(request: web.Request, limit: int) -> bytes:
    """The whole body, once check_headers has passed its headers; a chunked body is refused
    (413) as soon as it passes limit."""
    if request.content_length is not None:
        return await request.read()  # length known and within the limit: one read
    chunks: list[bytes] = []
    size = 0
    while chunk := await request.content.read(_READ_CHUNK):
        size += len(chunk)
        if size > limit:
            raise RequestError(413, "too_large", f"body is over the {limit}-byte limit")
        chunks.append(chunk)
    return b"".join(chunks)


def admit(phase: Phase, body: bytes, context: PolicyContext) -> dict[str, object]:
    """AdmissionReview bytes -> AdmissionReview answer; RequestError for unusable input."""
    return decide(phase, parse_review(body), context)


def parse_review(body: bytes) -> review.AdmissionRequest:
    try:
        return review.parse(body)
    except review.ReviewError as exc:
        raise RequestError(400, "bad_review", str(exc)) from None


def decide(
    phase: Phase,
    request: review.AdmissionRequest,
    context: PolicyContext,
    checks: EnabledChecks | None = None,
) -> dict[str, object]:
    config = context.config
    try:
        evaluation = evaluate(phase, request, context, checks)
    except ObjectShapeError as exc:
        raise RequestError(400, "bad_object", f"request.object: {exc}") from None
    except Exception:  # a bug in a policy must not take the API server's requests down
        log.exception("policy evaluation failed for %s %s", request.operation, request.kind.kind)
        ADMISSION_ERRORS.labels(reason="internal").inc()
        decision = _internal_error(config)
        return review.respond(request.uid, decision)
    try:
        answer = review.respond(request.uid, evaluation.decision)
    except review.ReviewError as exc:  # a patch copying a value nested too deep to encode
        raise RequestError(400, "bad_object", str(exc)) from None
    operation, kind = request.operation, request.kind.kind
    for result in evaluation.results:
        admission_counter(operation, kind, result.policy, result.outcome).inc()
    if not evaluation.results:
        admission_counter(operation, kind, NO_POLICY, "allowed").inc()
    return answer


def _internal_error(config: Config) -> decisions.Decision:
    message = "volcano-guard failed to evaluate this request (see its log)"
    if config.failClosed:
        return decisions.denied(message, code=500)
    return decisions.with_warnings(decisions.allowed(), [message])


@asynccontextmanager
async def running(
    config: Config,
    listen: Listen,
    metrics_listen: Listen,
    tls: ssl.SSLContext,
    *,
    shutdown_timeout: float = SHUTDOWN_TIMEOUT,
    caches: Caches | None = None,
    reuse_port: bool = False,
    limits: ConnectionLimits | None = None,
    unready_because: Callable[[], str | None] = lambda: None,
    live: LiveConfig | None = None,
    drain: Drain | None = None,
) -> AsyncIterator[tuple[int, int]]:
    """Serve inside the block; yields the bound (admission, metrics) ports (0 picks free ones).
    Leaving the block stops accepting and waits up to shutdown_timeout for in-flight requests.
    reuse_port lets several worker processes share the admission port (SO_REUSEPORT); limits
    (default ConnectionLimits with the config's maxConnections) bound each connection;
    unready_because gives a reason for both /readyz to answer 503 (an expired certificate);
    live, when given, is the config requests are decided with (a reload swaps it); drain,
    when begun, makes both /readyz answer 503 and every answer close its connection."""
    caches = caches or Caches()
    drain = drain or Drain()
    app = create_app(config, caches, unready_because, live, drain)
    # No access log: a line per admission costs more than the decision (bench/admission_load.py);
    # decisions are counted in the metrics instead.
    limits = limits or ConnectionLimits(max_connections=config.maxConnections)
    # Each connection is a file: the caps of both ports, not the open-file limit, must set
    # how many there can be (docs/decisions/security.md).
    files = limits.max_connections + METRICS_LIMITS.max_connections + OTHER_FILES
    try:
        raise_open_file_limit(files)
    except ValueError as exc:
        log.warning("maxConnections %d may not be reached: %s", limits.max_connections, exc)
    admission = web.AppRunner(
        app,
        shutdown_timeout=shutdown_timeout,
        access_log=None,
        keepalive_timeout=limits.idle_timeout,
    )
    metrics = web.AppRunner(
        metrics_app(caches.ready, _reasons(unready_because, caches, drain)),
        access_log=None,
        keepalive_timeout=METRICS_IDLE_TIMEOUT,
    )
    await admission.setup()
    await metrics.setup()
    try:
        await start_site(
            BoundedSite(
                admission, listen.host, listen.port, tls, limits, reuse_port=reuse_port or None
            ),
            "--listen",
            listen,
        )
        await start_site(
            metrics_site(metrics, metrics_listen),
            "--metrics-listen",
            metrics_listen,
        )
        yield _bound_port(admission), _bound_port(metrics)
    finally:
        for site in list(admission.sites):
            await site.stop()  # no new connections; started requests go on
        if not await app[IN_FLIGHT_KEY].wait_idle(shutdown_timeout):
            log.warning(
                "%d requests still in flight after %.0fs; cancelling them",
                app[IN_FLIGHT_KEY].count,
                shutdown_timeout,
            )
        await admission.cleanup()
        await metrics.cleanup()
        await caches.close()


async def serve(
    config: Config,
    listen: Listen,
    metrics_listen: Listen,
    tls: ssl.SSLContext,
    *,
    shutdown_timeout: float = SHUTDOWN_TIMEOUT,
    caches: Caches | None = None,
    reloader: CertReloader | None = None,
    reuse_port: bool = False,
    started: Callable[[int, int], None] | None = None,
    background: Sequence[Callable[[], Coroutine[Any, Any, None]]] = (),
    live: LiveConfig | None = None,
    shutdown_delay: float = 0.0,
) -> None:
    """Serve until SIGTERM or SIGINT, then finish in-flight requests and return; after SIGTERM,
    first go on serving for shutdown_delay seconds, unready (Drain). With a
    reloader, changed certificate files are picked up without a restart; started is called with
    the bound (admission, metrics) ports once both listen; each of background runs as a task
    while the webhook serves (the config reloader); live, when
    given, is the config requests are decided with."""
    stop = asyncio.Event()
    terminated: list[int] = []  # the signal that stopped it
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, _stopper(stop, terminated, signum))
    caches = caches or Caches()
    drain = Drain()
    watching = False
    try:
        async with running(
            config,
            listen,
            metrics_listen,
            tls,
            shutdown_timeout=shutdown_timeout,
            caches=caches,
            reuse_port=reuse_port,
            unready_because=reloader.problem if reloader else lambda: None,
            live=live,
            drain=drain,
        ) as (port, metrics_port):
            # The informers' threads start once both ports are bound, so that a port in use
            # ends the command before any of them runs: started first, they went on logging
            # while the interpreter shut down, which aborted it (SIGABRT) in 9 starts of 30.
            caches.start()
            watching = True
            log.info(
                "webhook listening on https://%s:%d, metrics on http://%s:%d",
                listen.host,
                port,
                metrics_listen.host,
                metrics_port,
            )
            if started is not None:
                started(port, metrics_port)
            tasks = [asyncio.create_task(work()) for work in background]
            if reloader:
                tasks.append(asyncio.create_task(reloader.watch()))
            await stop.wait()
            if terminated == [signal.SIGTERM] and shutdown_delay > 0:
                await _notice(drain, shutdown_delay)
            log.info("shutting down: finishing in-flight requests")
            for task in tasks:
                task.cancel()
    finally:
        if watching:  # on every way out: no informer may outlive the command
            caches.stop()


def _stopper(stop: asyncio.Event, signals: list[int], signum: int) -> Callable[[], None]:
    def received() -> None:
        signals.append(signum)
        stop.set()

    return received


async def _notice(drain: Drain, seconds: float) -> None:
    """SIGTERM comes as the pod's endpoints are being removed, not after: keep answering,
    unready, while every Service path to this pod closes."""
    log.info("SIGTERM: unready, still serving for %.1fs while the endpoints drop this pod", seconds)
    drain.begun = True
    await asyncio.sleep(seconds)


def _bound_port(runner: web.AppRunner) -> int:
    address = runner.addresses[0]
    return int(address[1])


# How long a reloaded config that reads the cluster waits for the caches it adds (a first list
# of every pod of a large cluster takes tens of seconds); the old config serves meanwhile.
RELOAD_SYNC_TIMEOUT = 120.0
# Keys that shape the listener, fixed when it starts: a reload changing them applies the rest.
_FIXED_AT_START = ("maxRequestBytes", "maxConnections")


def config_reloader(
    path: str | Path,
    live: LiveConfig,
    caches: Caches,
    own_namespace: str | None,
    *,
    sync_timeout: float = RELOAD_SYNC_TIMEOUT,
    interval: float = POLL_INTERVAL,
    loaded: str | None = None,
) -> ConfigReloader[Config]:
    """The reloader that puts a changed config file in force: validated, its caches provided
    (started and synced while the old config serves), then swapped in whole. loaded: the hash
    of the bytes live's config was read from (ConfigReloader)."""
    started_with = load_config(path)  # as the file says, before any per-worker share

    def load(data: bytes) -> Config:
        return exempt_own_namespace(config_from_bytes(data, path), own_namespace)

    async def apply(config: Config) -> None:
        await caches.provide(config, sync_timeout)
        fixed = [k for k in _FIXED_AT_START if getattr(config, k) != getattr(started_with, k)]
        if fixed:
            log.warning("config file %s: %s take effect at the next start", path, ", ".join(fixed))
            config = msgspec.structs.replace(
                config, **{key: getattr(live.current.config, key) for key in fixed}
            )
        caches.serve_for(config)
        live.swap(config)

    return ConfigReloader(path, load, apply, interval=interval, loaded=loaded)
