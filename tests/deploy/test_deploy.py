"""deploy/ rendered with kubectl kustomize, every document validated against the Kubernetes
1.30 schemas offline, and the invariants that keep the install working."""

import ipaddress
import os
import shutil
import subprocess

import kubernetes_validate
import pytest
import yaml

from tests.conftest import REPO
from volcano_guard.webhook.config import parse_config

SERVED_PATHS = {"/mutate", "/validate"}


def render(path):
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed (.ci/run installs it)")
    result = subprocess.run(
        ["kubectl", "kustomize", str(REPO / path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return [d for d in yaml.safe_load_all(result.stdout) if d]


@pytest.fixture(scope="module")
def base():
    return render("deploy/base")


def by_kind(docs, kind):
    return [d for d in docs if d["kind"] == kind]


def webhook_deployment(docs):
    """The webhook's Deployment (deploy/base also has the reconciler's)."""
    [deployment] = [
        d for d in by_kind(docs, "Deployment") if d["metadata"]["name"] == "volcano-guard"
    ]
    return deployment


def test_every_document_validates_against_the_kubernetes_schema(base):
    assert len(base) >= 12
    for doc in base:
        kubernetes_validate.validate(doc, "1.30.0", strict=True)


def test_the_harness_names_the_service_and_namespace_deploy_base_installs(base):
    """The demo and the guarded sandbox stand in for an installed guard: a certificate for
    another namespace's Service would show a name the API server never calls."""
    from volcano_guard_sandbox import demo, guarded_sandbox

    [service] = by_kind(base, "Service")
    installed = (service["metadata"]["name"], service["metadata"]["namespace"])
    assert installed == (guarded_sandbox.SERVICE, guarded_sandbox.NAMESPACE)
    assert installed == (demo.SERVICE, demo.NAMESPACE)


def test_service_ports_match_the_container_ports(base):
    deployment = webhook_deployment(base)
    [service] = by_kind(base, "Service")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    ports = {p["containerPort"] for p in container["ports"]}
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= ports
    args = container["args"]
    assert args[args.index("--listen") + 1].endswith(":8443")


def shipped_config(base):
    [configmap] = by_kind(base, "ConfigMap")
    return parse_config(configmap["data"]["config.yaml"])


def webhooks(base, kubernetes: tuple[int, int] = (1, 36)):
    """The webhooks the reconciler registers for deploy/base's config, namespace and Service
    on a cluster of that version (deploy/ ships no registration: the reconciler makes them in
    the cluster)."""
    from volcano_guard.webhook.admission_policies import apis_at
    from volcano_guard.webhook.manifests import admission_objects

    [config_map] = by_kind(base, "ConfigMap")
    [service] = by_kind(base, "Service")
    config = parse_config(config_map["data"]["config.yaml"])
    objects = admission_objects(
        config,
        service["metadata"]["namespace"],
        service["metadata"]["name"],
        served=apis_at(kubernetes),
    ).values()
    return [
        w
        for config in objects
        if config["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
        for w in config["webhooks"]
    ]


def test_webhooks_call_served_paths_and_skip_system_and_own_namespaces(base):
    [service] = by_kind(base, "Service")
    assert webhooks(base)
    for webhook in webhooks(base):
        target = webhook["clientConfig"]["service"]
        assert target["path"] in SERVED_PATHS
        assert target["name"] == service["metadata"]["name"]
        assert target["namespace"] == service["metadata"]["namespace"]
        assert webhook["admissionReviewVersions"] == ["v1"]
        assert webhook["sideEffects"] == "None"
        assert webhook["timeoutSeconds"] <= 5
        [expression] = webhook["namespaceSelector"]["matchExpressions"]
        assert expression["operator"] == "NotIn"
        assert {"kube-system", service["metadata"]["namespace"]} <= set(expression["values"])


def test_the_binding_webhook_has_no_object_selector(base):
    binding = [
        w for w in webhooks(base) if any("pods/binding" in r["resources"] for r in w["rules"])
    ]
    assert binding and all("objectSelector" not in w for w in binding)


ADMISSION_KINDS = {
    "mutatingwebhookconfigurations",
    "validatingwebhookconfigurations",
    "validatingadmissionpolicies",
    "validatingadmissionpolicybindings",
    "mutatingadmissionpolicies",
    "mutatingadmissionpolicybindings",
}


def test_rbac_is_least_privilege(base):
    """No wildcard, no escalate or bind; delete, and any write cluster-wide, only of the
    guard's own objects by name (the reconciler's, which it re-creates and, at uninstall,
    deletes: its admission objects, and in its namespace its Secrets, node states and Lease)."""
    from volcano_guard.webhook.manifests import OWNED
    from volcano_guard.webhook.node_states import NAMES

    own = {owned.name for owned in OWNED}
    made = {*NAMES, "volcano-guard-ca", "volcano-guard-tls", "volcano-guard-reconciler"}
    for role in by_kind(base, "ClusterRole") + by_kind(base, "Role"):
        for rule in role["rules"]:
            assert "*" not in rule["verbs"] and "*" not in rule["resources"]
            assert not set(rule["verbs"]) & {"deletecollection", "escalate", "bind", "impersonate"}
            if "delete" in rule["verbs"]:  # what the reconciler made, by name
                kinds = ADMISSION_KINDS | {"secrets", "configmaps", "leases"}
                assert set(rule["resources"]) <= kinds and rule["resourceNames"]
                assert set(rule["resourceNames"]) <= own | made
    writes = [
        r
        for role in by_kind(base, "ClusterRole")
        for r in role["rules"]
        if set(r["verbs"]) - {"get", "list", "watch"}
    ]  # cluster-wide: by name only
    assert writes and all(r.get("resourceNames") and set(r["resourceNames"]) <= own for r in writes)


def test_every_right_to_write_an_admission_object_or_param_names_only_the_guards_own():
    """Over every part of deploy/ (a webhook configuration, policy or binding is the power to
    refuse or rewrite any request, a node-state param the power to make the in-server policies
    admit or refuse): each such rule lists resourceNames, and those are the objects the
    reconciler owns; RBAC cannot limit a POST create by name, and kube-apiserver authorizes a
    server-side apply that creates as create of the object's name."""
    from volcano_guard.webhook.manifests import OWNED, PLURALS
    from volcano_guard.webhook.node_states import NAMES

    owned = {(PLURALS[o.kind], o.name) for o in OWNED}
    owned |= {("configmaps", name) for name in (*NAMES, "volcano-guard-config")}
    docs = [
        d
        for part in ("base", "audit", "monitoring", "policyreport-crds")
        for d in render(f"deploy/{part}")
    ]
    rules = [
        r for role in by_kind(docs, "ClusterRole") + by_kind(docs, "Role") for r in role["rules"]
    ]
    writers = [
        r
        for r in rules
        if set(r["resources"]) & (ADMISSION_KINDS | {"configmaps"})
        and set(r["verbs"]) - {"get", "list", "watch"}
    ]
    assert len(writers) >= 3
    for rule in writers:
        named = {
            (resource, name) for resource in rule["resources"] for name in rule["resourceNames"]
        }
        assert named <= owned, named - owned


def test_the_shipped_config_is_valid(base):
    [config_map] = by_kind(base, "ConfigMap")
    config = parse_config(config_map["data"]["config.yaml"])
    assert config.policies.nodeName.mode == "enforce"


def test_the_deployment_is_highly_available_and_restricted(base):
    deployment = webhook_deployment(base)
    spec = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] >= 2
    assert spec["priorityClassName"] == "system-cluster-critical"
    assert spec["topologySpreadConstraints"]
    container = spec["containers"][0]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert {
        container["readinessProbe"]["httpGet"]["path"],
        container["livenessProbe"]["httpGet"]["path"],
    } == {"/readyz", "/healthz"}
    assert by_kind(base, "PodDisruptionBudget")


def test_monitoring_objects_render_with_the_contract_metric_names():
    docs = render("deploy/monitoring")
    kinds = {d["kind"] for d in docs}
    assert kinds == {"ServiceMonitor", "PodMonitor", "PrometheusRule", "ConfigMap"}
    # The label kube-prometheus-stack's Prometheus selects these objects by.
    assert all(
        d["metadata"]["labels"]["release"] == "kube-prometheus-stack"
        for d in docs
        if d["kind"] != "ConfigMap"
    )
    rules = yaml.safe_dump(docs)
    for metric in (
        "admission_errors_total",
        "cert_expiry_timestamp_seconds",
        "sidecar_pending_objects",
        "sidecar_conflicts_total",
        "overcommitted_nodes",
        "orphaned_pods",
        "audit_last_evaluation_timestamp_seconds",
    ):
        assert f"volcano_guard_{metric}" in rules


def test_before_1_36_injection_has_its_own_webhook_selecting_opted_in_pods(base):
    # From 1.36 a MutatingAdmissionPolicy injects (tests/webhook/test_mutating_policies*.py).
    assert not [w for w in webhooks(base) if w["name"].startswith("inject.")]
    [inject] = [w for w in webhooks(base, (1, 35)) if w["name"].startswith("inject.")]
    assert inject["objectSelector"] == {"matchLabels": {"volcano-guard.io/inject": "true"}}
    assert inject["clientConfig"]["service"]["path"] == "/mutate"


def test_the_grafana_dashboard_charts_contract_metrics():
    import json

    dashboard = json.loads((REPO / "deploy" / "monitoring" / "grafana-dashboard.json").read_text())
    expressions = " ".join(t["expr"] for panel in dashboard["panels"] for t in panel["targets"])
    for metric in (
        "admission_requests_total",
        "admission_duration_seconds_bucket",
        "sidecar_upstream_writes_total",
        "sidecar_writes_received_total",
        "sidecar_pending_objects",
        "cert_expiry_timestamp_seconds",
        "overcommitted_nodes",
        "node_request_ratio",
        "audit_violations",
        "orphaned_pods",
    ):
        assert f"volcano_guard_{metric}" in expressions


@pytest.fixture(scope="module")
def audit():
    return render("deploy/audit")


def test_the_audit_validates_against_the_kubernetes_schema(audit):
    assert {d["kind"] for d in audit} == {
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Deployment",
    }
    for doc in audit:
        kubernetes_validate.validate(doc, "1.30.0", strict=True)


def test_the_audit_writes_only_its_reports_and_its_lease(audit):
    for role in by_kind(audit, "ClusterRole") + by_kind(audit, "Role"):
        for rule in role["rules"]:
            assert "*" not in rule["verbs"] and "*" not in rule["resources"]
            writes = set(rule["verbs"]) - {"get", "list", "watch"}
            assert not writes & {"delete", "deletecollection", "patch", "escalate", "bind"}
            if writes - {"create"}:  # update: only its own objects, by name
                assert rule["resourceNames"] in (["volcano-guard"], ["volcano-guard-audit"])
    [role] = by_kind(audit, "Role")
    assert {r for rule in role["rules"] for r in rule["resources"]} == {"leases"}


def test_the_audit_runs_two_replicas_restricted_and_scraped(audit):
    [deployment] = by_kind(audit, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    spec = deployment["spec"]["template"]["spec"]
    container = spec["containers"][0]
    assert container["args"][:2] == ["audit", "--watch"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert {e["name"] for e in container["env"]} >= {"POD_NAME", "POD_NAMESPACE"}
    monitors = [
        d
        for d in render("deploy/monitoring")
        if d["kind"] == "PodMonitor" and d["metadata"]["name"] == "volcano-guard-audit"
    ]
    [monitor] = monitors
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    [endpoint] = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] in {p["name"] for p in container["ports"]}
    assert endpoint["honorLabels"] is True


def test_the_shared_policyreport_crds_are_apart_so_removing_the_audit_keeps_them(audit):
    assert not by_kind(audit, "CustomResourceDefinition")
    crds = render("deploy/policyreport-crds")
    assert {crd["metadata"]["name"] for crd in crds} == {
        "policyreports.wgpolicyk8s.io",
        "clusterpolicyreports.wgpolicyk8s.io",
    }
    for crd in crds:
        kubernetes_validate.validate(crd, "1.30.0", strict=True)


def test_the_reports_the_audit_writes_fit_the_shipped_crds():
    import datetime

    import jsonschema

    from volcano_guard.audit.findings import NODE_ACCOUNTING, ORPHANED_PODS, Finding
    from volcano_guard.audit.reports import FirstSeen, reports

    found = [
        Finding(ORPHANED_PODS, "Pod", "team-a", "p1", "names a missing PodGroup"),
        Finding(NODE_ACCOUNTING, "Node", "", "gpu-1", "requests more cpu than it has"),
    ]
    seen = FirstSeen()
    seen.update(found, datetime.datetime(2026, 11, 24, tzinfo=datetime.UTC))
    schemas = {
        crd["spec"]["names"]["kind"]: crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        for crd in render("deploy/policyreport-crds")
    }
    for document in reports(found, seen.seen, limit=10).values():
        assert document["apiVersion"] == "wgpolicyk8s.io/v1alpha2"
        jsonschema.validate(document, schemas[document["kind"]])
    bad = {**document, "results": [{**document["results"][0], "result": "failed"}]}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schemas[bad["kind"]])


def test_the_network_policy_component_opens_only_the_webhooks_two_ports(tmp_path):
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    to_deploy = os.path.relpath(REPO / "deploy", overlay)
    (overlay / "kustomization.yaml").write_text(
        f"resources: [{to_deploy}/base]\ncomponents: [{to_deploy}/network-policy]\n"
    )
    docs = render(overlay)
    [policy] = by_kind(docs, "NetworkPolicy")
    kubernetes_validate.validate(policy, "1.30.0", strict=True)
    deployment = webhook_deployment(docs)
    template = deployment["spec"]["template"]
    assert policy["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    assert (
        policy["spec"]["podSelector"]["matchLabels"].items()
        <= template["metadata"]["labels"].items()
    )
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    opened = {port["port"] for rule in policy["spec"]["ingress"] for port in rule["ports"]}
    served = {port["containerPort"] for port in template["spec"]["containers"][0]["ports"]}
    assert opened == served == {8443, 9090}
    assert all(rule.get("from") for rule in policy["spec"]["ingress"])  # no port open to all


def test_the_network_policy_admits_only_the_cidr_the_operator_names(tmp_path):
    """Unfilled, the placeholder is no CIDR: the API server refuses the NetworkPolicy (as
    ValidateIPBlock does), so the install fails; an overlay's patch names the real one."""
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    to_deploy = os.path.relpath(REPO / "deploy", overlay)
    kustomization = f"resources: [{to_deploy}/base]\ncomponents: [{to_deploy}/network-policy]\n"
    (overlay / "kustomization.yaml").write_text(kustomization)
    [unfilled] = by_kind(render(overlay), "NetworkPolicy")
    [admission] = [r for r in unfilled["spec"]["ingress"] if r["ports"][0]["port"] == 8443]
    [placeholder] = admission["from"]
    with pytest.raises(ValueError):
        ipaddress.ip_network(placeholder["ipBlock"]["cidr"])
    patch = (
        "- op: replace\n  path: /spec/ingress/0/from\n  value: [{ipBlock: {cidr: 172.18.0.0/28}}]\n"
    )
    (overlay / "api-server.yaml").write_text(patch)
    (overlay / "kustomization.yaml").write_text(
        kustomization
        + "patches:\n- path: api-server.yaml\n"
        + "  target: {kind: NetworkPolicy, name: volcano-guard}\n"
    )
    [filled] = by_kind(render(overlay), "NetworkPolicy")
    kubernetes_validate.validate(filled, "1.30.0", strict=True)
    assert filled["spec"]["ingress"][0] == {
        "ports": [{"port": 8443, "protocol": "TCP"}],
        "from": [{"ipBlock": {"cidr": "172.18.0.0/28"}}],
    }


def test_the_serving_key_is_readable_by_the_webhooks_user_alone(base):
    deployment = webhook_deployment(base)
    spec = deployment["spec"]["template"]["spec"]
    [tls] = [v for v in spec["volumes"] if "secret" in v]
    assert tls["secret"]["defaultMode"] == 0o400
    # The kubelet makes the files group fsGroup with group read: the container's group.
    assert spec["securityContext"]["fsGroup"] == spec["securityContext"]["runAsUser"]


def test_the_sidecar_image_is_this_releases_own_as_deploy_names_it(base):
    from volcano_guard.webhook.config import config_from_dict

    deployment = webhook_deployment(base)
    image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    assert config_from_dict({}).policies.sidecarInjection.image == image
    assert not image.endswith(":latest")


@pytest.mark.parametrize(
    ("path", "name"), [("deploy/base", "volcano-guard"), ("deploy/audit", "volcano-guard-audit")]
)
def test_the_config_is_mounted_as_a_directory_the_kubelet_refreshes(path, name):
    """A subPath mount is never refreshed by the kubelet: a config change would wait for a
    restart. The whole ConfigMap is mounted, and --config names its config.yaml in there."""
    [deployment] = [d for d in by_kind(render(path), "Deployment") if d["metadata"]["name"] == name]
    spec = deployment["spec"]["template"]["spec"]
    [volume] = [v for v in spec["volumes"] if "configMap" in v]
    assert volume["configMap"]["name"] == "volcano-guard-config"
    assert "items" not in volume["configMap"]  # every key, config.yaml included
    container = spec["containers"][0]
    [mount] = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
    assert "subPath" not in mount and "subPathExpr" not in mount
    args = container["args"]
    assert args[args.index("--config") + 1] == f"{mount['mountPath']}/config.yaml"


def test_an_overlay_namespace_reaches_every_reference_and_the_reconcilers_objects(tmp_path):
    """kustomize's namespace: moves the objects, the RoleBinding subjects and the Service; what
    names the namespace inside the config or the admission objects is the reconciler's, which
    writes them for the namespace it runs in."""
    from volcano_guard.webhook.manifests import admission_objects

    overlay = tmp_path / "overlay"
    overlay.mkdir()
    to_deploy = os.path.relpath(REPO / "deploy", overlay)
    (overlay / "kustomization.yaml").write_text(
        f"namespace: guard-ops\nresources: [{to_deploy}/base]\n"
    )
    docs = render(overlay)
    text = yaml.safe_dump_all(docs)
    assert "namespace: volcano-guard" not in text
    for binding in by_kind(docs, "RoleBinding") + by_kind(docs, "ClusterRoleBinding"):
        assert {s["namespace"] for s in binding["subjects"]} == {"guard-ops"}
    objects = admission_objects(shipped_config(docs), "guard-ops")
    written = yaml.safe_dump_all(list(objects.values()))
    assert "volcano-guard\n" not in written.replace("name: volcano-guard\n", "")
    services = [
        w["clientConfig"]["service"]
        for obj in objects.values()
        if obj["kind"].endswith("WebhookConfiguration")
        for w in obj["webhooks"]
    ]
    assert {s["namespace"] for s in services} == {"guard-ops"}
    params = [
        obj["spec"]["paramRef"]["namespace"]
        for obj in objects.values()
        if obj["kind"] == "ValidatingAdmissionPolicyBinding" and "paramRef" in obj["spec"]
    ]
    assert set(params) <= {"guard-ops"}


def test_before_1_30_the_component_leaves_out_what_that_api_server_cannot_store(tmp_path):
    """1.28 and 1.29 serve no admissionregistration.k8s.io/v1 policy, so `apply -k` of the base
    alone fails there (its reconciler limits); base plus deploy/before-1.30 validates against
    1.28's schemas, object by object, and loses nothing else."""
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    to_deploy = os.path.relpath(REPO / "deploy", overlay)
    (overlay / "kustomization.yaml").write_text(
        f"resources: [{to_deploy}/base]\ncomponents: [{to_deploy}/before-1.30]\n"
    )
    base, older = render("deploy/base"), render(overlay)
    policies = [d for d in base if d["kind"].startswith("ValidatingAdmissionPolicy")]
    assert policies, "the base has no policy left to leave out"
    for policy in policies:
        with pytest.raises(kubernetes_validate.utils.SchemaNotFoundError):  # no such kind
            kubernetes_validate.validate(policy, "1.28.0", strict=True)
    for doc in older:
        kubernetes_validate.validate(doc, "1.28.0", strict=True)
    assert [d for d in base if d not in policies] == older
