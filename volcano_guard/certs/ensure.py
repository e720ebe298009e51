"""`volcano-guard certs ensure`: bring the webhook's certificates in the cluster up to date, one
step of certs/plan.py at a time, reading the state again before each.

What it keeps:
- the CA Secret (Opaque; `ca.crt`: the CAs trusted, the newest, which signs, first; `ca.key`:
  the newest CA's key; `ca.record` and `ca.record.sig`: which CAs it made, signed with that key,
  certs/record.py). Only this command reads it; a CA in ca.crt it did not make is named,
  refused and removed;
- the TLS Secret (kubernetes.io/tls; `tls.crt`, `tls.key`, and `ca.crt`: the same bundle), which
  the webhook mounts;
- the caBundle of every webhook of the named configurations: the CA Secret's bundle.

Every Secret write names the resourceVersion it read, so of two runs at once one fails (409)
and changes nothing; the next run goes on from whatever state the last step left.

Before any write it checks that every webhook of the named configurations calls the target's
Service: a run told the wrong namespace or Service would otherwise give another install's
registrations a CA its webhook never serves (every request then fails TLS).
"""

from __future__ import annotations

import base64
import datetime
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from volcano_guard.base.tls import ca_bundle_problem, pair_problem
from volcano_guard.certs.cluster import inject_ca_bundle
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
    service_dns_names,
)
from volcano_guard.certs.plan import (
    CertState,
    Lifetimes,
    Step,
    cas_after,
    fingerprint,
    is_key_of,
    plan,
    trusted,
)
from volcano_guard.certs.record import CA_RECORD_FILE, CA_RECORD_SIGNATURE_FILE, record, sign
from volcano_guard.certs.record import recorded as recorded_in

# From nothing: make-ca, trust, issue; a rotation: the same; from the worst state: make-ca (or
# refuse, retire), adopt, record, trust, issue. Twice that, so a loop is reported rather than
# run forever.
MAX_STEPS = 12


class Unreachable(CertsError):
    """No API server answers; the message says what the connection met."""


@dataclass(frozen=True)
class Target:
    """Where the certificates live and whom they serve."""

    namespace: str
    service: str
    ca_secret: str = "volcano-guard-ca"
    tls_secret: str = "volcano-guard-tls"
    mutating: tuple[str, ...] = ()
    validating: tuple[str, ...] = ()


def ensure(
    api_client: Any,
    target: Target,
    lifetimes: Lifetimes,
    now: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
    said: Callable[[str, str], None] = lambda step, why: None,
) -> list[Step]:
    """Carry out steps until the plan says done; the steps taken. CertsError names what failed
    (a run stopped by it is finished by the next)."""
    from urllib3.exceptions import HTTPError

    cluster = _Cluster(api_client, target)
    taken: list[Step] = []
    try:
        for _ in range(MAX_STEPS):
            state = cluster.read()
            step, why = plan(state.plan_state, now(), lifetimes)
            if step == "done":
                return taken
            said(step, why)
            cluster.carry_out(step, state, now(), lifetimes)
            taken.append(step)
    except ConnectionError as exc:  # the API server away (base.api_client names it)
        raise Unreachable(str(exc)) from None
    except (HTTPError, OSError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise Unreachable(f"the API server cannot be reached: {reason}") from None
    raise CertsError(f"no end after {MAX_STEPS} steps: {', '.join(taken)}")


@dataclass(frozen=True)
class _Read:
    plan_state: CertState
    ca_key: Any  # the newest CA's private key, or None
    ca_version: str | None  # the CA Secret's resourceVersion (None: there is none)
    tls_version: str | None


class _Cluster:
    def __init__(self, api_client: Any, target: Target) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(api_client)
        self.admission = client.AdmissionregistrationV1Api(api_client)
        self.api_client, self.target = api_client, target

    def read(self) -> _Read:
        ca_data, ca_version = self._secret(self.target.ca_secret)
        tls_data, tls_version = self._secret(self.target.tls_secret)
        # What does not parse counts as absent and is made again: a CA the bundles or the TLS
        # Secret still need is adopted back (certs/plan.py), so nothing else is lost by it.
        listed = _certificates(ca_data.get(CA_FILE))
        key = _private_key(ca_data.get(CA_KEY_FILE))
        # Made by this issuer: the CA whose key it holds, and those its signed record lists.
        signer = next((ca for ca in listed if key is not None and is_key_of(key, ca)), None)
        marks = recorded_in(
            ca_data.get(CA_RECORD_FILE, b""), ca_data.get(CA_RECORD_SIGNATURE_FILE, b""), signer
        )
        cas = tuple(ca for ca in listed if ca is signer or fingerprint(ca) in marks)
        foreign = tuple(ca for ca in listed if not (ca is signer or fingerprint(ca) in marks))
        cert = _certificates(tls_data.get(CERT_FILE))
        tls_cas = _certificates(tls_data.get(CA_FILE))
        bundles, bundle_cas = self._bundles()
        state = CertState(
            cas,
            key is not None and bool(cas) and is_key_of(key, cas[0]),
            cert[0] if cert else None,
            bundles,
            cert_key_matches=not pair_problem(
                tls_data.get(CERT_FILE, b""), tls_data.get(KEY_FILE, b""), "tls.crt", "tls.key"
            ),
            tls_cas=tls_cas,
            bundle_cas=bundle_cas,
            foreign=foreign,
            recorded=marks,
        )
        return _Read(state, key, ca_version, tls_version)

    def carry_out(
        self, step: Step, read: _Read, now: datetime.datetime, lifetimes: Lifetimes
    ) -> None:
        state = read.plan_state
        if step == "make-ca":
            key, ca = issue_ca(
                f"volcano-guard-ca ({self.target.namespace}/{self.target.service})",
                now,
                now + lifetimes.ca,
            )
            self._write_ca(cas_after(step, state, now, ca), key, read.ca_version)
        elif step in ("refuse", "retire", "adopt", "record"):
            self._write_ca(cas_after(step, state, now), read.ca_key, read.ca_version)
        elif step == "trust":
            bundle = _pem([ca for ca in state.cas if fingerprint(ca) in trusted(state, now)])
            problem = ca_bundle_problem(bundle, now)
            if problem:  # the plan keeps only current CAs: a bug if this is ever seen
                raise CertsError(f"Secret {self.target.ca_secret} ca.crt {problem}")
            inject_ca_bundle(
                self.api_client, bundle, list(self.target.mutating), list(self.target.validating)
            )
        elif step == "issue":
            signing = state.cas[0]
            key, cert = issue_leaf(
                read.ca_key,
                signing,
                service_dns_names(self.target.service, self.target.namespace),
                now,
                min(now + lifetimes.cert, signing.not_valid_after_utc),
            )
            self._write(
                self.target.tls_secret,
                "kubernetes.io/tls",
                {CERT_FILE: cert_pem(cert), KEY_FILE: key_pem(key), CA_FILE: _pem(state.cas)},
                read.tls_version,
            )

    def _write_ca(self, cas: list[x509.Certificate], key: Any, version: str | None) -> None:
        text = record(cas)
        self._write(
            self.target.ca_secret,
            "Opaque",
            {
                CA_FILE: _pem(cas),
                CA_KEY_FILE: key_pem(key),
                CA_RECORD_FILE: text,
                CA_RECORD_SIGNATURE_FILE: sign(key, text),
            },
            version,
        )

    def _secret(self, name: str) -> tuple[dict[str, bytes], str | None]:
        from kubernetes.client.exceptions import ApiException

        from volcano_guard.base.api_client import api_error_text

        try:
            secret = self.core.read_namespaced_secret(name, self.target.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return {}, None
            raise CertsError(
                f"Secret {self.target.namespace}/{name}: {api_error_text(exc)}"
            ) from None
        data = {key: base64.b64decode(value) for key, value in (secret.data or {}).items()}
        return data, secret.metadata.resource_version if secret.metadata else None

    def _write(self, name: str, kind: str, data: dict[str, bytes], version: str | None) -> None:
        from kubernetes.client.exceptions import ApiException

        from volcano_guard.base.api_client import api_error_text

        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": kind,
            "metadata": {
                "name": name,
                "namespace": self.target.namespace,
                "labels": {"app.kubernetes.io/name": "volcano-guard"},
            },
            "data": {key: base64.b64encode(value).decode("ascii") for key, value in data.items()},
        }
        try:
            if version is None:
                self.core.create_namespaced_secret(self.target.namespace, body)  # type: ignore[arg-type]  # a dict works
            else:
                body["metadata"]["resourceVersion"] = version  # a compare-and-swap
                self.core.replace_namespaced_secret(name, self.target.namespace, body)  # type: ignore[arg-type]
        except ApiException as exc:
            again = " (changed meanwhile by another run; run again)" if exc.status == 409 else ""
            raise CertsError(
                f"Secret {self.target.namespace}/{name}: {api_error_text(exc)}{again}"
            ) from None

    def _bundles(self) -> tuple[dict[str, frozenset[bytes]], list[x509.Certificate]]:
        """Each named configuration's webhook -> the CAs its caBundle holds, and those CAs.
        CertsError, before anything is written, when a webhook calls another Service."""
        from kubernetes.client.exceptions import ApiException

        from volcano_guard.base.api_client import api_error_text

        reads: list[tuple[str, str, Callable[[str], Any]]] = [
            (
                "MutatingWebhookConfiguration",
                name,
                self.admission.read_mutating_webhook_configuration,
            )
            for name in self.target.mutating
        ]
        reads += [
            (
                "ValidatingWebhookConfiguration",
                name,
                self.admission.read_validating_webhook_configuration,
            )
            for name in self.target.validating
        ]
        bundles: dict[str, frozenset[bytes]] = {}
        found: list[x509.Certificate] = []
        for kind, name, read in reads:
            try:
                webhooks = read(name).webhooks or []
            except ApiException as exc:
                raise CertsError(f"{kind} {name}: {api_error_text(exc)}") from None
            for webhook in webhooks:
                self._check_calls_target(f"{kind} {name} webhook {webhook.name}", webhook)
                encoded = webhook.client_config.ca_bundle
                cas = _certificates(base64.b64decode(encoded) if encoded else b"")
                bundles[f"{kind}/{name}/{webhook.name}"] = frozenset(map(fingerprint, cas))
                found += cas
        return bundles, found

    def _check_calls_target(self, where: str, webhook: Any) -> None:
        service = webhook.client_config.service
        wanted = f"{self.target.namespace}/{self.target.service}"
        if service is None:
            raise CertsError(
                f"{where} calls a URL, not Service {wanted}: its certificates are not this "
                "install's; nothing was written"
            )
        calls = f"{service.namespace}/{service.name}"
        if calls != wanted:
            raise CertsError(
                f"{where} calls Service {calls}, not {wanted}: --namespace or --service names "
                "another install; nothing was written"
            )


def _certificates(pem: bytes | None) -> tuple[x509.Certificate, ...]:
    """The PEM certificates in pem; none when it does not parse."""
    if not pem:
        return ()
    try:
        return tuple(x509.load_pem_x509_certificates(pem))
    except ValueError:
        return ()


def _private_key(pem: bytes | None) -> Any:
    """The PEM private key in pem; None when there is none or it does not parse."""
    if not pem:
        return None
    try:
        return serialization.load_pem_private_key(pem, None)
    except (ValueError, TypeError):
        return None


def _pem(cas: Sequence[x509.Certificate]) -> bytes:
    return b"".join(cert_pem(ca) for ca in cas)
