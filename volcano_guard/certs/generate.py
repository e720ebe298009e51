"""Certificate generation: an ECDSA P-256 CA and the webhook's serving certificate; and a CA of
its own with a client certificate, for an API server the webhook verifies (`--client-ca`)."""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_FILE, CERT_FILE, KEY_FILE = "ca.crt", "tls.crt", "tls.key"
CA_KEY_FILE = "ca.key"  # kept beside the CA so later rotations can sign with it
CLIENT_CA_FILE, CLIENT_CERT_FILE, CLIENT_KEY_FILE = "client-ca.crt", "client.crt", "client.key"
LOOPBACK_NAMES = ("localhost",)
LOOPBACK_ADDRESSES = ("127.0.0.1", "::1")
_BACKDATE = datetime.timedelta(minutes=5)  # tolerate clock skew between nodes


class CertsError(Exception):
    """Generation refused (e.g. it would overwrite a CA); the message says why."""


@dataclass(frozen=True)
class GeneratedCerts:
    ca_file: Path
    cert_file: Path
    key_file: Path
    dns_names: tuple[str, ...]
    not_after: datetime.datetime
    ca_key_file: Path | None = None  # None when the CA's key is kept nowhere (loopback)

    @property
    def files(self) -> tuple[Path, ...]:
        """Every file written, for saying so: a CA key left unnamed would be a secret on disk
        its owner does not know to guard."""
        ca = (self.ca_file, self.ca_key_file) if self.ca_key_file else (self.ca_file,)
        return (*ca, self.cert_file, self.key_file)


def service_dns_names(service: str, namespace: str) -> tuple[str, ...]:
    """The names the API server may use to reach a Service."""
    return (
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    )


def generate(
    service: str,
    namespace: str,
    out_dir: str | Path,
    *,
    days: int = 365,
    force: bool = False,
    extra_dns_names: tuple[str, ...] = (),
) -> GeneratedCerts:
    """Write ca.crt, ca.key, tls.crt and tls.key (keys 0600) to out_dir."""
    out, now, not_after = _validity(out_dir, CA_FILE, days, force)
    ca_key, ca_cert = issue_ca(f"volcano-guard-ca ({namespace}/{service})", now, not_after)
    dns_names = service_dns_names(service, namespace) + extra_dns_names
    key, cert = issue_leaf(ca_key, ca_cert, dns_names, now, not_after)
    write_pem(out / CA_KEY_FILE, key_pem(ca_key), private=True)
    write_pem(out / KEY_FILE, key_pem(key), private=True)
    write_pem(out / CERT_FILE, cert_pem(cert))
    write_pem(out / CA_FILE, cert_pem(ca_cert))
    return GeneratedCerts(
        out / CA_FILE, out / CERT_FILE, out / KEY_FILE, dns_names, not_after, out / CA_KEY_FILE
    )


@dataclass(frozen=True)
class GeneratedClient:
    ca_file: Path
    cert_file: Path
    key_file: Path
    name: str
    not_after: datetime.datetime


def generate_client(
    name: str, out_dir: str | Path, *, days: int = 365, force: bool = False
) -> GeneratedClient:
    """Write client-ca.crt, client.crt and client.key (0600): a CA used for nothing else, so
    that trusting it admits this one client only, and its client certificate for `name`."""
    out, now, not_after = _validity(out_dir, CLIENT_CA_FILE, days, force)
    ca_key, ca_cert = issue_ca("volcano-guard-client-ca", now, not_after)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _leaf_certificate(
        key, ca_key, ca_cert, name, ExtendedKeyUsageOID.CLIENT_AUTH, (), now, not_after
    )
    write_pem(out / CLIENT_KEY_FILE, key_pem(key), private=True)
    write_pem(out / CLIENT_CERT_FILE, cert_pem(cert))
    write_pem(out / CLIENT_CA_FILE, cert_pem(ca_cert))
    return GeneratedClient(
        out / CLIENT_CA_FILE, out / CLIENT_CERT_FILE, out / CLIENT_KEY_FILE, name, not_after
    )


def generate_loopback(out_dir: str | Path, prefix: str, *, days: int = 365) -> GeneratedCerts:
    """A CA of its own and a certificate for localhost, 127.0.0.1 and ::1, written as
    PREFIX-ca.crt, PREFIX.crt and PREFIX.key (0600) and replacing any earlier ones: for a
    server on loopback that its clients must reach over TLS (client-go sends a kubeconfig's
    credentials to https servers only). The CA's key is kept nowhere."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    not_after = now + datetime.timedelta(days=days)
    ca_key, ca_cert = issue_ca(f"volcano-guard-loopback-ca ({prefix})", now, not_after)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _leaf_certificate(
        key,
        ca_key,
        ca_cert,
        LOOPBACK_NAMES[0],
        ExtendedKeyUsageOID.SERVER_AUTH,
        LOOPBACK_NAMES,
        now,
        not_after,
        addresses=LOOPBACK_ADDRESSES,
    )
    files = out / f"{prefix}-ca.crt", out / f"{prefix}.crt", out / f"{prefix}.key"
    write_pem(files[2], key_pem(key), private=True)
    write_pem(files[1], cert_pem(cert))
    write_pem(files[0], cert_pem(ca_cert))
    return GeneratedCerts(*files, LOOPBACK_NAMES, not_after)


def _validity(
    out_dir: str | Path, ca_file: str, days: int, force: bool
) -> tuple[Path, datetime.datetime, datetime.datetime]:
    """The output folder (made), now and the end of validity; CertsError for a bad --days or
    a CA that exists there without force."""
    if days < 1:
        raise CertsError(f"--days must be at least 1, got {days}")
    out = Path(out_dir)
    if (out / ca_file).exists() and not force:
        raise CertsError(f"{out / ca_file} exists; refusing to replace a CA (use --force)")
    out.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    return out, now, now + datetime.timedelta(days=days)


def issue_ca(
    common_name: str, now: datetime.datetime, not_after: datetime.datetime
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    return key, _ca_certificate(key, common_name, now, not_after)


def issue_leaf(
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    dns_names: tuple[str, ...],
    now: datetime.datetime,
    not_after: datetime.datetime,
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    return key, _leaf_certificate(
        key,
        ca_key,
        ca_cert,
        dns_names[-1],
        ExtendedKeyUsageOID.SERVER_AUTH,
        dns_names,
        now,
        not_after,
    )


def cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _ca_certificate(
    key: ec.EllipticCurvePrivateKey,
    common_name: str,
    now: datetime.datetime,
    not_after: datetime.datetime,
) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    public = key.public_key()
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(ca=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .sign(key, hashes.SHA256())
    )


def _leaf_certificate(
    key: ec.EllipticCurvePrivateKey,
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    common_name: str,
    usage: x509.ObjectIdentifier,
    dns_names: tuple[str, ...],
    now: datetime.datetime,
    not_after: datetime.datetime,
    addresses: tuple[str, ...] = (),
) -> x509.Certificate:
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(ca=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    if dns_names or addresses:
        names: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
        names += [x509.IPAddress(ipaddress.ip_address(address)) for address in addresses]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(ca_key, hashes.SHA256())


def _key_usage(*, ca: bool) -> x509.KeyUsage:
    """ECDSA keys sign: certificates and CRLs for the CA, TLS handshakes for the server."""
    return x509.KeyUsage(
        digital_signature=True,
        key_cert_sign=ca,
        crl_sign=ca,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        encipher_only=False,
        decipher_only=False,
    )


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def write_pem(path: Path, data: bytes, *, private: bool = False) -> None:
    """Write atomically; private files are created 0600 so the key is never world-readable."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.chmod(tmp, 0o600 if private else 0o644)
    os.replace(tmp, path)
