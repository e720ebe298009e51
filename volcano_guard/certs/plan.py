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

It recovers from any state the cluster can be left in, because each rule only looks at what
is there now: a CA that expired (or is no CA) leaves the CA Secret before anything is trusted,
as it verifies nothing; a CA that the TLS Secret lists, or that signed the serving certificate,
joins the CA Secret before the bundles are set from it, so no bundle loses the CA of a
certificate the webhook may still serve; a bundle emptied by re-created registrations is then
simply stale, as is one still listing an expired CA.

Pure: certificates in, a step out; reading and writing the cluster is certs/ensure.py's.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization

Step = Literal["make-ca", "refuse", "retire", "adopt", "record", "trust", "issue", "done"]


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
    has_ca_key: bool  # the CA Secret holds the key of its first CA
    cert: x509.Certificate | None  # the serving certificate in the TLS Secret
    bundles: Mapping[str, frozenset[bytes]]  # webhook configuration -> CA fingerprints trusted
    cert_key_matches: bool = True  # the TLS Secret's key is the serving certificate's
    tls_cas: Sequence[x509.Certificate] = ()  # the TLS Secret's ca.crt
    bundle_cas: Sequence[x509.Certificate] = ()  # every CA certificate in any caBundle
    # The CA Secret's CAs the issuer did not make (certs/record.py): never trusted, removed.
    foreign: Sequence[x509.Certificate] = ()
    # The fingerprints of the CAs the issuer made, as its signed record lists them (None: no
    # record is kept, every CA counts as made; `cas` holds only made ones).
    recorded: frozenset[bytes] | None = None


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
    made = _ca_problem(state, now, lifetimes)
    if made:
        return "make-ca", made
    if state.foreign:
        return "refuse", "the CA Secret lists CAs volcano-guard did not make, refused: " + (
            "; ".join(_named(ca) for ca in state.foreign)
        )
    if retired(state, now) != list(state.cas):
        return "retire", "the CA Secret lists a CA that expired or is not a CA: it verifies nothing"
    if adopted(state, now) != list(state.cas):
        return "adopt", (
            "a current CA that the TLS Secret lists or that signed the serving certificate is "
            "missing from the CA Secret: it joins it, so that it stays trusted"
        )
    if state.recorded is not None and state.recorded != {fingerprint(ca) for ca in state.cas}:
        return "record", "the record of the CAs volcano-guard made is missing or out of date"
    wanted = trusted(state, now)
    stale = sorted(name for name, trust in state.bundles.items() if trust != wanted)
    if stale:
        return "trust", f"the caBundle of {', '.join(stale)} is not the CA Secret's bundle"
    reissue = _cert_problem(state, now, lifetimes)
    if reissue:
        return "issue", reissue
    return "done", "the certificates are current"


def _named(ca: x509.Certificate) -> str:
    return f"{ca.subject.rfc4514_string()} (sha256 {fingerprint(ca).hex()[:16]})"


def _ca_problem(state: CertState, now: datetime.datetime, lifetimes: Lifetimes) -> str | None:
    """Why a new signing CA is needed, or None."""
    if not state.cas or not state.has_ca_key:
        return "there is no CA with its key"
    signing = state.cas[0]
    if not is_ca(signing):
        return "the CA Secret's first certificate is not a CA"
    return _time_problem("the CA", signing, now, lifetimes.ca, lifetimes)


def _cert_problem(state: CertState, now: datetime.datetime, lifetimes: Lifetimes) -> str | None:
    """Why a new serving certificate is needed, or None."""
    cert, signing = state.cert, state.cas[0]
    if cert is None:
        return "there is no serving certificate"
    if not state.cert_key_matches:
        return "the TLS Secret's key is not the serving certificate's"
    if cert.issuer != signing.subject or not signed_by(cert, signing):
        return "the serving certificate is not signed by the newest CA"
    return _time_problem("the serving certificate", cert, now, lifetimes.cert, lifetimes)


def _time_problem(
    what: str,
    certificate: x509.Certificate,
    now: datetime.datetime,
    lifetime: datetime.timedelta,
    lifetimes: Lifetimes,
) -> str | None:
    """Why certificate must be replaced for its dates (not valid yet: a clock that went back;
    due), or None."""
    if certificate.not_valid_before_utc > now:
        return f"{what} is not valid before {certificate.not_valid_before_utc:%Y-%m-%d %H:%M}"
    if due(certificate, now, lifetime, lifetimes):
        return f"{what} expires on {certificate.not_valid_after_utc:%Y-%m-%d %H:%M}"
    return None


def usable(ca: x509.Certificate, now: datetime.datetime) -> bool:
    """Whether ca may stay in a caBundle: a CA certificate not expired (one not valid yet
    may become so; one expired never verifies anything again)."""
    return is_ca(ca) and ca.not_valid_after_utc > now


def cas_after(
    step: Step, state: CertState, now: datetime.datetime, new_ca: x509.Certificate | None = None
) -> list[x509.Certificate]:
    """The CA Secret's bundle once step (make-ca with new_ca, refuse, retire, adopt or record)
    is done."""
    if step == "make-ca" and new_ca is not None:  # the CA Secret's usable CAs stay behind it
        return [new_ca, *(ca for ca in state.cas if usable(ca, now))]
    if step == "retire":
        return retired(state, now)
    if step == "adopt":
        return adopted(state, now)
    if step in ("refuse", "record"):  # `cas` holds only the CAs made: the others leave
        return list(state.cas)
    raise ValueError(f"{step} does not change the CA Secret's bundle")


def retired(state: CertState, now: datetime.datetime) -> list[x509.Certificate]:
    """The CA Secret's bundle without the old CAs that verify nothing (the first, signing,
    CA is make-ca's to replace)."""
    return [*state.cas[:1], *(ca for ca in state.cas[1:] if usable(ca, now))]


def adopted(state: CertState, now: datetime.datetime) -> list[x509.Certificate]:
    """The CA Secret's bundle with every usable CA that must stay trusted: those the TLS
    Secret lists and the issuer made (the bundle when its certificate was issued, so the CA
    of the one served before, which the webhook may still serve) and the one in a caBundle
    that signed the serving certificate (an install whose CA Secret was lost)."""
    known = {fingerprint(ca) for ca in state.cas}
    listed = {fingerprint(ca) for ca in state.tls_cas}
    joining: list[x509.Certificate] = []
    for ca in (*state.tls_cas, *state.bundle_cas):
        mark = fingerprint(ca)
        if mark in known or not usable(ca, now):
            continue
        # The signature last: it costs more than the rest of the plan.
        made = state.recorded is None or mark in state.recorded
        if (mark in listed and made) or (state.cert is not None and signed_by(state.cert, ca)):
            known.add(mark)
            joining.append(ca)
    return [*state.cas, *joining]


def trusted(state: CertState, now: datetime.datetime) -> frozenset[bytes]:
    """What every caBundle must hold: the CA Secret's usable CAs."""
    return frozenset(fingerprint(ca) for ca in state.cas if usable(ca, now))


def is_ca(certificate: x509.Certificate) -> bool:
    try:
        constraints = certificate.extensions.get_extension_for_class(x509.BasicConstraints)
    except x509.ExtensionNotFound:
        return False
    return bool(constraints.value.ca)


def is_key_of(key: Any, certificate: x509.Certificate) -> bool:
    """Whether key is the private key of certificate's public key."""
    info = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    try:
        mine = key.public_key().public_bytes(der, info)
    except (AttributeError, ValueError):  # not a private key
        return False
    return bool(mine == certificate.public_key().public_bytes(der, info))


def signed_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    """Whether ca's key signed cert (by the signature: names alone can repeat)."""
    try:
        cert.verify_directly_issued_by(ca)
    except (InvalidSignature, ValueError, TypeError):  # another CA's, or not one at all
        return False
    return True
