"""The certificate plan: from nothing to current, then years of renewals and CA rotations, one
step at a time, and at every moment the certificate served is one every caBundle trusts."""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field, replace

import pytest
from cryptography import x509

from volcano_guard.certs.generate import issue_ca, issue_leaf
from volcano_guard.certs.plan import CertState, Lifetimes, fingerprint, plan, signed_by

START = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
LIFETIMES = Lifetimes(ca=datetime.timedelta(days=90), cert=datetime.timedelta(days=30))
NAMES = ("volcano-guard.volcano-guard.svc",)


@dataclass
class Cluster:
    """The cluster as the steps leave it, and the certificate the webhook serves (which
    follows the TLS Secret only after the kubelet's refresh: `sync`)."""

    cas: list[x509.Certificate] = field(default_factory=list)
    ca_key: object | None = None
    cert: x509.Certificate | None = None
    bundles: dict[str, frozenset[bytes]] = field(
        default_factory=lambda: {
            "MutatingWebhookConfiguration/volcano-guard": frozenset(),
            "ValidatingWebhookConfiguration/volcano-guard": frozenset(),
        }
    )
    served: x509.Certificate | None = None

    def state(self) -> CertState:
        return CertState(tuple(self.cas), self.ca_key is not None, self.cert, dict(self.bundles))

    def carry_out(self, step: str, now: datetime.datetime) -> None:
        if step == "make-ca":
            self.ca_key, ca = issue_ca("volcano-guard-ca", now, now + LIFETIMES.ca)
            self.cas = [ca, *self.cas]
        elif step == "trust":
            self.bundles = {name: frozenset(map(fingerprint, self.cas)) for name in self.bundles}
        elif step == "issue":
            _, self.cert = issue_leaf(
                self.ca_key,  # type: ignore[arg-type]
                self.cas[0],
                NAMES,
                now,
                min(now + LIFETIMES.cert, self.cas[0].not_valid_after_utc),
            )
        elif step == "retire":
            self.cas = [self.cas[0], *(ca for ca in self.cas[1:] if ca.not_valid_after_utc > now)]

    def run(self, now: datetime.datetime, after_each: object = None) -> list[str]:
        """Steps until done (at most 8), calling after_each(now) after every step."""
        steps: list[str] = []
        for _ in range(8):
            step, _why = plan(self.state(), now, LIFETIMES)
            if step == "done":
                return steps
            steps.append(step)
            self.carry_out(step, now)
            if callable(after_each):
                after_each(now)
        raise AssertionError(f"no end: {steps}")

    def sync(self) -> None:
        self.served = self.cert

    def trusted_everywhere(self, cert: x509.Certificate | None, now: datetime.datetime) -> bool:
        if cert is None or not cert.not_valid_before_utc <= now < cert.not_valid_after_utc:
            return False
        everywhere = set.intersection(*(set(b) for b in self.bundles.values()))
        return any(
            signed_by(cert, ca) and ca.not_valid_after_utc > now
            for ca in self.cas
            if fingerprint(ca) in everywhere
        )


def test_from_nothing_a_ca_trusted_everywhere_then_a_certificate():
    cluster = Cluster()
    assert cluster.run(START) == ["make-ca", "trust", "issue"]
    cluster.sync()
    assert cluster.trusted_everywhere(cluster.served, START)


def test_an_install_run_again_changes_nothing():
    cluster = Cluster()
    cluster.run(START)
    before = (list(cluster.cas), cluster.cert, dict(cluster.bundles))
    assert cluster.run(START + datetime.timedelta(hours=1)) == []
    assert (cluster.cas, cluster.cert, cluster.bundles) == before


def test_a_year_of_renewals_and_rotations_never_serves_an_untrusted_certificate():
    """Hourly runs for a year; the webhook picks up each new certificate 2 hours late (a slow
    kubelet), and at every hour what it serves is trusted by every caBundle."""
    cluster = Cluster()
    cluster.run(START)
    cluster.sync()
    seen: list[str] = []
    changed_at: datetime.datetime | None = None

    def both_trusted(now: datetime.datetime) -> None:
        """After any step (a run may be killed there): what is served and what the webhook
        could pick up any moment now are both trusted everywhere."""
        for cert in (cluster.served, cluster.cert):
            assert cluster.trusted_everywhere(cert, now), (now, seen[-4:])

    for hour in range(1, 365 * 24):
        now = START + datetime.timedelta(hours=hour)
        cert = cluster.cert
        seen += cluster.run(now, both_trusted)
        if cluster.cert is not cert:
            changed_at = now
        if changed_at and now - changed_at >= datetime.timedelta(hours=2):
            cluster.sync()
        assert cluster.trusted_everywhere(cluster.served, now), (now, seen[-4:])
    assert seen.count("make-ca") >= 5  # a CA every 60 days (two thirds of 90)
    assert seen.count("retire") >= 4 and seen.count("issue") >= 18
    assert len(cluster.cas) <= 2  # old CAs leave once expired


def test_a_run_killed_after_any_step_is_finished_by_the_next():
    for stop_after in range(1, 4):
        cluster = Cluster()
        cluster.run(START)
        later = START + datetime.timedelta(days=61)  # the CA is due
        for _ in range(stop_after):  # a run killed after stop_after steps
            step, _ = plan(cluster.state(), later, LIFETIMES)
            cluster.carry_out(step, later)
        assert cluster.run(later + datetime.timedelta(minutes=5)) != [] or stop_after == 3
        assert plan(cluster.state(), later, LIFETIMES)[0] == "done"


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda c: replace(c, has_ca_key=False), "make-ca"),
        (lambda c: replace(c, cert=None), "issue"),
        (
            lambda c: replace(
                c, bundles={**c.bundles, "ValidatingWebhookConfiguration/x": frozenset()}
            ),
            "trust",
        ),
    ],
)
def test_what_is_missing_decides_the_step(change, expected):
    cluster = Cluster()
    cluster.run(START)
    assert plan(change(cluster.state()), START, LIFETIMES)[0] == expected


def test_a_certificate_from_another_ca_with_the_same_name_is_replaced():
    cluster = Cluster()
    cluster.run(START)
    impostor_key, impostor = issue_ca("volcano-guard-ca", START, START + LIFETIMES.ca)
    _, cert = issue_leaf(impostor_key, impostor, NAMES, START, START + LIFETIMES.cert)
    assert plan(replace(cluster.state(), cert=cert), START, LIFETIMES)[0] == "issue"
