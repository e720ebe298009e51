"""The certificate plan: from nothing to current, then years of renewals and CA rotations, one
step at a time, and at every moment the certificate served is one every caBundle trusts."""

from __future__ import annotations

import datetime
import itertools
import random
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from cryptography import x509

from volcano_guard.certs import plan as rules
from volcano_guard.certs.ensure import MAX_STEPS
from volcano_guard.certs.generate import issue_ca, issue_leaf
from volcano_guard.certs.plan import CertState, Lifetimes, fingerprint, plan, signed_by

START = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
LIFETIMES = Lifetimes(ca=datetime.timedelta(days=90), cert=datetime.timedelta(days=30))
NAMES = ("volcano-guard.volcano-guard.svc",)


@dataclass
class Cluster:
    """The cluster as the steps leave it (carried out as certs/ensure.py does), and the
    certificate the webhook serves (which follows the TLS Secret only after the kubelet's
    refresh: `sync`)."""

    cas: list[x509.Certificate] = field(default_factory=list)
    ca_key: Any = None
    cert: x509.Certificate | None = None
    cert_key_matches: bool = True
    tls_cas: list[x509.Certificate] = field(default_factory=list)
    bundles: dict[str, tuple[x509.Certificate, ...]] = field(
        default_factory=lambda: {
            "MutatingWebhookConfiguration/volcano-guard": (),
            "ValidatingWebhookConfiguration/volcano-guard": (),
        }
    )
    served: x509.Certificate | None = None

    def state(self) -> CertState:
        return CertState(
            tuple(self.cas),
            self.ca_key is not None
            and bool(self.cas)
            and rules.is_key_of(self.ca_key, self.cas[0]),
            self.cert,
            {name: frozenset(map(fingerprint, cas)) for name, cas in self.bundles.items()},
            cert_key_matches=self.cert_key_matches,
            tls_cas=tuple(self.tls_cas),
            bundle_cas=tuple(ca for cas in self.bundles.values() for ca in cas),
        )

    def carry_out(self, step: str, now: datetime.datetime) -> None:
        state = self.state()
        if step == "make-ca":
            self.ca_key, ca = issue_ca("volcano-guard-ca", now, now + LIFETIMES.ca)
            self.cas = rules.cas_after("make-ca", state, now, ca)
        elif step in ("retire", "adopt"):
            self.cas = rules.cas_after(step, state, now)  # type: ignore[arg-type]
        elif step == "trust":
            wanted = rules.trusted(state, now)
            bundle = tuple(ca for ca in self.cas if fingerprint(ca) in wanted)
            self.bundles = dict.fromkeys(self.bundles, bundle)
        elif step == "issue":
            _, self.cert = issue_leaf(
                self.ca_key,
                self.cas[0],
                NAMES,
                now,
                min(now + LIFETIMES.cert, self.cas[0].not_valid_after_utc),
            )
            self.cert_key_matches, self.tls_cas = True, list(self.cas)

    def run(self, now: datetime.datetime, after_each: object = None) -> list[str]:
        """Steps until done (at most MAX_STEPS), calling after_each(now) after every step."""
        steps: list[str] = []
        for _ in range(MAX_STEPS):
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
        """Whether every caBundle verifies cert now, as the API server's handshake does."""
        if cert is None or not cert.not_valid_before_utc <= now < cert.not_valid_after_utc:
            return False
        return all(
            any(
                ca.not_valid_before_utc <= now < ca.not_valid_after_utc and verifies(cert, ca)
                for ca in bundle
            )
            for bundle in self.bundles.values()
        )


_VERIFIED: dict[tuple[bytes, bytes], bool] = {}


def verifies(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    """signed_by, remembered: the model asks the same question thousands of times."""
    pair = (fingerprint(cert), fingerprint(ca))
    if pair not in _VERIFIED:
        _VERIFIED[pair] = signed_by(cert, ca)
    return _VERIFIED[pair]


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


@pytest.mark.slow  # a year simulated: a soak
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


# Generated states: what a cluster can be left in (a CA expired and still listed, not valid yet,
# missing, a key of another certificate, registrations re-created with empty caBundles, a CA
# Secret lost, a run killed anywhere) crossed with each other. From each, repeated runs reach
# "done" within MAX_STEPS; no step makes a certificate the webhook serves untrusted when it
# was trusted; the end is a working state; and it stays one once the webhook picks it up.
NOW = START + datetime.timedelta(days=400)


def _ca(name: str, born_days_ago: float) -> tuple[Any, x509.Certificate]:
    born = NOW - datetime.timedelta(days=born_days_ago)
    return issue_ca(name, born, born + LIFETIMES.ca)


def _leaf(issuer: tuple[Any, x509.Certificate], born_days_ago: float) -> x509.Certificate:
    born = NOW - datetime.timedelta(days=born_days_ago)
    return issue_leaf(issuer[0], issuer[1], NAMES, born, born + LIFETIMES.cert)[1]


CURRENT = _ca("current", 10)  # 80 days left
OLD = _ca("old", 70)  # 20 days left: due, and the CA a rotation keeps behind the new one
EXPIRED = _ca("expired", 100)
NOT_YET = _ca("not-yet", -5)  # a clock that went back
FOREIGN = _ca("foreign", 10)  # a CA no Secret lists
NOT_A_CA = (None, _leaf(CURRENT, 1))  # a serving certificate pasted as a CA
CA_LISTS = {
    "none": [],
    "current": [CURRENT],
    "rotated": [CURRENT, OLD],
    "current+expired": [CURRENT, EXPIRED],
    "expired": [EXPIRED],
    "expired-first": [EXPIRED, CURRENT],
    "old": [OLD],
    "not-yet": [NOT_YET, CURRENT],
    "not-a-ca": [NOT_A_CA, CURRENT],
    "current+not-a-ca": [CURRENT, NOT_A_CA],
}
CA_KEYS = ("its key", "another key", "no key")
CERTS: dict[str, tuple[x509.Certificate | None, bool]] = {
    "none": (None, True),
    "by current": (_leaf(CURRENT, 5), True),
    "by old": (_leaf(OLD, 5), True),
    "expired": (_leaf(EXPIRED, 95), True),
    "not yet valid": (_leaf(CURRENT, -1), True),
    "key of another": (_leaf(CURRENT, 5), False),
    "by foreign": (_leaf(FOREIGN, 5), True),
}
TLS_CAS = {"none": [], "current": [CURRENT], "old": [OLD], "rotated": [CURRENT, OLD]}
BUNDLES = {
    "empty": (),  # re-created registrations
    "current": (CURRENT[1],),
    "old": (OLD[1],),
    "rotated": (CURRENT[1], OLD[1]),
    "current+expired": (CURRENT[1], EXPIRED[1]),
    "expired": (EXPIRED[1],),
    "foreign": (FOREIGN[1],),
}


def generated_states() -> list[tuple[str, Cluster]]:
    """Every CA list, CA key and serving certificate, each with three draws of the TLS
    Secret's ca.crt and the two registrations' bundles (all of those too: minutes)."""
    chooser = random.Random(44)
    states = []
    for (cas_name, cas), key_name, (cert_name, (cert, key_matches)) in itertools.product(
        CA_LISTS.items(), CA_KEYS, CERTS.items()
    ):
        ca_key = {"its key": cas[0][0] if cas else None, "another key": FOREIGN[0]}.get(key_name)
        for _ in range(3):
            tls_name = chooser.choice(list(TLS_CAS))
            mutating, validating = chooser.choices(list(BUNDLES), k=2)
            cluster = Cluster(
                cas=[ca for _, ca in cas],
                ca_key=ca_key,
                cert=cert,
                cert_key_matches=key_matches,
                tls_cas=[ca for _, ca in TLS_CAS[tls_name]],
                bundles={
                    "MutatingWebhookConfiguration/volcano-guard": BUNDLES[mutating],
                    "ValidatingWebhookConfiguration/volcano-guard": BUNDLES[validating],
                },
                served=cert if key_matches else None,  # a pair that does not load is not served
            )
            label = (
                f"cas={cas_name} key={key_name} cert={cert_name} tls={tls_name} "
                f"bundles={mutating},{validating}"
            )
            states.append((label, cluster))
    return states


def recover(label: str, cluster: Cluster) -> bool:
    """Run until done from cluster's state, checking after every step (a run may be killed
    there) that what is served stays trusted if it was, and that a certificate issued, which
    the webhook may pick up any moment, is trusted; whether the state was broken."""
    trusted_before = cluster.trusted_everywhere(cluster.served, NOW)
    found = cluster.cert

    def still_trusted(now: datetime.datetime) -> None:
        if trusted_before:
            assert cluster.trusted_everywhere(cluster.served, now), label
        if cluster.cert is not found:
            assert cluster.trusted_everywhere(cluster.cert, now), label

    steps = cluster.run(NOW, still_trusted)  # fails past MAX_STEPS
    assert cluster.cert_key_matches and cluster.trusted_everywhere(cluster.cert, NOW), (
        label,
        steps,
    )
    cluster.sync()  # the webhook picks up the TLS Secret
    later = NOW + datetime.timedelta(minutes=5)
    assert cluster.run(later) == [], (label, steps)  # and it stays so
    assert cluster.trusted_everywhere(cluster.served, later), label
    return not trusted_before


def test_from_any_generated_state_repeated_runs_reach_a_working_state_never_breaking_tls():
    states = generated_states()
    assert len(states) == len(CA_LISTS) * len(CA_KEYS) * len(CERTS) * 3
    broken = sum(recover(label, cluster) for label, cluster in states)
    assert broken > len(states) / 2  # most start broken, and every one ends working


def test_the_issue_44_state_retires_the_expired_ca_then_trusts():
    """The old CA expired and still listed, the registrations re-created with empty bundles:
    the expired CA leaves first, so the bundle set is one the API server can use."""
    cluster = Cluster(
        cas=[CURRENT[1], EXPIRED[1]],
        ca_key=CURRENT[0],
        cert=CERTS["by current"][0],
        tls_cas=[CURRENT[1], EXPIRED[1]],
    )
    assert cluster.run(NOW) == ["retire", "trust"]
    assert set(cluster.bundles.values()) == {(CURRENT[1],)}
