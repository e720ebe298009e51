"""certs inject and certs secret against the sandbox, through a kubeconfig, as an operator runs
them."""

import base64

import pytest
from kubernetes import client

from tests.conftest import NAMESPACE, SERVICE
from volcano_guard.certs.generate import generate
from volcano_guard.cli import main


def test_inject_sets_the_ca_bundle_on_every_webhook(cluster, tmp_path, capsys):
    _, kubeconfig, api = cluster
    made = generate(SERVICE, NAMESPACE, tmp_path / "tls")
    assert (
        main(
            [
                "certs",
                "inject",
                "--ca",
                str(made.ca_file),
                "--mutating",
                "volcano-guard",
                "--validating",
                "volcano-guard",
                "--kubeconfig",
                kubeconfig,
            ]
        )
        == 0
    )
    assert "ValidatingWebhookConfiguration/volcano-guard (2 webhooks)" in capsys.readouterr().out
    adm = client.AdmissionregistrationV1Api(api)
    hooks = (
        adm.read_mutating_webhook_configuration("volcano-guard").webhooks
        + adm.read_validating_webhook_configuration("volcano-guard").webhooks
    )
    assert len(hooks) == 3
    for hook in hooks:
        assert base64.b64decode(hook.client_config.ca_bundle) == made.ca_file.read_bytes()


def test_inject_names_a_missing_configuration(cluster, tmp_path, capsys):
    _, kubeconfig, _ = cluster
    made = generate(SERVICE, NAMESPACE, tmp_path / "tls")
    assert (
        main(
            [
                "certs",
                "inject",
                "--ca",
                str(made.ca_file),
                "--mutating",
                "nope",
                "--kubeconfig",
                kubeconfig,
            ]
        )
        == 1
    )
    assert "MutatingWebhookConfiguration nope: 404" in capsys.readouterr().err
    assert main(["certs", "inject", "--ca", str(made.ca_file), "--kubeconfig", kubeconfig]) == 2


def test_secret_is_created_then_updated(cluster, tmp_path, capsys):
    _, kubeconfig, api = cluster
    made = generate(SERVICE, NAMESPACE, tmp_path / "tls")
    args = [
        "certs",
        "secret",
        "--dir",
        str(tmp_path / "tls"),
        "--name",
        "volcano-guard-tls",
        "--namespace",
        NAMESPACE,
        "--kubeconfig",
        kubeconfig,
    ]
    assert main(args) == 0
    assert "created" in capsys.readouterr().out
    generate(SERVICE, NAMESPACE, tmp_path / "tls", force=True)
    assert main(args) == 0
    assert "updated" in capsys.readouterr().out
    secret = client.CoreV1Api(api).read_namespaced_secret("volcano-guard-tls", NAMESPACE)
    assert secret.type == "kubernetes.io/tls"
    assert base64.b64decode(secret.data["tls.crt"]) == made.cert_file.read_bytes()


def test_the_api_servers_own_message_is_passed_on(cluster, tmp_path, capsys):
    _, kubeconfig, _ = cluster
    generate(SERVICE, NAMESPACE, tmp_path / "tls")
    assert (
        main(
            [
                "certs",
                "secret",
                "--dir",
                str(tmp_path / "tls"),
                "--name",
                "s",
                "--namespace",
                "nosuchns",
                "--kubeconfig",
                kubeconfig,
            ]
        )
        == 1
    )
    assert capsys.readouterr().err.strip() == (
        'volcano-guard certs secret: Secret nosuchns/s: 404 Not Found: namespaces "nosuchns" '
        "not found"
    )


def expired_ca(tmp_path) -> bytes:
    import datetime

    from volcano_guard.certs.generate import cert_pem, issue_ca

    long_ago = datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)
    _, certificate = issue_ca("old-ca", long_ago, long_ago + datetime.timedelta(days=365))
    return cert_pem(certificate)


# What an operator passes by mistake -> what the refusal must say of it.
UNFIT = {
    "the serving key": (lambda made, tmp: made.key_file.read_bytes(), "holds a private key"),
    "the serving certificate": (
        lambda made, tmp: made.cert_file.read_bytes(),
        "holds a certificate that is not a CA",
    ),
    "garbage": (lambda made, tmp: b"garbage\n", "holds no PEM block"),
    "an empty file": (lambda made, tmp: b"", "is empty"),
    "an expired CA": (lambda made, tmp: expired_ca(tmp), "holds a CA certificate that expired"),
    "a CA with its key": (
        lambda made, tmp: made.ca_file.read_bytes() + made.key_file.read_bytes(),
        "holds a private key",
    ),
    "a CA cut short": (
        lambda made, tmp: made.ca_file.read_bytes()[:200],
        "holds a certificate that does not parse",
    ),
}


@pytest.mark.parametrize("mistake", sorted(UNFIT))
def test_inject_refuses_what_is_not_ca_certificates_and_touches_nothing(
    cluster, tmp_path, capsys, mistake
):
    _, kubeconfig, api = cluster
    made = generate(SERVICE, NAMESPACE, tmp_path / "tls")
    content, said = UNFIT[mistake]
    bad = tmp_path / "bundle.pem"
    bad.write_bytes(content(made, tmp_path))
    assert (
        main(
            [
                "certs",
                "inject",
                "--ca",
                str(bad),
                "--mutating",
                "volcano-guard",
                "--validating",
                "volcano-guard",
                "--kubeconfig",
                kubeconfig,
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(bad) in err and said in err, err
    adm = client.AdmissionregistrationV1Api(api)
    hooks = (
        adm.read_mutating_webhook_configuration("volcano-guard").webhooks
        + adm.read_validating_webhook_configuration("volcano-guard").webhooks
    )
    assert all(hook.client_config.ca_bundle is None for hook in hooks)


def test_inject_names_a_file_that_does_not_exist_before_any_cluster(tmp_path, capsys):
    missing = tmp_path / "nope.crt"
    assert (
        main(
            [
                "certs",
                "inject",
                "--ca",
                str(missing),
                "--mutating",
                "volcano-guard",
                "--kubeconfig",
                str(tmp_path / "no-kubeconfig"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert str(missing) in err and "No such file" in err


def test_a_bundle_of_several_cas_is_injected(cluster, tmp_path, capsys):
    _, kubeconfig, api = cluster
    old = generate(SERVICE, NAMESPACE, tmp_path / "old")
    new = generate(SERVICE, NAMESPACE, tmp_path / "new")
    bundle = tmp_path / "bundle.pem"
    bundle.write_bytes(old.ca_file.read_bytes() + new.ca_file.read_bytes())
    assert (
        main(
            [
                "certs",
                "inject",
                "--ca",
                str(bundle),
                "--validating",
                "volcano-guard",
                "--kubeconfig",
                kubeconfig,
            ]
        )
        == 0
    )
    hook = (
        client.AdmissionregistrationV1Api(api)
        .read_validating_webhook_configuration("volcano-guard")
        .webhooks[0]
    )
    assert base64.b64decode(hook.client_config.ca_bundle) == bundle.read_bytes()
