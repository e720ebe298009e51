"""Serving certificate reload without a restart.

The webhook's SSLContext is loaded again in place when the certificate or key file changes:
new handshakes use the new certificate, connections already open keep theirs, and nothing in
flight is dropped. The leaf's expiry is exported as volcano_guard_cert_expiry_timestamp_seconds.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from pathlib import Path

from cryptography import x509
from prometheus_client import Gauge

from volcano_guard.metrics import PREFIX, REGISTRY

log = logging.getLogger("volcano_guard.certs")
CERT_EXPIRY = Gauge(f"{PREFIX}cert_expiry_timestamp_seconds",
                    "Unix time at which the serving certificate expires.", registry=REGISTRY)


class CertReloader:
    def __init__(self, context: ssl.SSLContext, cert_file: str | Path,
                 key_file: str | Path) -> None:
        self.context, self.cert_file, self.key_file = context, Path(cert_file), Path(key_file)
        self.reloads = 0
        self._stamp = self._files_stamp()
        self._export_expiry()

    def _files_stamp(self) -> tuple[int, ...]:
        stats = [os.stat(path) for path in (self.cert_file, self.key_file)]
        return tuple(v for st in stats for v in (st.st_mtime_ns, st.st_size, st.st_ino))

    def _export_expiry(self) -> None:
        cert = x509.load_pem_x509_certificate(self.cert_file.read_bytes())
        CERT_EXPIRY.set(cert.not_valid_after_utc.timestamp())

    def check(self) -> bool:
        """Reload when the files changed; True if it did. A half-written pair (key and cert
        not matching yet) is left for the next check, the old certificate staying in use."""
        try:
            stamp = self._files_stamp()
        except OSError:
            return False
        if stamp == self._stamp:
            return False
        try:
            self.context.load_cert_chain(str(self.cert_file), str(self.key_file))
            self._export_expiry()
        except (ssl.SSLError, OSError, ValueError) as exc:
            log.warning("serving certificate not reloaded yet: %s", exc)
            return False
        self._stamp = stamp
        self.reloads += 1
        log.info("serving certificate reloaded from %s", self.cert_file)
        return True

    async def watch(self, interval: float = 5.0) -> None:
        while True:
            await asyncio.sleep(interval)
            self.check()
