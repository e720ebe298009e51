"""TLS contexts: the one place their protocol floor and verification settings are decided."""

from __future__ import annotations

import ssl
from pathlib import Path


def server_context(cert_file: str | Path, key_file: str | Path) -> ssl.SSLContext:
    """A server context, TLS 1.2 minimum, loaded from PEM files."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(cert_file), str(key_file))
    return context


def client_context(ca_file: str | Path) -> ssl.SSLContext:
    """A client context that verifies the server against ca_file, hostname included."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(ca_file))
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context
