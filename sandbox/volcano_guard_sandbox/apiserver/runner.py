"""Start and stop the sandbox: in the current event loop (async tests, the demo, benchmarks) or
on a thread of its own (synchronous clients such as kubectl or the `kubernetes` package).

The store belongs to the loop that serves it. From another thread, reach it only through
SandboxThread.call, which runs a function on that loop and returns its result.
"""

from __future__ import annotations

import asyncio
import ssl
import threading
from collections.abc import AsyncIterator, Callable, Iterable
from concurrent.futures import Future
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web

from volcano_guard.base.files import FileProblem, read_text, yaml_documents
from volcano_guard.base.listen import Listen, start_site
from volcano_guard_sandbox.apiserver.faults import FaultRule, Faults, Stats
from volcano_guard_sandbox.apiserver.resources import ResourceType, served
from volcano_guard_sandbox.apiserver.server import (
    FAULTS_KEY,
    STATS_KEY,
    STORE_KEY,
    SandboxSettings,
    create_app,
)
from volcano_guard_sandbox.apiserver.store import Store, Stored
from volcano_guard_sandbox.apiserver.versions import DEFAULT, VERSION_KEY, KubernetesVersion

T = TypeVar("T")


class Sandbox:
    """A running sandbox: its URL, its store, its faults and its counters."""

    def __init__(self, app: web.Application, url: str) -> None:
        self.app, self.url = app, url

    @property
    def store(self) -> Store:
        return self.app[STORE_KEY]

    @property
    def stats(self) -> Stats:
        return self.app[STATS_KEY]

    @property
    def kubernetes_version(self) -> KubernetesVersion:
        return self.app[VERSION_KEY]

    def set_faults(self, *rules: FaultRule) -> None:
        self.app[FAULTS_KEY].rules = rules

    def seed(self, objects: Iterable[dict[str, Any]]) -> list[Stored]:
        """Create objects (namespaces they name are created first when missing)."""
        return seed(self.store, objects, self.kubernetes_version)


@asynccontextmanager
async def running(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    settings: SandboxSettings | None = None,
    faults: Faults | None = None,
    event_window: int = 10_000,
    tls: ssl.SSLContext | None = None,
    kubernetes_version: KubernetesVersion | None = None,
) -> AsyncIterator[Sandbox]:
    """Serve a fresh sandbox inside the block; port 0 picks a free one. With tls it serves
    HTTPS, which kubectl needs to send a bearer token (it sends none over plain HTTP).
    kubernetes_version, when given, is the version played (else the settings')."""
    settings = with_version(settings, kubernetes_version)
    app = create_app(Store(event_window), faults, settings)
    # handler_cancellation: a client that leaves ends its watch at once, as kube-apiserver's
    # request context does.
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=2, handler_cancellation=True)
    await runner.setup()
    try:
        await start_site(
            web.TCPSite(runner, host, port, ssl_context=tls), "--listen", Listen(host, port)
        )
        bound = runner.addresses[0][1]
        yield Sandbox(app, f"{'https' if tls else 'http'}://{host}:{bound}")
    finally:
        await runner.cleanup()


class SandboxThread:
    """The sandbox on a thread with its own event loop; `with SandboxThread() as sandbox:`."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        settings: SandboxSettings | None = None,
        event_window: int = 10_000,
        tls: ssl.SSLContext | None = None,
        kubernetes_version: KubernetesVersion | None = None,
    ) -> None:
        self._host, self._port = host, port
        self._settings = with_version(settings, kubernetes_version)
        self._event_window, self._tls = event_window, tls
        self._loop = asyncio.new_event_loop()
        self._started: Future[Sandbox] = Future()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._main, name="sandbox", daemon=True)

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._serve())
        self._loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        try:
            async with running(
                self._host,
                self._port,
                settings=self._settings,
                event_window=self._event_window,
                tls=self._tls,
            ) as sandbox:
                self._started.set_result(sandbox)
                await self._stop.wait()
        except BaseException as exc:
            if not self._started.done():
                self._started.set_exception(exc)
            raise

    def __enter__(self) -> SandboxThread:
        self._thread.start()
        self.sandbox = self._started.result(timeout=10)
        self.url = self.sandbox.url
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def call(self, function: Callable[[Sandbox], T]) -> T:
        """Run function(sandbox) on the sandbox's loop and return its result."""

        async def run() -> T:
            return function(self.sandbox)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout=10)

    def seed(self, objects: Iterable[dict[str, Any]]) -> list[Stored]:
        objects = list(objects)
        return self.call(lambda sandbox: sandbox.seed(objects))

    def stats(self) -> dict[str, Any]:
        return self.call(lambda sandbox: sandbox.stats.as_dict())

    def set_faults(self, *rules: FaultRule) -> None:
        self.call(lambda sandbox: sandbox.set_faults(*rules))


def with_version(
    settings: SandboxSettings | None, kubernetes_version: KubernetesVersion | None
) -> SandboxSettings:
    """settings (or the defaults) playing kubernetes_version, when one is given."""
    settings = settings or SandboxSettings()
    if kubernetes_version is None:
        return settings
    return replace(settings, kubernetes_version=kubernetes_version)


def resource_for(obj: dict[str, Any], played: KubernetesVersion = DEFAULT) -> ResourceType:
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    for resource in played.resources:
        if (resource.api_version, resource.kind) == (api_version, kind):
            return resource
    raise ValueError(f"the sandbox does not serve {kind} ({api_version}) at Kubernetes {played}")


def seed(
    store: Store, objects: Iterable[dict[str, Any]], played: KubernetesVersion = DEFAULT
) -> list[Stored]:
    namespaces = served("", "v1", "namespaces")
    created = []
    for obj in objects:
        resource = resource_for(obj, played)
        namespace = ""
        if resource.namespaced:
            namespace = (obj.get("metadata") or {}).get("namespace") or "default"
            existing, _ = store.list(namespaces, "")
            if namespace not in {s.fields["metadata.name"] for s in existing}:
                store.create(namespaces, "", {"metadata": {"name": namespace}})
        created.append(store.create(resource, namespace, obj))
    return created


def load_files(paths: Iterable[str | Path]) -> list[dict[str, Any]]:
    """Every object in the YAML/JSON files (multi-document; `kind: List` expanded);
    FileProblem naming a file that cannot be read or parsed."""
    objects: list[dict[str, Any]] = []
    for path in paths:
        for index, document in enumerate(
            yaml_documents(read_text(path, "--load"), f"--load {path}")
        ):
            if isinstance(document, dict) and document.get("kind") == "List":
                found = document.get("items") or []
            else:
                found = [] if document is None else [document]
            if not isinstance(found, list) or not all(isinstance(o, dict) for o in found):
                raise FileProblem(
                    f"--load {path}: document {index} is not a Kubernetes "
                    "object (a mapping) or a List of them"
                )
            objects.extend(found)
    return objects


# The namespaces a new cluster has (kube-apiserver's system namespaces controller makes them),
# so that `kubectl apply -f pod.yaml` into the default namespace works as it does there.
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


async def serve_forever(
    host: str,
    port: int,
    objects: list[dict[str, Any]],
    settings: SandboxSettings | None = None,
    tls: ssl.SSLContext | None = None,
) -> int:
    """`volcano-guard sandbox`: serve objects until SIGTERM/SIGINT; FileProblem when the
    objects cannot be created."""
    import logging
    import signal

    from volcano_guard_sandbox.apiserver.store import ApiError

    log = logging.getLogger("volcano_guard_sandbox.apiserver")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    named = {(o.get("kind"), (o.get("metadata") or {}).get("name")) for o in objects}
    system = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        for name in SYSTEM_NAMESPACES
        if ("Namespace", name) not in named
    ]
    async with running(host, port, settings=settings, tls=tls) as sandbox:
        try:
            sandbox.seed([*system, *objects])
        except (ApiError, ValueError) as exc:
            raise FileProblem(f"--load: {exc}") from None
        log.info(
            "sandbox API server on %s (try: kubectl --server %s get nodes)",
            sandbox.url,
            sandbox.url,
        )
        await stop.wait()
    return 0
