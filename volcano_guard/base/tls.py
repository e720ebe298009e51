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
        not_ca = _not_ca(Path(client_ca).read_bytes())
        if not_ca:
            raise ValueError(f"--client-ca {client_ca}: holds a certificate that is not a CA "
                             f"({not_ca}): no client certificate could be verified by it")
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def _not_ca(pem: bytes) -> str:
    """The subject of the first certificate in pem that is not a CA, or ""."""
    from cryptography import x509

    for certificate in x509.load_pem_x509_certificates(pem):
        try:
            ca = certificate.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        except x509.ExtensionNotFound:
            ca = False
        if not ca:
            return certificate.subject.rfc4514_string()
    return ""


def client_context(ca_file: str | Path) -> ssl.SSLContext:
    """A client context that verifies the server against ca_file, hostname included."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(ca_file))
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context
