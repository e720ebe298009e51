"""`certs ensure` against the sandbox from the states issue 44 met: registrations re-created with
empty caBundles after the old CA expired and before a run retired it (and a run killed in its
recovery), deleted Secrets, and a run told another install's namespace or Service, which must
write nothing."""

from __future__ import annotations

import base64
import datetime
from typing import Any

import pytest
from cryptography import x509
from kubernetes import client

from tests.certs.conftest import webhook_configuration
from tests.certs.test_cert_ensure import TARGET, bundles, data, verifies
from tests.conftest import NAMESPACE, SERVICE
from volcano_guard.certs.ensure import ensure
from volcano_guard.certs.plan import Lifetimes, fingerprint
from volcano_guard.cli import main

LIFETIMES = Lifetimes(ca=datetime.timedelta(days=90), cert=datetime.timedelta(days=30))


def ensure_args(kubeconfig: str, *extra: str) -> list[str]:
    return [
        "certs",
        "ensure",
        "--mutating",
        "volcano-guard",
        "--validating",
        "volcano-guard",
        "--ca-valid",
        "90d",
        "--cert-valid",
        "30d",
        "--kubeconfig",
        kubeconfig,
        *extra,
    ]


def recreate_registrations(api: Any) -> None:
    """The break-glass deletion, then `kubectl apply -k` again: caBundles empty."""
    adm = client.AdmissionregistrationV1Api(api)
    adm.delete_mutating_webhook_configuration("volcano-guard")
    adm.delete_validating_webhook_configuration("volcano-guard")
    adm.create_mutating_webhook_configuration(
        webhook_configuration(
            "MutatingWebhookConfiguration", "volcano-guard", ["mutate.volcano-guard.io"]
        )
    )
    adm.create_validating_webhook_configuration(
        webhook_configuration(
            "ValidatingWebhookConfiguration",
            "volcano-guard",
            ["validate.volcano-guard.io", "bindings.volcano-guard.io"],
        )
    )


def raw_bundles(api: Any) -> list[str | None]:
    adm = client.AdmissionregistrationV1Api(api)
    hooks: list[Any] = [
        *(adm.read_mutating_webhook_configuration("volcano-guard").webhooks or []),
        *(adm.read_validating_webhook_configuration("volcano-guard").webhooks or []),
    ]
    return [hook.client_config.ca_bundle for hook in hooks]


def test_registrations_recreated_after_the_old_ca_expired_are_trusted_again(cluster, capsys):
    """Issue 44: a rotation left the expired old CA listed; the registrations came back empty;
    `certs ensure` (the real clock) used to exit 1 for good. It retires, trusts and renews."""
    _, kubeconfig, api = cluster
    start = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=100)
    ensure(api, TARGET, LIFETIMES, now=lambda: start)  # its CA expired 10 days ago
    rotation = start + datetime.timedelta(days=61)
    assert ensure(api, TARGET, LIFETIMES, now=lambda: rotation) == ["make-ca", "trust", "issue"]
    new_ca, old_ca = x509.load_pem_x509_certificates(data(api, "volcano-guard-ca", "ca.crt"))
    assert old_ca.not_valid_after_utc < datetime.datetime.now(datetime.UTC)  # listed, expired
    recreate_registrations(api)
    assert raw_bundles(api) == [None, None, None]

    assert main(ensure_args(kubeconfig, "--namespace", NAMESPACE)) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in out[:-1]] == ["retire", "trust", "issue"], out
    assert out[-1] == "certificates current (3 steps taken)"
    assert all(b == {fingerprint(new_ca)} for b in bundles(api))
    assert x509.load_pem_x509_certificates(data(api, "volcano-guard-ca", "ca.crt")) == [new_ca]
    assert verifies(data(api, "volcano-guard-tls", "tls.crt"), [new_ca])
    assert main(ensure_args(kubeconfig, "--namespace", NAMESPACE)) == 0  # and it stays so
    assert capsys.readouterr().out.strip() == "certificates current (0 steps taken)"


@pytest.mark.parametrize(
    ("flags", "calls"),
    [
        (["--namespace", "default"], f"{NAMESPACE}/{SERVICE}, not default/{SERVICE}"),
        (
            ["--namespace", NAMESPACE, "--service", "other"],
            f"{NAMESPACE}/{SERVICE}, not {NAMESPACE}/other",
        ),
    ],
)
def test_another_installs_namespace_or_service_is_refused_before_any_write(
    cluster, capsys, flags, calls
):
    _, kubeconfig, api = cluster
    client.CoreV1Api(api).create_namespace({"metadata": {"name": "default"}})  # as a cluster has
    assert main(ensure_args(kubeconfig, "--namespace", NAMESPACE)) == 0  # the install
    before = raw_bundles(api)
    secrets = client.CoreV1Api(api).list_secret_for_all_namespaces().items
    capsys.readouterr()

    assert main(ensure_args(kubeconfig, *flags)) == 1
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert captured.out == "" and err.count("\n") == 0, err
    assert err.startswith("volcano-guard certs ensure: MutatingWebhookConfiguration volcano-guard")
    assert f"calls Service {calls}" in err and err.endswith("nothing was written"), err
    assert raw_bundles(api) == before
    after = client.CoreV1Api(api).list_secret_for_all_namespaces().items
    assert [
        (s.metadata.namespace, s.metadata.name, s.metadata.resource_version) for s in after
    ] == [(s.metadata.namespace, s.metadata.name, s.metadata.resource_version) for s in secrets]
    assert base64.b64decode(before[0] or "")  # the install's caBundle is still there


class Killed(Exception):
    """The run stopped between two steps (as a SIGKILL or a lost leader would)."""


def stop_after(steps: int) -> Any:
    """A `said` that stops the run just before its step number steps + 1."""
    said: list[str] = []

    def say(step: str, why: str) -> None:
        if len(said) == steps:
            raise Killed(step)
        said.append(step)

    return say


@pytest.mark.parametrize("steps", [1, 2])
def test_a_run_killed_after_any_step_of_the_recovery_is_finished_by_the_next(cluster, steps):
    _, _, api = cluster
    start = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=100)
    ensure(api, TARGET, LIFETIMES, now=lambda: start)
    ensure(api, TARGET, LIFETIMES, now=lambda: start + datetime.timedelta(days=61))
    new_ca = x509.load_pem_x509_certificates(data(api, "volcano-guard-ca", "ca.crt"))[0]
    recreate_registrations(api)
    with pytest.raises(Killed):
        ensure(api, TARGET, LIFETIMES, said=stop_after(steps))
    assert ensure(api, TARGET, LIFETIMES) == ["retire", "trust", "issue"][steps:]
    assert all(b == {fingerprint(new_ca)} for b in bundles(api))
    assert verifies(data(api, "volcano-guard-tls", "tls.crt"), [new_ca])


def test_deleted_secrets_are_made_again_keeping_what_is_served_trusted(cluster):
    _, _, api = cluster
    core = client.CoreV1Api(api)
    ensure(api, TARGET, LIFETIMES)
    core.delete_namespaced_secret("volcano-guard-tls", NAMESPACE)
    assert ensure(api, TARGET, LIFETIMES) == ["issue"]
    served = data(api, "volcano-guard-tls", "tls.crt")  # what the webhook picks up and serves
    core.delete_namespaced_secret("volcano-guard-ca", NAMESPACE)
    assert ensure(api, TARGET, LIFETIMES) == ["make-ca", "adopt", "trust", "issue"]
    cas = x509.load_pem_x509_certificates(data(api, "volcano-guard-ca", "ca.crt"))
    assert len(cas) == 2 and all(b == {fingerprint(c) for c in cas} for b in bundles(api))
    assert verifies(served, cas[1:])  # the old CA stays trusted until it expires
    assert verifies(data(api, "volcano-guard-tls", "tls.crt"), cas[:1])
