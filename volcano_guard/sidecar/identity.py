"""What an app holds of its sidecar: the token of the kubeconfig the sidecar wrote and the CA
of its loopback certificate. Both outlive the sidecar's process, so that a restarted sidecar
(its container restarts, the pod's volume stays) is still the server the app trusts.

At start the sidecar reuses what a previous run of itself wrote beside the kubeconfig, if it
is all there, its own and valid: every file a regular file (no symlink) owned by this user,
the key 0600, the key that of the certificate, the certificate signed by the CA and valid for
a day more, the kubeconfig naming that CA and holding a token of the form this module makes.
Anything else and it makes new ones, as at a pod's first start.

The volume is an emptyDir of this pod: no other pod can reach it, and the injected app
containers mount it read-only, so the files this process's user owns there were written by the
sidecar. The key stays unreadable to every other user; a container of the pod that does not
mount the volume, and so could listen on the free port during the restart, lacks the key and
is refused by the app's client before the token is sent.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import re
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from volcano_guard.certs.generate import generate_loopback
from volcano_guard.certs.plan import is_ca, is_key_of, signed_by

log = logging.getLogger("volcano_guard.sidecar")
PREFIX = "sidecar"  # sidecar-ca.crt, sidecar.crt, sidecar.key beside the kubeconfig
TOKEN = re.compile(r"[A-Za-z0-9_-]{43}")  # secrets.token_urlsafe(32)
MAX_FILE = 64 * 1024
# A certificate closer to its end than this is not reused: the app would lose it soon anyway.
MIN_VALIDITY = datetime.timedelta(days=1)


class NotReusable(Exception):
    """Why what a previous run wrote cannot serve again; the message says which file and why."""


@dataclass(frozen=True)
class Identity:
    token: str  # the bearer token clients must present
    ca_file: Path
    cert_file: Path
    key_file: Path


def load_or_make(kubeconfig: Path, now: datetime.datetime | None = None) -> Identity:
    """The identity a previous run left beside kubeconfig if reusable, else a new one."""
    try:
        identity = reusable(kubeconfig, now or datetime.datetime.now(datetime.UTC))
    except FileNotFoundError:
        log.info("no earlier token and certificate beside %s: making new ones", kubeconfig)
    except NotReusable as why:
        log.warning(
            "not reusing the token and certificate beside %s (%s): an app that loaded the "
            "kubeconfig before must load it again",
            kubeconfig,
            why,
        )
    else:
        log.info("reusing the token and certificate beside %s from an earlier run", kubeconfig)
        return identity
    made = generate_loopback(kubeconfig.parent, PREFIX)
    return Identity(secrets.token_urlsafe(32), made.ca_file, made.cert_file, made.key_file)


def reusable(kubeconfig: Path, now: datetime.datetime) -> Identity:
    """What an earlier run wrote beside kubeconfig; FileNotFoundError if it wrote nothing,
    NotReusable if it is not all there, not its own or not valid."""
    document = _document(kubeconfig)
    folder = kubeconfig.parent
    ca_file, cert_file, key_file = (
        folder / f"{PREFIX}{end}" for end in ("-ca.crt", ".crt", ".key")
    )
    token = _token(document, kubeconfig)
    if _named_ca(document) != str(ca_file):
        raise NotReusable(f"{kubeconfig} does not name {ca_file}")
    key, cert, ca = _private_key(key_file), _certificate(cert_file), _certificate(ca_file)
    if not is_key_of(key, cert):
        raise NotReusable(f"{key_file} is not the key of {cert_file}")
    if not is_ca(ca) or not signed_by(cert, ca):
        raise NotReusable(f"{ca_file} did not sign {cert_file}")
    for file, certificate in ((cert_file, cert), (ca_file, ca)):
        if not _valid_for_a_while(certificate, now):
            raise NotReusable(f"{file} is not valid for another {MIN_VALIDITY}")
    return Identity(token, ca_file, cert_file, key_file)


def _valid_for_a_while(certificate: x509.Certificate, now: datetime.datetime) -> bool:
    return certificate.not_valid_before_utc <= now <= certificate.not_valid_after_utc - MIN_VALIDITY


def _token(document: Any, kubeconfig: Path) -> str:
    try:
        token = document["users"][0]["user"]["token"]
    except (KeyError, IndexError, TypeError):
        raise NotReusable(f"{kubeconfig} holds no user token") from None
    if not isinstance(token, str) or not TOKEN.fullmatch(token):
        raise NotReusable(f"{kubeconfig} holds a token the sidecar does not make")
    return token


def _named_ca(document: Any) -> Any:
    try:
        return document["clusters"][0]["cluster"]["certificate-authority"]
    except (KeyError, IndexError, TypeError):
        return None


def _document(kubeconfig: Path) -> Any:
    try:
        return json.loads(read_own(kubeconfig))
    except ValueError:
        raise NotReusable(f"{kubeconfig} is not the JSON the sidecar writes") from None


def _private_key(path: Path) -> ec.EllipticCurvePrivateKey:
    try:
        key = serialization.load_pem_private_key(read_own(path, private=True), None)
    except (ValueError, TypeError):
        raise NotReusable(f"{path} is not an unencrypted PEM private key") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise NotReusable(f"{path} is not an EC key")
    return key


def _certificate(path: Path) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(read_own(path))
    except ValueError:
        raise NotReusable(f"{path} is not a PEM certificate") from None


def read_own(path: Path, *, private: bool = False) -> bytes:
    """The bytes of a regular file (a symlink is not followed) that this process's user owns,
    and, if private, that no one else may read or write."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise NotReusable(f"{path} cannot be opened as a file ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as handle:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise NotReusable(f"{path} is not a regular file")
        if status.st_uid != os.geteuid():
            raise NotReusable(f"{path} is owned by uid {status.st_uid}, not this process's")
        if private and status.st_mode & 0o077:
            raise NotReusable(f"{path} is open to others (mode {status.st_mode & 0o777:o})")
        data = handle.read(MAX_FILE + 1)
    if len(data) > MAX_FILE:
        raise NotReusable(f"{path} is larger than the sidecar writes")
    return data
