"""Attack 7 of issue 45: someone who can write the CA Secret (but not read its key, or not
sign with it) appends a CA of their own to its ca.crt, at the end or in front, or into the TLS
Secret's ca.crt. `certs ensure` (the reconciler runs it every pass) must not add it to any
caBundle, must take it out of the bundles and the Secret, and must name it. Against the sandbox;
a few ensure runs each, a few seconds in all."""

from __future__ import annotations

import base64
import datetime
from typing import Any

import pytest
from kubernetes import client

from tests.certs.conftest import cluster  # noqa: F401  (the fixture)
from tests.certs.test_cert_ensure import LIFETIMES, TARGET, bundles, data
from tests.conftest import NAMESPACE
from volcano_guard.certs.ensure import ensure
from volcano_guard.certs.generate import cert_pem, issue_ca
from volcano_guard.certs.plan import fingerprint

pytestmark = pytest.mark.slow

NOW = datetime.datetime.now(datetime.UTC)


def mallorys_ca() -> Any:
    _, ca = issue_ca("volcano-guard-ca (volcano-guard/volcano-guard)", NOW, NOW + LIFETIMES.ca)
    return ca


def put_ca_crt(api: Any, secret: str, pem: bytes) -> None:
    """A merge patch of ca.crt alone: no need to read (or know) the key beside it."""
    patch = {"data": {"ca.crt": base64.b64encode(pem).decode("ascii")}}
    client.CoreV1Api(api).patch_namespaced_secret(secret, NAMESPACE, patch)


def trusted_anywhere(api: Any) -> set[bytes]:
    return set().union(*bundles(api))


@pytest.mark.parametrize("where", ["end", "front"])
def test_a_ca_appended_to_the_ca_secret_is_refused_and_named(cluster, where):  # noqa: F811
    _, _, api = cluster
    ensure(api, TARGET, LIFETIMES)
    ours = data(api, "volcano-guard-ca", "ca.crt")
    forged = mallorys_ca()
    pem = ours + cert_pem(forged) if where == "end" else cert_pem(forged) + ours
    put_ca_crt(api, "volcano-guard-ca", pem)
    said: list[str] = []
    ensure(api, TARGET, LIFETIMES, said=lambda step, why: said.append(f"{step}: {why}"))
    assert fingerprint(forged) not in trusted_anywhere(api)
    assert cert_pem(forged) not in data(api, "volcano-guard-ca", "ca.crt")
    assert any(fingerprint(forged).hex()[:16] in line for line in said), said
    assert ensure(api, TARGET, LIFETIMES) == []  # and it stays out


def test_a_ca_in_the_bundles_that_the_guard_did_not_make_is_taken_out(cluster):  # noqa: F811
    _, _, api = cluster
    ensure(api, TARGET, LIFETIMES)
    forged = mallorys_ca()
    put_ca_crt(api, "volcano-guard-ca", data(api, "volcano-guard-ca", "ca.crt") + cert_pem(forged))
    put_ca_crt(
        api, "volcano-guard-tls", data(api, "volcano-guard-tls", "ca.crt") + cert_pem(forged)
    )
    # As main leaves it: the forged CA already in every caBundle.
    from volcano_guard.certs.cluster import inject_ca_bundle

    inject_ca_bundle(
        api,
        data(api, "volcano-guard-ca", "ca.crt"),
        list(TARGET.mutating),
        list(TARGET.validating),
    )
    assert fingerprint(forged) in trusted_anywhere(api)
    ensure(api, TARGET, LIFETIMES)
    assert fingerprint(forged) not in trusted_anywhere(api)
