"""The list+watch informer, through the `kubernetes` client.

The informer's thread owns its working state; after every change it publishes an immutable
Snapshot by swapping one reference. Readers (the admission path) take `informer.snapshot` once
per decision and never lock: a snapshot never changes after it is published, so a decision
cannot see a torn or half-applied state (the data races that crash Volcano's scheduler).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any, Generic, TypeVar

from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from volcano_guard.base.api_client import CONNECT_TIMEOUT, api_error_text

log = logging.getLogger("volcano_guard.base.informer")
T = TypeVar("T")
WATCH_SECONDS = 300  # restart watches now and then, as client-go's reflector does
# A watch may be quiet for its whole length; past this with no byte, its server is gone.
WATCH_READ_TIMEOUT = WATCH_SECONDS + 60
# Objects a list page asks for: one decoded page is what a list holds in memory at once.
PAGE = 5000


@dataclass(frozen=True)
class Snapshot(Generic[T]):
    items: Mapping[str, T]
    synced: bool = False
    resource_version: str = ""


def empty_snapshot() -> Snapshot[Any]:
    return Snapshot(MappingProxyType({}))


def static_snapshot(items: Mapping[str, T]) -> Snapshot[T]:
    """A synced snapshot of fixed items (offline `check`, the demo, tests)."""
    return Snapshot(MappingProxyType(dict(items)), synced=True)


class Gone(Exception):
    pass


class Informer(Generic[T]):
    """Lists and watches one resource on a thread of its own, keeping each object as `extract`
    projects it, keyed by `key` ("namespace/name" by default). Readers take `snapshot`; or,
    given `on_change`, the thread calls it with (key, projection) for every change and
    (key, None) for every delete, a re-list included, and with `snapshots=False` keeps no
    snapshot copies (the consumer keeps its own state: one copy, not two)."""

    def __init__(
        self,
        name: str,
        list_func: Callable[..., Any],
        extract: Callable[[dict[str, Any]], T],
        key: Callable[[dict[str, Any]], str] | None = None,
        *,
        on_change: Callable[[str, T | None], None] | None = None,
        snapshots: bool = True,
    ) -> None:
        self.name, self._list, self._extract = name, list_func, extract
        self._key = key or _name_key
        self._on_change, self._snapshots = on_change, snapshots
        self.snapshot: Snapshot[T] = empty_snapshot()
        self.relists = 0
        self._listing = False  # the thread is listing (not watching) right now
        self._items: dict[str, Any] = {}  # the projections, or only the keys without snapshots
        self._stop = threading.Event()
        self._watch: watch.Watch | None = None
        self._thread = threading.Thread(target=self._run, name=f"informer-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop watching; wait up to timeout for the thread (a daemon: 0 when exiting)."""
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()
        self._thread.join(timeout)

    def _run(self) -> None:
        delay = 0.5
        while not self._stop.is_set():
            try:
                self._list_and_watch()
                delay = 0.5
            except Gone:
                log.info("%s: resourceVersion too old, re-listing", self.name)
            except Exception as exc:  # the API server may be down: back off and reconnect
                if self._stop.is_set():
                    return
                if self._listing and self.snapshot.synced:
                    # A dropped watch alone is routine (the next attempt re-lists); a list
                    # that fails too means the API server is gone, and the cache can no longer
                    # be trusted: readiness goes down and decisions follow failClosed.
                    log.warning(
                        "%s: the API server is unreachable; the cache is not synced "
                        "until a list succeeds",
                        self.name,
                    )
                    self.snapshot = replace(self.snapshot, synced=False)
                # An ApiException's str is the client's multi-line dump of headers and body.
                said = api_error_text(exc) if isinstance(exc, ApiException) else exc
                log.warning("%s: list/watch failed (%s); retrying in %.1fs", self.name, said, delay)
                self._stop.wait(delay)
                delay = min(delay * 2, 30.0)

    def _list_and_watch(self) -> None:
        version = self._relist()
        while not self._stop.is_set():
            self._watch = watch.Watch()
            events = self._watch.stream(
                self._list,
                resource_version=version,
                allow_watch_bookmarks=True,
                timeout_seconds=WATCH_SECONDS,
                deserialize=False,
                _request_timeout=(CONNECT_TIMEOUT, WATCH_READ_TIMEOUT),
            )
            try:
                for event in events:
                    version = self._apply(event, version)
                    if self._stop.is_set():
                        return
            except ApiException as exc:
                if exc.status == 410:
                    raise Gone() from None
                raise

    def _relist(self) -> str:
        """List everything, a page at a time (as client-go's reflector pages), so that only one
        page is ever decoded in full; the first page's resourceVersion, to watch from."""
        items: dict[str, Any] = {}
        version, token = "", ""
        while True:
            self._listing = True
            response = self._list(limit=PAGE, _continue=token or None, _preload_content=False)
            self._listing = False
            page = json.loads(response.data)
            version = version or str(page["metadata"]["resourceVersion"])
            for obj in page.get("items") or []:
                key, item = self._key(obj), self._extract(obj)
                items[key] = item if self._snapshots else None
                if self._on_change is not None:
                    self._on_change(key, item)
            token = (page.get("metadata") or {}).get("continue") or ""
            if not token:
                break
        if self._on_change is not None:
            for key in self._items.keys() - items.keys():  # deleted while we were away
                self._on_change(key, None)
        self._items = items
        self.relists += 1
        self._publish(version)
        return version

    def _apply(self, event: dict[str, Any], version: str) -> str:
        kind, obj = event.get("type"), event.get("raw_object") or event.get("object")
        if not isinstance(obj, dict):
            return version
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise Gone()
            raise RuntimeError(f"watch error: {obj.get('message')}")
        version = (obj.get("metadata") or {}).get("resourceVersion") or version
        if kind == "BOOKMARK":
            return version
        key = self._key(obj)
        item = None if kind == "DELETED" else self._extract(obj)
        # A change the projection does not keep (a Queue's status, written by Volcano over and
        # over) publishes nothing: a snapshot is a copy of every item (2 ms at 100,000), and a
        # new one makes readers rebuild what they derive from it (the Queue policy's index).
        unchanged = self._snapshots and item is not None and self._items.get(key) == item
        if item is None:
            self._items.pop(key, None)
        else:
            self._items[key] = item if self._snapshots else None
        if self._on_change is not None:
            self._on_change(key, item)
        if not unchanged:
            self._publish(version)
        return version

    def _publish(self, version: str) -> None:
        items = MappingProxyType(dict(self._items)) if self._snapshots else _NOTHING
        self.snapshot = Snapshot(items, True, version)


_NOTHING: Mapping[str, Any] = MappingProxyType({})


def _name_key(obj: dict[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    namespace = metadata.get("namespace")
    return f"{namespace}/{metadata['name']}" if namespace else metadata["name"]


def wait_synced(informer: Informer[Any], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not informer.snapshot.synced and time.monotonic() < deadline:
        time.sleep(0.02)
    return informer.snapshot.synced
