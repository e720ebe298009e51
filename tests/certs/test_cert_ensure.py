"""`certs ensure` against the sandbox: from nothing to current, nothing changed when run again,
an install of the old Job's kind taken over without breaking what it serves, a CA rotation in
the safe order, and two runs at once."""

from __future__ import annotations

import base64
import datetime
from typing import Any

import pytest
from cryptography import x509
from kubernetes import client

from tests.conftest import NAMESPACE, SERVICE
from volcano_guard.certs.cluster import write_secret
from volcano_guard.certs.ensure import Target, ensure
from volcano_guard.certs.generate import CertsError, generate
from volcano_guard.certs.plan import Lifetimes, fingerprint, signed_by
from volcano_guard.cli import main

TARGET = Target(NAMESPACE, SERVICE, mutating=("volcano-guard",), validating=("volcano-guard",))
LIFETIMES = Lifetimes(ca=datetime.timedelta(days=90), cert=datetime.timedelta(days=30))


def secret(api, name: str):
    return client.CoreV1Api(api).read_namespaced_secret(name, NAMESPACE)


def data(api, name: str, key: str) -> bytes:
    return base64.b64decode(secret(api, name).data[key])


def bundles(api) -> list[set[bytes]]:
    adm = client.AdmissionregistrationV1Api(api)
    hooks: list[Any] = [
        *(adm.read_mutating_webhook_configuration("volcano-guard").webhooks or []),
        *(adm.read_validating_webhook_configuration("volcano-guard").webhooks or []),
    ]
    return [
        {
            fingerprint(c)
            for c in x509.load_pem_x509_certificates(base64.b64decode(h.client_config.ca_bundle))
        }
        for h in hooks
    ]


def verifies(cert_pem: bytes, cas: list[x509.Certificate]) -> bool:
    cert = x509.load_pem_x509_certificate(cert_pem)
    return any(signed_by(cert, ca) for ca in cas)


def test_from_nothing_and_again_with_nothing_to_do(cluster, capsys):
    _, kubeconfig, api = cluster
    args = [
        "certs",
        "ensure",
        "--namespace",
        NAMESPACE,
        "--mutating",
        "volcano-guard",
        "--validating",
        "volcano-guard",
        "--kubeconfig",
        kubeconfig,
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert [line.split(":")[0] for line in out.splitlines()[:-1]] == ["make-ca", "trust", "issue"]
    cas = x509.load_pem_x509_certificates(data(api, "volcano-guard-ca", "ca.crt"))
    assert len(cas) == 1 and all(b == {fingerprint(cas[0])} for b in bundles(api))
    assert verifies(data(api, "volcano-guard-tls", "tls.crt"), cas)
    assert secret(api, "volcano-guard-tls").type == "kubernetes.io/tls"
    versions = [
        secret(api, n).metadata.resource_version for n in ("volcano-guard-ca", "volcano-guard-tls")
    ]
    assert main(args) == 0  # the install run again
    assert capsys.readouterr().out.strip() == "certificates current (0 steps taken)"
    assert [
        secret(api, n).metadata.resource_version for n in ("volcano-guard-ca", "volcano-guard-tls")
    ] == versions


def test_an_install_without_a_ca_secret_keeps_trusting_what_it_serves(cluster, tmp_path):
    _, _, api = cluster
    old = generate(SERVICE, NAMESPACE, tmp_path / "old")  # as the former certs Job made it
    write_secret(api, tmp_path / "old", NAMESPACE, "volcano-guard-tls")
    assert ensure(api, TARGET, LIFETIMES) == ["make-ca", "adopt", "trust", "issue"]
    old_ca = x509.load_pem_x509_certificate(old.ca_file.read_bytes())
    for trusted in bundles(api):
        assert fingerprint(old_ca) in trusted and len(trusted) == 2
    assert verifies(old.cert_file.read_bytes(), [old_ca])  # what the webhook still serves


def test_a_ca_rotation_adds_the_new_ca_everywhere_then_reissues_and_retires_the_old(cluster):
    _, _, api = cluster
    start = datetime.datetime.now(datetime.UTC)
    ensure(api, TARGET, LIFETIMES, now=lambda: start)
    first = x509.load_pem_x509_certificates(data(api, "volcano-guard-ca", "ca.crt"))
    later = start + datetime.timedelta(days=61)  # a third of the CA's life left
    steps: list[str] = []
    assert ensure(
        api, TARGET, LIFETIMES, now=lambda: later, said=lambda step, why: steps.append(why)
    ) == ["make-ca", "trust", "issue"]
    assert "expires" in steps[0]
    cas = x509.load_pem_x509_certificates(data(api, "volcano-guard-ca", "ca.crt"))
    assert [fingerprint(c) for c in cas[1:]] == [fingerprint(first[0])]  # old kept, second
    assert all(b == {fingerprint(c) for c in cas} for b in bundles(api))
    assert verifies(data(api, "volcano-guard-tls", "tls.crt"), cas[:1])  # the new CA signs
    renewal = start + datetime.timedelta(days=85)  # the certificate alone is due
    assert ensure(api, TARGET, LIFETIMES, now=lambda: renewal) == ["issue"]
    gone = start + datetime.timedelta(days=91)  # the old CA expired
    assert ensure(api, TARGET, LIFETIMES, now=lambda: gone) == ["retire", "trust"]
    assert all(b == {fingerprint(cas[0])} for b in bundles(api))


def test_of_two_runs_at_once_one_writes_and_the_other_says_so(cluster):
    _, _, api = cluster
    from volcano_guard.certs.ensure import _Cluster

    first, second = _Cluster(api, TARGET), _Cluster(api, TARGET)
    now = datetime.datetime.now(datetime.UTC)
    read_first, read_second = first.read(), second.read()
    first.carry_out("make-ca", read_first, now, LIFETIMES)
    with pytest.raises(CertsError, match=r"409.*another run"):
        second.carry_out("make-ca", read_second, now, LIFETIMES)  # created meanwhile


def test_a_ca_secret_that_is_not_pem_is_made_again_keeping_the_served_ca(cluster):
    _, _, api = cluster
    ensure(api, TARGET, LIFETIMES)
    served_by = x509.load_pem_x509_certificates(data(api, "volcano-guard-ca", "ca.crt"))[0]
    client.CoreV1Api(api).patch_namespaced_secret(
        "volcano-guard-ca",
        NAMESPACE,
        {"data": {key: base64.b64encode(b"garbage").decode() for key in ("ca.crt", "ca.key")}},
    )
    assert ensure(api, TARGET, LIFETIMES) == ["make-ca", "adopt", "trust", "issue"]
    cas = x509.load_pem_x509_certificates(data(api, "volcano-guard-ca", "ca.crt"))
    assert fingerprint(served_by) in {fingerprint(c) for c in cas[1:]}  # still trusted
    assert all(b == {fingerprint(c) for c in cas} for b in bundles(api))
    assert verifies(data(api, "volcano-guard-tls", "tls.crt"), cas[:1])


@pytest.mark.parametrize(("flag", "value"), [("--ca-valid", "ten years"), ("--cert-valid", "0d")])
def test_bad_lifetimes_are_refused_in_words(flag, value, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["certs", "ensure", "--namespace", NAMESPACE, "--validating", "x", flag, value])
    assert exited.value.code == 2
    assert flag in capsys.readouterr().err


def test_an_api_server_that_refuses_connections_is_one_line_and_exit_2(tmp_path, capsys):
    from volcano_guard.base.kubeconfig import write_kubeconfig
    from volcano_guard_sandbox.processes import free_port

    kubeconfig = tmp_path / "kubeconfig"
    server = f"http://127.0.0.1:{free_port()}"
    write_kubeconfig(str(kubeconfig), server)  # nobody listens
    assert (
        main(
            [
                "certs",
                "ensure",
                "--namespace",
                NAMESPACE,
                "--validating",
                "volcano-guard",
                "--kubeconfig",
                str(kubeconfig),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0, err
    assert err.endswith(f"the API server {server} cannot be reached: connection refused"), err
