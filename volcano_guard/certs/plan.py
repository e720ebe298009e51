"""What to do next for the webhook's certificates, in the one order that never breaks TLS.

A CA rotation goes: a new CA joins every caBundle beside the old one (the API server must trust
a CA before the webhook presents a certificate it signed), then the serving certificate signed
by it is issued (the webhook serves it once its files change: the kubelet's refresh of the
mounted Secret takes a minute or more, and meanwhile the old certificate, still trusted, keeps
serving), and the old CA leaves the bundles only once it has expired, and with it every
certificate it signed. A renewal of the serving certificate alone needs no bundle change.

`plan(state, now, lifetimes)` returns one step; its caller carries it out, reads the state
again and asks again, until the answer is Done. So a run killed between steps resumes where it
stopped, and a run over a current state (an install run twice) changes nothing.

Pure: certificates in, a step out; reading and writing the cluster is certs/cluster.py's.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes

Step = Literal["make-ca", "trust", "issue", "retire", "done"]


@dataclass(frozen=True)
class Lifetimes:
    ca: datetime.timedelta = datetime.timedelta(days=3650)
    cert: datetime.timedelta = datetime.timedelta(days=365)
    # Renew a certificate once this fraction of its lifetime is left (cert-manager's default
    # renews at two thirds of the way).
    renew_when_left: float = 1 / 3


@dataclass(frozen=True)
class CertState:
    """What the cluster holds now."""

    cas: Sequence[x509.Certificate]  # the CA Secret's bundle, the newest (signing) CA first
    has_ca_key: bool  # the CA Secret holds the newest CA's key
    cert: x509.Certificate | None  # the serving certificate in the TLS Secret
    bundles: Mapping[str, frozenset[bytes]]  # webhook configuration -> CA fingerprints trusted


def fingerprint(certificate: x509.Certificate) -> bytes:
    return certificate.fingerprint(hashes.SHA256())


def due(
    certificate: x509.Certificate,
    now: datetime.datetime,
    lifetime: datetime.timedelta,
    lifetimes: Lifetimes,
) -> bool:
    """Whether a certificate has less than the renewal share of `lifetime` (the configured
    one: certificates are back-dated, so their own span is longer) left."""
    return certificate.not_valid_after_utc - now <= lifetime * lifetimes.renew_when_left


def plan(state: CertState, now: datetime.datetime, lifetimes: Lifetimes) -> tuple[Step, str]:
    """The next step and why."""
    if not state.cas or not state.has_ca_key:
        return "make-ca", "there is no CA"
    signing = state.cas[0]
    if due(signing, now, lifetimes.ca, lifetimes):
        return "make-ca", (
            f"the CA expires on {signing.not_valid_after_utc:%Y-%m-%d %H:%M}: a new one joins it"
        )
    wanted = frozenset(fingerprint(ca) for ca in state.cas)
    stale = sorted(name for name, trusted in state.bundles.items() if trusted != wanted)
    if stale:
        return "trust", f"the caBundle of {', '.join(stale)} is not the CA Secret's bundle"
    cert = state.cert
    if cert is None:
        return "issue", "there is no serving certificate"
    if cert.issuer != signing.subject or not signed_by(cert, signing):
        return "issue", "the serving certificate is not signed by the newest CA"
    if due(cert, now, lifetimes.cert, lifetimes):
        return "issue", (
            f"the serving certificate expires on {cert.not_valid_after_utc:%Y-%m-%d %H:%M}"
        )
    expired = [ca for ca in state.cas[1:] if ca.not_valid_after_utc <= now]
    if expired:
        return "retire", (
            f"{len(expired)} old CA(s) expired, and every certificate they signed with them"
        )
    return "done", "the certificates are current"


def signed_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    """Whether ca's key signed cert (by the signature: names alone can repeat)."""
    try:
        cert.verify_directly_issued_by(ca)
    except (InvalidSignature, ValueError, TypeError):  # another CA's, or not one at all
        return False
    return True
