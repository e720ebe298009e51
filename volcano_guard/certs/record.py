"""Which CAs `certs ensure` made: the record it keeps beside them in the CA Secret.

The record (CA_RECORD_FILE) lists the SHA-256 fingerprints of the CAs it made and still
trusts, one hex line each, and CA_RECORD_SIGNATURE_FILE is the newest CA's key's signature of
it. Only whoever holds that key (the CA Secret's ca.key, which nothing but the issuer reads)
can write a record that verifies, so a CA someone appends to ca.crt, in front or behind, is
not in it and is refused; one who can also replace ca.key replaces the issuer, which no check
of the Secret's content can tell apart (docs/decisions/certs.md, "Only the CAs it made").
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

from volcano_guard.certs.plan import fingerprint

CA_RECORD_FILE = "ca.record"
CA_RECORD_SIGNATURE_FILE = "ca.record.sig"
_HEADER = b"volcano-guard made these CAs (sha256):\n"


def record(cas: Iterable[x509.Certificate]) -> bytes:
    """The record of cas."""
    return _HEADER + b"".join(fingerprint(ca).hex().encode() + b"\n" for ca in cas)


def sign(key: Any, text: bytes) -> bytes:
    """key's signature of a record (keys are EC: certs/generate.py)."""
    return bytes(key.sign(text, ec.ECDSA(hashes.SHA256())))


def recorded(text: bytes, signature: bytes, signer: x509.Certificate | None) -> frozenset[bytes]:
    """The fingerprints a record lists when signer's key signed it; none otherwise."""
    public = signer.public_key() if signer is not None else None
    if not isinstance(public, ec.EllipticCurvePublicKey) or not text.startswith(_HEADER):
        return frozenset()
    try:
        public.verify(signature, text, ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        return frozenset()
    try:
        return frozenset(bytes.fromhex(line) for line in text[len(_HEADER) :].decode().split())
    except (UnicodeDecodeError, ValueError):
        return frozenset()
