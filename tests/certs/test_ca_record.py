"""Which CAs the issuer made: its signed record, and the plan refusing the others."""

from __future__ import annotations

import datetime

from volcano_guard.certs.generate import issue_ca, issue_leaf
from volcano_guard.certs.plan import CertState, Lifetimes, adopted, cas_after, fingerprint, plan
from volcano_guard.certs.record import record, recorded, sign

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
LIFETIMES = Lifetimes(ca=datetime.timedelta(days=90), cert=datetime.timedelta(days=30))
KEY, OURS = issue_ca("volcano-guard-ca (ns/svc)", NOW, NOW + LIFETIMES.ca)
OTHER_KEY, FORGED = issue_ca("volcano-guard-ca (ns/svc)", NOW, NOW + LIFETIMES.ca)


def test_a_record_counts_only_when_the_newest_cas_key_signed_it():
    text = record([OURS, FORGED])
    assert recorded(text, sign(KEY, text), OURS) == {fingerprint(OURS), fingerprint(FORGED)}
    assert recorded(text, sign(OTHER_KEY, text), OURS) == frozenset()
    tampered = text + fingerprint(FORGED).hex().encode() + b"\n"
    assert recorded(tampered, sign(KEY, text), OURS) == frozenset()
    assert recorded(text, sign(KEY, text), None) == frozenset()


def test_a_ca_the_issuer_did_not_make_is_refused_by_name_and_dropped():
    state = CertState(
        [OURS], True, None, {}, foreign=[FORGED], recorded=frozenset({fingerprint(OURS)})
    )
    step, why = plan(state, NOW, LIFETIMES)
    assert step == "refuse" and fingerprint(FORGED).hex()[:16] in why
    assert cas_after(step, state, NOW) == [OURS]


def test_a_ca_only_the_tls_secret_lists_joins_only_if_the_issuer_made_it():
    _, cert = issue_leaf(KEY, OURS, ["svc.ns.svc"], NOW, NOW + LIFETIMES.cert)
    made = frozenset({fingerprint(OURS)})
    state = CertState([OURS], True, cert, {}, tls_cas=[FORGED], recorded=made)
    assert adopted(state, NOW) == [OURS]
    recorded_too = CertState(
        [OURS], True, cert, {}, tls_cas=[FORGED], recorded=made | {fingerprint(FORGED)}
    )
    assert adopted(recorded_too, NOW) == [OURS, FORGED]


def test_a_record_missing_or_stale_is_written_before_the_bundles_are_set():
    state = CertState([OURS], True, None, {}, recorded=frozenset())
    assert plan(state, NOW, LIFETIMES)[0] == "record"


def test_the_reconciler_counts_each_refusal_for_the_alert():
    from volcano_guard.reconciler import metrics
    from volcano_guard.reconciler.reconcile import _said_about_certificates

    before = metrics.CA_REFUSALS._value.get()
    _said_about_certificates("trust", "the caBundle of x is not the CA Secret's bundle")
    _said_about_certificates("refuse", "the CA Secret lists CAs volcano-guard did not make")
    assert metrics.CA_REFUSALS._value.get() == before + 1
