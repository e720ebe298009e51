"""Re-reading a config file while a process runs: the one reloader the webhook and the audit share.

The file is read and hashed every poll (a config is a few KiB): the kubelet updates a ConfigMap
volume by swapping the directory's `..data` symlink, so neither the path's own mtime nor its inode
need change; the content's hash always does. New content is loaded (parsed and validated) and
handed to `apply`; either may refuse it by raising ValueError, which is logged once on one line
naming the file, counted as rejected, and leaves the last good config in force. Content already
refused is not tried again until it changes. The loaded config's hash is exported as
volcano_guard_config_info{hash}.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Generic, TypeVar

from prometheus_client import Counter, Gauge

from volcano_guard.base.files import FileProblem, read_bytes
from volcano_guard.base.metrics import PREFIX, REGISTRY

log = logging.getLogger("volcano_guard.config")
T = TypeVar("T")
POLL_INTERVAL = 2.0  # seconds between reads of the file
CONFIG_RELOADS = Counter(
    f"{PREFIX}config_reloads",
    "Changes of the config file seen while running, by result: applied, or rejected (the "
    "last good config stays in force).",
    ["result"],
    registry=REGISTRY,
)
CONFIG_INFO = Gauge(
    f"{PREFIX}config_info",
    "1 for the config in force, labelled with the first 12 hex digits of its file's SHA-256.",
    ["hash"],
    registry=REGISTRY,
)
for _result in ("applied", "rejected"):  # both series exist from the start, at 0
    CONFIG_RELOADS.labels(result=_result)


def content_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:12]


class ConfigReloader(Generic[T]):
    """Polls path; load(its bytes) parses and validates them, apply(config) puts it in force (both
    raise ValueError to refuse it). loaded is the hash of the content the process started with
    (content_hash of the very bytes it read: a change in between is then applied); without it,
    the file's content now."""

    def __init__(
        self,
        path: str | Path,
        load: Callable[[bytes], T],
        apply: Callable[[T], Awaitable[None]],
        *,
        interval: float = POLL_INTERVAL,
        loaded: str | None = None,
    ) -> None:
        self.path, self._load, self._apply, self.interval = Path(path), load, apply, interval
        self.loaded = loaded or self._current_hash()  # the content in force
        self._refused: str | None = None
        self.applied = self.rejected = 0
        _export(self.loaded)

    def _current_hash(self) -> str | None:
        try:
            return content_hash(read_bytes(self.path))
        except FileProblem:
            return None

    async def check(self) -> bool:
        """Apply the file's content when it changed and is good; True if it was applied."""
        try:
            data = read_bytes(self.path, "config file")
        except FileProblem as exc:  # mid-swap, or removed: the last good config stays
            if self._refused != str(exc):
                self._refused = str(exc)
                self._reject(str(exc))
            return False
        digest = content_hash(data)
        if digest in (self.loaded, self._refused):
            return False
        try:
            await self._apply(self._load(data))  # the bytes hashed, not a re-read
        except ValueError as exc:
            self._refused = digest
            self._reject(str(exc))
            return False
        self.loaded, self._refused = digest, None
        self.applied += 1
        CONFIG_RELOADS.labels(result="applied").inc()
        _export(digest)
        log.info("config file %s reloaded (hash %s)", self.path, digest)
        return True

    def _reject(self, problem: str) -> None:
        self.rejected += 1
        CONFIG_RELOADS.labels(result="rejected").inc()
        log.error(
            "config file %s changed but is refused (the last good config stays): %s",
            self.path,
            problem,
        )

    async def watch(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self.check()


def _export(digest: str | None) -> None:
    CONFIG_INFO.clear()
    CONFIG_INFO.labels(hash=digest or "defaults").set(1)
