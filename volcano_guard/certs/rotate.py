"""Certificate rotation before expiry, with a CA overlap.

`rotate(dir, renew_before)` renews what expires within `renew_before`:
- the serving certificate: re-signed (new key, same DNS names) by the current CA;
- the CA: a new CA is made, and `ca.crt` becomes a bundle of the new CA followed by the old one,
  so clients that still trust only the old CA, and servers still presenting a leaf it signed,
  keep working while the new bundle is injected everywhere; the leaf is re-signed by the new CA
  at once. A later run drops an old CA from the bundle once it has expired.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID

from volcano_guard.base.files import FileProblem, read_bytes
from volcano_guard.certs.generate import (
    CA_FILE,
    CA_KEY_FILE,
    CERT_FILE,
    KEY_FILE,
    CertsError,
    cert_pem,
    issue_ca,
    issue_leaf,
    key_pem,
    write_pem,
)

DEFAULT_RENEW_BEFORE = datetime.timedelta(hours=720)


@dataclass(frozen=True)
class Rotation:
    leaf_renewed: bool
    ca_rotated: bool
    bundle_size: int
    leaf_not_after: datetime.datetime


def rotate(
    directory: str | Path,
    renew_before: datetime.timedelta = DEFAULT_RENEW_BEFORE,
    *,
    now: datetime.datetime | None = None,
    force_leaf: bool = False,
) -> Rotation:
    out = Path(directory)
    now = now or datetime.datetime.now(datetime.UTC)
    try:
        ca_data, key_data, cert_data = (
            read_bytes(out / name) for name in (CA_FILE, CA_KEY_FILE, CERT_FILE)
        )
    except FileProblem as exc:
        raise CertsError(f"{exc} (certs rotate renews what certs generate wrote)") from None
    try:
        bundle = x509.load_pem_x509_certificates(ca_data)
        ca_key = serialization.load_pem_private_key(key_data, None)
        leaf = x509.load_pem_x509_certificate(cert_data)
    except ValueError as exc:
        raise CertsError(f"{out}: ca.crt, ca.key and tls.crt do not all parse: {exc}") from None
    ca_cert = bundle[0]
    bundle = [ca for ca in bundle if ca.not_valid_after_utc > now]  # drop expired old CAs
    lifetime = leaf.not_valid_after_utc - leaf.not_valid_before_utc
    ca_rotated = ca_cert.not_valid_after_utc - now <= renew_before
    if ca_rotated:
        ca_lifetime = ca_cert.not_valid_after_utc - ca_cert.not_valid_before_utc
        common_name = ca_cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
        ca_key, ca_cert = issue_ca(str(common_name), now, now + ca_lifetime)
        bundle = [ca_cert, *bundle]
        write_pem(out / CA_KEY_FILE, key_pem(ca_key), private=True)
    leaf_renewed = force_leaf or ca_rotated or leaf.not_valid_after_utc - now <= renew_before
    if leaf_renewed:
        names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        dns_names = tuple(names.get_values_for_type(x509.DNSName))
        not_after = min(now + lifetime, ca_cert.not_valid_after_utc)
        key, leaf = issue_leaf(ca_key, ca_cert, dns_names, now, not_after)  # type: ignore[arg-type]
        write_pem(out / KEY_FILE, key_pem(key), private=True)  # key first: a reader that
        write_pem(out / CERT_FILE, cert_pem(leaf))  # sees the new cert finds its key
    write_pem(out / CA_FILE, b"".join(cert_pem(ca) for ca in bundle))
    return Rotation(leaf_renewed, ca_rotated, len(bundle), leaf.not_valid_after_utc)
