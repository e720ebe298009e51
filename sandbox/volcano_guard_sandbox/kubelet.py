"""The kubelet's part for the guard's pods, which the sandbox does not run: a ConfigMap or a
Secret projected into a directory as a volume mount shows it, kept in step with the API server.

The kubelet writes a volume the way its AtomicWriter does (Kubernetes pkg/volume/util/
atomic_writer.go, AtomicWriter.Write): the keys go into a new hidden directory `..<timestamp>`,
a symlink `..data_tmp` to it is renamed over `..data`, and each key is a symlink
`<key> -> ..data/<key>`. A reader never sees half a change, and a path's mtime does not move
when its content does: what the guard's processes must cope with when they re-read their config
or certificate. A mount with `subPath` is never refreshed; this class plays only the other kind.
"""

from __future__ import annotations

import base64
import datetime
import json
import shutil
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path


def write_atomically(directory: Path, files: Mapping[str, bytes]) -> bool:
    """Make directory show exactly files, as the kubelet swaps a volume's content; False when
    it already does."""
    directory.mkdir(parents=True, exist_ok=True)
    data = directory / "..data"
    if data.exists() and _current(directory) == dict(files):
        return False
    stamp = datetime.datetime.now(datetime.UTC).strftime("..%Y_%m_%d_%H_%M_%S.%f")
    fresh = directory / stamp
    fresh.mkdir()
    for key, content in files.items():
        (fresh / key).write_bytes(content)
    old = data.resolve() if data.is_symlink() else None
    staging = directory / "..data_tmp"
    staging.unlink(missing_ok=True)
    staging.symlink_to(stamp)
    staging.rename(data)
    for key in files:
        link = directory / key
        if not link.is_symlink():
            link.symlink_to(Path("..data") / key)
    for stale in directory.iterdir():
        if stale.is_symlink() and stale.name != "..data" and stale.name not in files:
            stale.unlink()
    if old is not None and old != fresh.resolve():
        shutil.rmtree(old, ignore_errors=True)
    return True


def _current(directory: Path) -> dict[str, bytes]:
    data = directory / "..data"
    return {path.name: path.read_bytes() for path in data.iterdir() if path.is_file()}


class VolumeProjector:
    """Keeps directory equal to one ConfigMap's or Secret's data, read from the API server every
    `interval` seconds (the kubelet's sync period is about a minute; tests want it shorter).
    A missing object leaves the last content in place, as the kubelet does for a running pod."""

    def __init__(
        self,
        url: str,
        kind: str,
        namespace: str,
        name: str,
        directory: Path,
        *,
        token: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
        interval: float = 0.5,
    ) -> None:
        resource = {"ConfigMap": "configmaps", "Secret": "secrets"}[kind]
        self._url = f"{url}/api/v1/namespaces/{namespace}/{resource}/{name}"
        self._secret = kind == "Secret"
        self.directory, self._token, self._ssl = directory, token, ssl_context
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"kubelet {name}", daemon=True)
        self.updates = 0

    def __enter__(self) -> VolumeProjector:
        self.sync_once()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def sync_once(self) -> bool:
        """Project the object now; False when it is missing or unchanged."""
        files = self._read()
        if files is None or not write_atomically(self.directory, files):
            return False
        self.updates += 1
        return True

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self.sync_once()
            except (OSError, ValueError):
                continue  # the API server away, as a kubelet retries its next sync

    def _read(self) -> dict[str, bytes] | None:
        headers = {"Authorization": f"Bearer {self._token}"} if self._token else {}
        request = urllib.request.Request(self._url, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=5, context=self._ssl) as response:
                obj = json.load(response)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise
        data = obj.get("data") or {}
        if self._secret:
            return {key: base64.b64decode(value) for key, value in data.items()}
        return {key: str(value).encode() for key, value in data.items()}
