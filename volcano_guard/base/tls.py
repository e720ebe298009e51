"""TLS contexts: the one place their protocol floor and verification settings are decided."""

from __future__ import annotations

import datetime
import re
import ssl
from pathlib import Path
from typing import Any

from volcano_guard.base.files import read_bytes


def server_context(
    cert_file: str | Path, key_file: str | Path, client_ca: str | Path | None = None
) -> ssl.SSLContext:
    """A server context, TLS 1.2 minimum, loaded from PEM files; with client_ca, a client must
    present a certificate that CA signed, or the handshake fails."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    cert, key = read_bytes(cert_file, "--tls-cert"), read_bytes(key_file, "--tls-key")
    try:
        context.load_cert_chain(str(cert_file), str(key_file))
    except ssl.SSLError as exc:
        raise ValueError(
            pair_problem(cert, key, f"--tls-cert {cert_file}", f"--tls-key {key_file}") or str(exc)
        ) from None
    if client_ca is not None:
        problem = ca_bundle_problem(read_bytes(client_ca, "--client-ca"))
        if problem:  # the same rule as a caBundle's, before OpenSSL's own words
            raise ValueError(f"--client-ca {client_ca}: {problem}")
        try:
            context.load_verify_locations(cafile=str(client_ca))
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(
                f"--client-ca {client_ca}: not a readable PEM CA bundle ({exc})"
            ) from None
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def pair_problem(cert: bytes, key: bytes, cert_label: str, key_label: str) -> str | None:
    """Why a certificate and key do not make a serving pair, naming both (labels such as
    "--tls-cert FILE"); None when they do."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    swapped = "; are the certificate and the key swapped?"
    try:
        certificate = x509.load_pem_x509_certificates(cert)[0]
    except ValueError:
        held = " (it holds a private key)" if b"PRIVATE KEY" in cert else ""
        return f"{cert_label} is not a PEM certificate{held}" + (swapped * bool(held))
    try:
        private = serialization.load_pem_private_key(key, None)
    except (ValueError, TypeError):
        held = " (it holds a certificate)" if b"CERTIFICATE" in key else ""
        return f"{key_label} is not an unencrypted PEM private key{held}" + (swapped * bool(held))
    info = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    if private.public_key().public_bytes(der, info) != certificate.public_key().public_bytes(
        der, info
    ):
        return f"{key_label} is not the key of {cert_label}"
    return None


def _is_ca(certificate: Any) -> bool:
    from cryptography import x509

    try:
        return bool(certificate.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
    except x509.ExtensionNotFound:
        return False


_PEM_BLOCK = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----")


def ca_bundle_problem(pem: bytes, now: datetime.datetime | None = None) -> str | None:
    """What makes pem unfit to be a caBundle (which everyone who may read webhook
    configurations can read, and which the API server trusts), or None: it must hold one or
    more PEM CA certificates, current, and nothing else."""
    from cryptography import x509

    kinds = [kind.decode() for kind in _PEM_BLOCK.findall(pem)]
    if not pem.strip():
        return "is empty"
    secrets = [kind for kind in kinds if "PRIVATE KEY" in kind]
    if secrets:
        return (
            f"holds a private key ({secrets[0]}): a caBundle is readable by anyone who may "
            "read webhook configurations; pass the CA certificate (ca.crt)"
        )
    if not kinds:
        return "holds no PEM block (-----BEGIN CERTIFICATE-----): not a CA certificate"
    others = [kind for kind in kinds if kind != "CERTIFICATE"]
    if others:
        return f"holds a {others[0]} block: a caBundle holds CA certificates only"
    try:
        certificates = x509.load_pem_x509_certificates(pem)
    except ValueError as exc:
        return f"holds a certificate that does not parse ({exc})"
    now = now or datetime.datetime.now(datetime.UTC)
    for certificate in certificates:
        subject = certificate.subject.rfc4514_string() or "(no subject)"
        if not _is_ca(certificate):
            return (
                f"holds a certificate that is not a CA ({subject}): the serving "
                "certificate, perhaps; pass the CA that signed it"
            )
        if certificate.not_valid_after_utc <= now:
            return (
                f"holds a CA certificate that expired on "
                f"{certificate.not_valid_after_utc:%Y-%m-%d} ({subject})"
            )
    return None


def client_context(ca_file: str | Path) -> ssl.SSLContext:
    """A client context that verifies the server against ca_file, hostname included."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(ca_file))
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context
