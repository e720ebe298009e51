"""Serving certificate reload without a restart, that cannot break TLS.

When the certificate or key file changes, the pair is read once, proven in a fresh SSLContext
(both parse and the key matches the certificate), and only then loaded into the live context
from the very same bytes: new handshakes get the new certificate, open connections and requests
in flight keep theirs. A pair that does not load (half written, garbage, a key of another
certificate) leaves the previous one serving, is logged once and counted in
volcano_guard_cert_reload_errors_total; the next change of the files is tried again. Loading
straight into the live context would not be safe: OpenSSL installs the new certificate, then
rejects a key that does not match it, and the context is left with no usable pair.
The leaf's expiry is exported as volcano_guard_cert_expiry_timestamp_seconds, and once it has
passed with no renewed pair, `problem()` says so (the webhook's /readyz answers 503 with it).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import ssl
import tempfile
import time
from pathlib import Path

from cryptography import x509
from prometheus_client import Counter, Gauge

from volcano_guard.base.metrics import PREFIX, REGISTRY

log = logging.getLogger("volcano_guard.certs")
CERT_EXPIRY = Gauge(
    f"{PREFIX}cert_expiry_timestamp_seconds",
    "Unix time at which the serving certificate expires.",
    registry=REGISTRY,
)
RELOAD_ERRORS = Counter(
    f"{PREFIX}cert_reload_errors_total",
    "Changed certificate files that did not form a usable pair (the "
    "previous certificate kept serving).",
    registry=REGISTRY,
)


class CertReloader:
    def __init__(
        self, context: ssl.SSLContext, cert_file: str | Path, key_file: str | Path
    ) -> None:
        self.context, self.cert_file, self.key_file = context, Path(cert_file), Path(key_file)
        self.reloads = 0
        self._stamp = self._files_stamp()
        self._refused: tuple[int, ...] | None = None  # files already found unusable
        self.expires_at = _expiry(self.cert_file.read_bytes())
        CERT_EXPIRY.set(self.expires_at)

    def problem(self) -> str | None:
        """Why the webhook should not be ready: the certificate it serves has expired (no
        renewed pair has arrived), else None."""
        if time.time() < self.expires_at:
            return None
        expired = datetime.datetime.fromtimestamp(self.expires_at, datetime.UTC)
        return (
            f"the serving certificate {self.cert_file} expired at {expired:%Y-%m-%d %H:%M:%S}"
            " UTC and no renewed one has arrived"
        )

    def _files_stamp(self) -> tuple[int, ...]:
        stats = [os.stat(path) for path in (self.cert_file, self.key_file)]
        return tuple(v for st in stats for v in (st.st_mtime_ns, st.st_size, st.st_ino))

    def check(self) -> bool:
        """Reload when the files changed and form a usable pair; True if it did."""
        try:
            stamp = self._files_stamp()
            if stamp in (self._stamp, self._refused):
                return False
            cert, key = self.cert_file.read_bytes(), self.key_file.read_bytes()
        except OSError:
            return False  # mid-rename, or gone for a moment: the next check sees
        try:
            expiry = _load_pair(self.context, cert, key)
        except (ssl.SSLError, OSError, ValueError) as exc:
            self._refused = stamp
            RELOAD_ERRORS.inc()
            log.error(
                "serving certificate files %s and %s changed but do not form a usable "
                "pair (%s); the previous certificate keeps serving",
                self.cert_file,
                self.key_file,
                exc,
            )
            return False
        CERT_EXPIRY.set(expiry)
        self.expires_at = expiry
        self._stamp, self._refused = stamp, None
        self.reloads += 1
        log.info("serving certificate reloaded from %s", self.cert_file)
        return True

    async def watch(self, interval: float = 5.0) -> None:
        while True:
            await asyncio.sleep(interval)
            self.check()


def _load_pair(live: ssl.SSLContext, cert: bytes, key: bytes) -> float:
    """Prove cert and key in a fresh context, then load the same bytes into live; the leaf's
    expiry. Raises (live untouched) when they do not load or do not match."""
    expiry = _expiry(cert)
    with tempfile.TemporaryDirectory(prefix="volcano-guard-tls-") as private:  # mode 0700
        cert_path, key_path = Path(private, "tls.crt"), Path(private, "tls.key")
        cert_path.write_bytes(cert)
        key_path.write_bytes(key)
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert_path, key_path)
        live.load_cert_chain(cert_path, key_path)  # the bytes just proven: cannot fail now
    return expiry


def _expiry(cert: bytes) -> float:
    return x509.load_pem_x509_certificate(cert).not_valid_after_utc.timestamp()
