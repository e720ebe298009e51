"""The reconciler's passes against the sandbox API server: what a config calls for is made so,
and kept so, and a bad config changes nothing."""

from __future__ import annotations

import itertools
import json
import logging
from typing import Any

import pytest
import yaml

from volcano_guard.base.api_client import api_client
from volcano_guard.base.kubeconfig import Cluster
from volcano_guard.reconciler import metrics, reconcile
from volcano_guard.reconciler.objects import differs
from volcano_guard.reconciler.reconcile import PAUSE_ANNOTATION, Reconciler, Settings
from volcano_guard.webhook.admission_policies import PolicyApis, apis_at
from volcano_guard.webhook.config import config_from_dict
from volcano_guard.webhook.manifests import (
    BINDING,
    MUTATING,
    OWNED,
    POLICY,
    VALIDATING,
    Owned,
    admission_objects,
)
from volcano_guard_sandbox.apiserver.runner import SandboxThread
from volcano_guard_sandbox.apiserver.versions import DEFAULT

NS = "volcano-guard"
NODE_NAME_BINDING = Owned(BINDING, "volcano-guard-node-name")
ADMISSION = "/apis/admissionregistration.k8s.io/v1"


def configmap(config: dict[str, Any] | str, annotations: dict[str, str] | None = None) -> dict:
    text = config if isinstance(config, str) else yaml.safe_dump(config)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "volcano-guard-config", "namespace": NS, **_notes(annotations)},
        "data": {"config.yaml": text},
    }


def _notes(annotations: dict[str, str] | None) -> dict[str, Any]:
    return {"annotations": annotations} if annotations else {}


@pytest.fixture
def cluster():
    with SandboxThread() as running:
        running.seed([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}])
        yield running


@pytest.fixture
def client(cluster):
    return api_client(Cluster(cluster.url))


def put_config(client, config, annotations=None) -> None:
    from volcano_guard.base.api_client import request_json

    path = f"/api/v1/namespaces/{NS}/configmaps"
    body = configmap(config, annotations)
    try:
        request_json(client, "PUT", f"{path}/volcano-guard-config", body=body)
    except Exception:
        request_json(client, "POST", path, body=body)


def live(client, owned: Owned) -> dict[str, Any] | None:
    from volcano_guard.reconciler.objects import AdmissionObjects

    return AdmissionObjects(client).get(owned)


def counter(metric, *labels: str) -> float:
    return metric.labels(*labels)._value.get() if labels else metric._value.get()


# What the sandbox's default version serves (the tests' cluster plays it).
SANDBOX_APIS = apis_at((1, DEFAULT.minor))


def test_every_in_server_check_any_config_makes_has_an_owned_name():
    modes = ("enforce", "warn", "audit", "off")
    seen = set()
    for requests, node, binding, selectors, unknown in itertools.product(
        modes, modes, modes, ([], ["volcano.sh/role:train"]), ("deny", "allow")
    ):
        config = config_from_dict(
            {
                "policies": {
                    "resourceRequests": {"mode": requests, "defaults": {"cpu": "100m"}},
                    "nodeName": {
                        "mode": node,
                        "action": "rewrite" if binding == "warn" else "deny",
                        "managedNodeSelectors": selectors,
                        "unknownNodes": unknown,
                        "bindingGuard": {"mode": binding},
                    },
                }
            }
        )
        seen |= set(admission_objects(config))  # raises for a name outside OWNED
    assert seen == set(OWNED)


def test_server_defaults_are_not_drift_but_a_changed_or_missing_field_is():
    desired = {"webhooks": [{"name": "a", "rules": [{"operations": ["CREATE"]}]}]}
    defaulted = {"webhooks": [{"name": "a", "rules": [{"operations": ["CREATE"]}], "x": 1}]}
    assert not differs(desired, defaulted)
    assert differs(desired, {"webhooks": [{"name": "a", "rules": [{"operations": ["UPDATE"]}]}]})
    assert differs(desired, {"webhooks": []})
    assert differs(desired, {})


def test_a_first_pass_installs_what_the_config_calls_for_with_certificates(cluster, client):
    put_config(client, {})
    reconciler = Reconciler(client, Settings(NS))
    assert reconciler.reconcile_once()
    wanted = admission_objects(config_from_dict({}), NS, served=SANDBOX_APIS)
    for owned in OWNED:
        found = live(client, owned)
        assert (found is None) == (owned not in wanted), owned
    validating = live(client, Owned(VALIDATING, "volcano-guard"))
    assert all(w["clientConfig"].get("caBundle") for w in validating["webhooks"])
    assert all(w["clientConfig"]["service"]["namespace"] == NS for w in validating["webhooks"])
    assert reconciler.reconcile_once()  # in step: a second pass writes nothing


def test_a_config_change_reaches_the_policies_and_registrations(cluster, client):
    put_config(client, {})
    reconciler = Reconciler(client, Settings(NS))
    reconciler.reconcile_once()
    before = counter(metrics.WRITES, BINDING, "config")
    put_config(client, {"policies": {"nodeName": {"managedNodeSelectors": ["role:train"]}}})
    assert reconciler.reconcile_once()
    binding = live(client, NODE_NAME_BINDING)
    assert binding["spec"]["paramRef"]["namespace"] == NS  # node states as params now
    assert counter(metrics.WRITES, BINDING, "config") > before


def test_an_edited_binding_is_put_back_and_counted_as_drift(cluster, client):
    from volcano_guard.base.api_client import request_json

    put_config(client, {})
    reconciler = Reconciler(client, Settings(NS))
    reconciler.reconcile_once()
    binding = live(client, NODE_NAME_BINDING)
    binding["spec"]["validationActions"] = ["Audit"]
    path = f"{ADMISSION}/validatingadmissionpolicybindings/{NODE_NAME_BINDING.name}"
    request_json(client, "PUT", path, body=binding)
    drift = counter(metrics.DRIFT, *NODE_NAME_BINDING)
    assert reconciler.reconcile_once()
    assert live(client, NODE_NAME_BINDING)["spec"]["validationActions"] == ["Deny"]
    assert counter(metrics.DRIFT, *NODE_NAME_BINDING) == drift + 1


def test_a_deleted_registration_comes_back_with_its_ca_bundle(cluster, client):
    from volcano_guard.base.api_client import request_json

    put_config(client, {})
    reconciler = Reconciler(client, Settings(NS))
    reconciler.reconcile_once()
    request_json(client, "DELETE", f"{ADMISSION}/mutatingwebhookconfigurations/volcano-guard")
    assert reconciler.reconcile_once()
    back = live(client, Owned(MUTATING, "volcano-guard"))
    assert back is not None and all(w["clientConfig"]["caBundle"] for w in back["webhooks"])
    assert counter(metrics.WRITES, MUTATING, "missing") >= 1


def test_a_bad_config_keeps_the_last_good_one_with_one_line_and_an_event(cluster, client, caplog):
    from volcano_guard.base.api_client import request_json

    put_config(client, {})
    reconciler = Reconciler(client, Settings(NS))
    reconciler.reconcile_once()
    objects = {owned: live(client, owned) for owned in OWNED}
    rejected = counter(metrics.CONFIG_REJECTED)
    put_config(client, {"policies": {"resourceRequests": {"mode": "enforced"}}})
    with caplog.at_level(logging.ERROR, "volcano_guard.reconciler"):
        reconciler.reconcile_once()
        reconciler.reconcile_once()  # said once, not every pass
    [line] = [r.getMessage() for r in caplog.records]
    assert "policies.resourceRequests.mode" in line and "last good config" in line
    assert "\n" not in line
    assert metrics.CONFIG_VALID._value.get() == 0
    assert counter(metrics.CONFIG_REJECTED) == rejected + 1
    for owned, obj in objects.items():
        after = live(client, owned)
        assert (after or {}).get("metadata", {}).get("resourceVersion") == (obj or {}).get(
            "metadata", {}
        ).get("resourceVersion"), owned
    events = request_json(client, "GET", f"/api/v1/namespaces/{NS}/events")["items"]
    assert [e["reason"] for e in events] == ["ConfigRejected"]
    assert events[0]["involvedObject"]["name"] == "volcano-guard-config"


def test_not_yaml_is_refused_too(cluster, client, caplog):
    put_config(client, "policies: [")
    with caplog.at_level(logging.ERROR, "volcano_guard.reconciler"):
        assert not Reconciler(client, Settings(NS)).reconcile_once()
    [line] = [r.getMessage() for r in caplog.records]
    assert "not YAML" in line and "nothing is written" in line
    assert all(live(client, owned) is None for owned in OWNED)


def test_paused_writes_nothing_so_a_break_glass_delete_stays(cluster, client):
    from volcano_guard.base.api_client import request_json

    put_config(client, {})
    reconciler = Reconciler(client, Settings(NS))
    reconciler.reconcile_once()
    put_config(client, {}, {PAUSE_ANNOTATION: "paused"})
    request_json(client, "DELETE", f"{ADMISSION}/validatingwebhookconfigurations/volcano-guard")
    assert not reconciler.reconcile_once()
    assert live(client, Owned(VALIDATING, "volcano-guard")) is None
    assert metrics.PAUSED._value.get() == 1
    put_config(client, {})
    assert reconciler.reconcile_once()
    assert live(client, Owned(VALIDATING, "volcano-guard")) is not None


def test_gitops_reports_what_differs_and_writes_no_admission_object(cluster, client):
    put_config(client, {})
    reconciler = Reconciler(client, Settings(NS, gitops=True))
    assert not reconciler.reconcile_once()
    assert all(live(client, owned) is None for owned in OWNED)
    assert metrics.OUT_OF_STEP._value.get() == len(
        admission_objects(config_from_dict({}), NS, served=SANDBOX_APIS)
    )


def test_without_policies_served_the_registrations_fail_closed_alone(cluster, client, monkeypatch):
    monkeypatch.setattr(reconcile, "served_apis", lambda api: PolicyApis(None, None))
    put_config(client, {})
    assert Reconciler(client, Settings(NS)).reconcile_once()
    assert all(live(client, owned) is None for owned in OWNED if owned.kind == POLICY)
    validating = live(client, Owned(VALIDATING, "volcano-guard"))
    assert {
        w["failurePolicy"] for w in validating["webhooks"] if w["name"].startswith("validate")
    } == {"Fail"}
    assert json.dumps(validating).count("validate-open") == 0


def test_the_sandbox_discovery_says_which_policies_are_served(client):
    from volcano_guard.reconciler.discovery import served_apis

    assert served_apis(client) == PolicyApis(validating="v1", mutating=None)  # it plays 1.32


def test_a_re_created_registration_trusts_only_the_unexpired_cas(tmp_path):
    import datetime

    from volcano_guard.certs.generate import cert_pem, issue_ca
    from volcano_guard.reconciler.reconcile import unexpired

    now = datetime.datetime.now(datetime.UTC)
    day = datetime.timedelta(days=1)
    _, old = issue_ca("old", now - 400 * day, now - day)
    _, new = issue_ca("new", now - day, now + 400 * day)
    assert unexpired(cert_pem(new) + cert_pem(old)) == cert_pem(new)
    assert unexpired(b"not a certificate") == b""


def secret(name: str, data: dict[str, bytes], kind: str = "Opaque") -> dict[str, Any]:
    import base64

    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": kind,
        "metadata": {"name": name, "namespace": NS},
        "data": {key: base64.b64encode(value).decode() for key, value in data.items()},
    }


def test_registrations_re_created_after_the_old_ca_expired_trust_the_new_one_at_once(
    cluster, client
):
    """The state a rotation can leave: the CA Secret lists the new CA and the old, expired one,
    and the registrations are re-created (their caBundles empty). One pass: both are back,
    every caBundle verifies the serving certificate, none holds the expired CA, and the CA
    Secret no longer lists it."""
    import base64
    import datetime

    from cryptography import x509

    from volcano_guard.certs.generate import cert_pem, issue_ca, issue_leaf, key_pem
    from volcano_guard.certs.generate import service_dns_names as names

    now = datetime.datetime.now(datetime.UTC)
    day = datetime.timedelta(days=1)
    _, old = issue_ca("old", now - 3650 * day, now - day)
    new_key, new = issue_ca("new", now - 30 * day, now + 3000 * day)
    leaf_key, leaf = issue_leaf(
        new_key, new, names("volcano-guard", NS), now - day, now + 300 * day
    )
    cluster.seed(
        [
            secret(
                "volcano-guard-ca",
                {"ca.crt": cert_pem(new) + cert_pem(old), "ca.key": key_pem(new_key)},
            ),
            secret(
                "volcano-guard-tls",
                {"tls.crt": cert_pem(leaf), "tls.key": key_pem(leaf_key), "ca.crt": cert_pem(new)},
                "kubernetes.io/tls",
            ),
        ]
    )
    put_config(client, {})
    assert Reconciler(client, Settings(NS)).reconcile_once()
    for kind in (MUTATING, VALIDATING):
        for webhook in live(client, Owned(kind, "volcano-guard"))["webhooks"]:
            bundle = base64.b64decode(webhook["clientConfig"]["caBundle"])
            assert bundle == cert_pem(new), (kind, webhook["name"])
            leaf.verify_directly_issued_by(x509.load_pem_x509_certificate(bundle))
    from volcano_guard.base.api_client import request_json

    kept = request_json(client, "GET", f"/api/v1/namespaces/{NS}/secrets/volcano-guard-ca")
    assert base64.b64decode(kept["data"]["ca.crt"]) == cert_pem(new)
