"""TLS contexts: the one place their protocol floor and verification settings are decided."""

from __future__ import annotations

import ssl
from pathlib import Path


def server_context(cert_file: str | Path, key_file: str | Path,
                   client_ca: str | Path | None = None) -> ssl.SSLContext:
    """A server context, TLS 1.2 minimum, loaded from PEM files; with client_ca, a client must
    present a certificate that CA signed, or the handshake fails."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(cert_file), str(key_file))
    if client_ca is not None:
        try:
            context.load_verify_locations(cafile=str(client_ca))
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"--client-ca {client_ca}: not a readable PEM CA bundle "
                             f"({exc})") from None
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def client_context(ca_file: str | Path) -> ssl.SSLContext:
    """A client context that verifies the server against ca_file, hostname included."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(ca_file))
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context
