"""deploy/cert-manager, the component that hands the webhook's certificates to cert-manager:
rendered over deploy/base with kubectl kustomize, the built-in kinds validated against the
Kubernetes 1.30 schemas, cert-manager's kinds against cert-manager's own (its v1 CRDs, as the
cloudcoil models generate them), and the references that make cainjector and the webhook agree.
"""

import datetime
import socket
import ssl
import threading

import kubernetes_validate
import pytest
from cloudcoil.models.cert_manager import v1 as cert_manager

from tests.conftest import REPO
from tests.deploy.test_deploy import by_kind, render
from volcano_guard.base.durations import parse_duration
from volcano_guard.certs.generate import (
    _ca_certificate,
    cert_pem,
    issue_ca,
    issue_leaf,
    key_pem,
    service_dns_names,
)
from volcano_guard.certs.plan import Lifetimes
from volcano_guard.reconciler.reconcile import for_cert_manager
from volcano_guard.webhook.config import config_from_dict
from volcano_guard.webhook.manifests import admission_objects

CERT_MANAGER_KINDS = {"Certificate": cert_manager.Certificate, "Issuer": cert_manager.Issuer}


def documented_overlay():
    """The overlay docs/install.md tells cert-manager users to write, as written there."""
    guide = (REPO / "docs" / "install.md").read_text()
    start = guide.index("```yaml\n# my-guard/kustomization.yaml\n") + len("```yaml\n")
    return guide[start : guide.index("```", start)]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    beside_deploy = tmp_path_factory.mktemp("checkout")
    (beside_deploy / "deploy").symlink_to(REPO / "deploy")
    overlay = beside_deploy / "my-guard"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(documented_overlay())
    return render(overlay)


def cert_manager_problems(doc):
    """What cert-manager's schema refuses in doc, unknown fields included (kubectl validates
    strictly by default, so the API server would refuse those too)."""
    model = CERT_MANAGER_KINDS[doc["kind"]]
    try:
        parsed = model.model_validate(doc)
    except ValueError as error:
        return [str(error)]
    kept = parsed.model_dump(by_alias=True, exclude_unset=True, mode="json")
    return [f"unknown field {path}" for path in _dropped(doc, kept, "")]


def _dropped(given, kept, path):
    if isinstance(given, dict):
        for key, value in given.items():
            if key not in kept:
                yield f"{path}.{key}"
            else:
                yield from _dropped(value, kept[key], f"{path}.{key}")
    elif isinstance(given, list):
        for index, (item, kept_item) in enumerate(zip(given, kept, strict=True)):
            yield from _dropped(item, kept_item, f"{path}[{index}]")


def named(docs, kind, name):
    [doc] = [d for d in by_kind(docs, kind) if d["metadata"]["name"] == name]
    return doc


def test_built_in_kinds_validate_against_the_kubernetes_schema(rendered):
    built_in = [d for d in rendered if d["kind"] not in CERT_MANAGER_KINDS]
    assert len(built_in) >= 10
    for doc in built_in:
        kubernetes_validate.validate(doc, "1.30.0", strict=True)


def test_issuers_and_certificates_validate_against_cert_managers_schema(rendered):
    ours = [d for d in rendered if d["kind"] in CERT_MANAGER_KINDS]
    assert sorted(d["kind"] for d in ours) == ["Certificate", "Certificate", "Issuer", "Issuer"]
    for doc in ours:
        assert doc["apiVersion"] == "cert-manager.io/v1"
        assert cert_manager_problems(doc) == [], doc["metadata"]["name"]


def test_the_schema_check_refuses_a_misspelt_field_and_a_value_out_of_its_enum(rendered):
    certificate = named(rendered, "Certificate", "volcano-guard-tls")
    misspelt = {**certificate, "spec": {**certificate["spec"], "dnsName": ["x"]}}
    assert cert_manager_problems(misspelt) == ["unknown field .spec.dnsName"]
    spec = certificate["spec"]
    bad_key = {
        **certificate,
        "spec": {**spec, "privateKey": {**spec["privateKey"], "algorithm": "DSA"}},
    }
    [problem] = cert_manager_problems(bad_key)
    assert "spec.privateKey.algorithm" in problem


def test_the_reconciler_leaves_certificates_to_cert_manager_and_loses_their_rights(rendered):
    assert not by_kind(rendered, "Job") and not by_kind(rendered, "CronJob")
    reconciler = named(rendered, "Deployment", "volcano-guard-reconciler")
    [container] = reconciler["spec"]["template"]["spec"]["containers"]
    assert "--certificates=cert-manager" in container["args"]
    granted = [
        rule
        for kind in ("Role", "ClusterRole")
        for role in by_kind(rendered, kind)
        for rule in role["rules"]
    ]
    assert not [rule for rule in granted if "secrets" in rule["resources"]]


def test_cainjector_fills_both_configurations_from_the_certificate_the_webhook_serves(rendered):
    deployment = named(rendered, "Deployment", "volcano-guard")
    [tls_volume] = [v for v in deployment["spec"]["template"]["spec"]["volumes"] if "secret" in v]
    namespace = deployment["metadata"]["namespace"]
    configurations = [
        for_cert_manager(obj, namespace, tls_volume["secret"]["secretName"])
        for obj in admission_objects(config_from_dict({}), namespace).values()
        if obj["kind"].endswith("WebhookConfiguration")
    ]
    assert len(configurations) == 2
    for configuration in configurations:
        source = configuration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
        namespace, name = source.split("/")
        certificate = named(rendered, "Certificate", name)
        assert certificate["metadata"]["namespace"] == namespace
        assert certificate["spec"]["secretName"] == tls_volume["secret"]["secretName"]
        for webhook in configuration["webhooks"]:
            service = webhook["clientConfig"]["service"]
            assert certificate["spec"]["dnsNames"] == list(
                service_dns_names(service["name"], service["namespace"])
            )


def test_the_serving_certificate_is_signed_by_a_ca_of_the_guards_own(rendered):
    serving = named(rendered, "Certificate", "volcano-guard-tls")
    assert "server auth" in serving["spec"]["usages"]
    issuer = named(rendered, "Issuer", serving["spec"]["issuerRef"]["name"])
    ca = [
        c
        for c in by_kind(rendered, "Certificate")
        if c["spec"]["secretName"] == issuer["spec"]["ca"]["secretName"]
    ]
    assert len(ca) == 1 and ca[0]["spec"]["isCA"] is True
    root = named(rendered, "Issuer", ca[0]["spec"]["issuerRef"]["name"])
    assert root["spec"] == {"selfSigned": {}}
    # A renewed CA keeps its key, so it still verifies what its predecessor signed (below).
    assert ca[0]["spec"]["privateKey"]["rotationPolicy"] == "Never"
    assert serving["spec"]["privateKey"]["rotationPolicy"] == "Always"


def test_lifetimes_and_renewal_points_are_the_certs_jobs(rendered):
    lifetimes = Lifetimes()
    for name, lifetime in (
        ("volcano-guard-root-ca", lifetimes.ca),
        ("volcano-guard-tls", lifetimes.cert),
    ):
        spec = named(rendered, "Certificate", name)["spec"]
        assert parse_duration(spec["duration"]) == lifetime
        assert parse_duration(spec["renewBefore"]) == lifetime * lifetimes.renew_when_left


def _handshake(server_cert_pem, server_key_pem, trusted_ca_pem, tmp_path):
    """A real TLS handshake on loopback; the client's verification error, or None."""
    (tmp_path / "tls.crt").write_bytes(server_cert_pem)
    (tmp_path / "tls.key").write_bytes(server_key_pem)
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    client_context = ssl.create_default_context(cadata=trusted_ca_pem.decode())
    with socket.create_server(("127.0.0.1", 0)) as listener:

        def serve():
            connection, _ = listener.accept()
            try:
                with server_context.wrap_socket(connection, server_side=True):
                    pass
            except (ssl.SSLError, OSError):
                pass

        thread = threading.Thread(target=serve)
        thread.start()
        try:
            with (
                socket.create_connection(listener.getsockname(), timeout=5) as raw,
                client_context.wrap_socket(raw, server_hostname="volcano-guard.n.svc"),
            ):
                return None
        except ssl.SSLCertVerificationError as error:
            return error.verify_message
        finally:
            thread.join(timeout=5)


def test_a_renewed_ca_that_kept_its_key_verifies_what_the_old_one_signed(tmp_path):
    now = datetime.datetime.now(datetime.UTC)
    then = now - datetime.timedelta(days=20)  # the old CA and the served certificate's issue
    ca_key, old_ca = issue_ca("volcano-guard-ca", then, then + datetime.timedelta(days=30))
    key, served = issue_leaf(
        ca_key,
        old_ca,
        service_dns_names("volcano-guard", "n"),
        then,
        now + datetime.timedelta(days=10),
    )
    renewed = _ca_certificate(ca_key, "volcano-guard-ca", now, now + datetime.timedelta(days=30))
    assert renewed.serial_number != old_ca.serial_number
    assert _handshake(cert_pem(served), key_pem(key), cert_pem(renewed), tmp_path) is None
    # What rotationPolicy: Never prevents: a renewal with a new key trusts nothing served before.
    _, rekeyed = issue_ca("volcano-guard-ca", now, now + datetime.timedelta(days=30))
    assert (
        _handshake(cert_pem(served), key_pem(key), cert_pem(rekeyed), tmp_path)
        == "unable to get local issuer certificate"
    )
