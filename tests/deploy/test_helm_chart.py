"""charts/volcano-guard through Helm v4's own engine (helm-python-sdk: render, lint, the values
schema): for each set of values it renders exactly the objects deploy/ renders with kustomize,
in whatever namespace the release goes, and kubectl applies a render and an upgrade of it to
the sandbox."""

from __future__ import annotations

import copy
import datetime
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import msgspec
import pytest
import yaml

from tests.conftest import REPO
from tests.deploy.test_deploy import render as kustomize
from volcano_guard.base.kubeconfig import write_kubeconfig
from volcano_guard.webhook.config import parse_config
from volcano_guard.webhook.manifests import OWNED, PLURALS

helm = pytest.importorskip(
    "helm_python",
    reason="helm-python-sdk is not installed (the test extra has it; .ci/run installs it)",
)

CHART = REPO / "charts" / "volcano-guard"
NAMESPACE = "volcano-guard"  # deploy/'s
HELM_LABELS = {
    "app.kubernetes.io/instance",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/version",
    "helm.sh/chart",
}
# Each toggle and what deploy/ adds to deploy/base for it: (resources, components).
TOGGLES = {
    "audit": (["audit"], []),
    "monitoring": (["monitoring"], []),
    "networkPolicy": ([], ["network-policy"]),
    "certManager": ([], ["cert-manager"]),
}
# kustomize sets its namespace on the cluster-scoped kinds it does not know as such
# (ValidatingAdmissionPolicy...); the API server ignores it there.
CLUSTER_SCOPED = {
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
}
# The kinds whose schemas come from operators' CRDs, not Kubernetes (kubernetes-validate has none).
OPERATOR_GROUPS = {"monitoring.coreos.com", "cert-manager.io"}
HOOK = "helm.sh/hook"


def notes(chart: Any, values: dict[str, Any]) -> str:
    """What Helm prints after an install or upgrade with these values."""
    manifests = chart.render(values, name="volcano-guard", namespace=NAMESPACE)
    return str(manifests["volcano-guard/templates/NOTES.txt"])


# What a toggle needs besides enabled: the API server's CIDRs, as deploy's placeholder.
TOGGLE_VALUES = {"networkPolicy": {"apiServerCIDRs": ["SET-THE-API-SERVER-CIDR"]}}


def on(toggle: str) -> dict[str, Any]:
    return {"enabled": True, **TOGGLE_VALUES.get(toggle, {})}


def everything_on() -> dict[str, Any]:
    return {toggle: on(toggle) for toggle in TOGGLES}


# Config changes of each kind: what the API server enforces, what only the webhook reads.
CONFIG_CHANGES = {
    "managed nodes": {"policies": {"nodeName": {"managedNodeSelectors": ["a:b"]}}},
    "no in-server policies": {"validatingAdmissionPolicies": False},
    "the audit's section": {"audit": {"restartWindow": "2h"}},
    "the binders": {"policies": {"nodeName": {"bindingGuard": {"allowedBinders": ["u"]}}}},
}


def generator() -> Any:
    spec = importlib.util.spec_from_file_location("chart_generate", REPO / "charts" / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def chart() -> Any:
    return helm.Chart.load(str(CHART))


def rendered(
    chart: Any, values: dict[str, Any] | None = None, namespace: str = NAMESPACE
) -> list[dict[str, Any]]:
    """The objects of the chart's templates, as `helm template` renders them."""
    manifests = chart.render(values or {}, name="volcano-guard", namespace=namespace)
    texts = [text for path, text in manifests.items() if path.endswith(".yaml")]  # not NOTES
    return [doc for text in texts for doc in yaml.safe_load_all(text) if doc]


def installed(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The objects a release installs and keeps: not its hooks (the pre-delete Job), which Helm
    creates only at their event and deploy/ has no counterpart of (kustomize has no events)."""
    return [doc for doc in docs if HOOK not in doc["metadata"].get("annotations", {})]


def hooks(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [doc for doc in docs if HOOK in doc["metadata"].get("annotations", {})]


def crds(chart: Any) -> list[dict[str, Any]]:
    """The CRDs Helm installs from crds/ (before the templates, never deleted)."""
    return [doc for crd in chart.crds for doc in yaml.safe_load_all(crd["data"]) if doc]


def kustomized(tmp_path: Path, resources: list[str], components: list[str]) -> list[dict]:
    """deploy/base with these parts of deploy/, as an operator's overlay would put them."""
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    to_deploy = os.path.relpath(REPO / "deploy", overlay)
    kustomization = {
        "resources": [f"{to_deploy}/{part}" for part in ["base", *resources]],
        "components": [f"{to_deploy}/{part}" for part in components],
    }
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return [doc for doc in kustomize(overlay) if doc["kind"] != "Namespace"]


def comparable(doc: dict[str, Any]) -> dict[str, Any]:
    """doc without Helm's own labels, and the config as the guard reads it (so that the same
    config written another way, or a default written out, compares equal)."""
    doc = copy.deepcopy(doc)
    metadata = doc["metadata"]
    labels = {k: v for k, v in metadata.get("labels", {}).items() if k not in HELM_LABELS}
    metadata.pop("labels", None)
    if doc["kind"] in CLUSTER_SCOPED:
        metadata.pop("namespace", None)
    if labels:
        metadata["labels"] = labels
    if doc["kind"] == "ConfigMap" and metadata["name"] == "volcano-guard-config":
        config = parse_config(doc["data"]["config.yaml"])
        doc["data"]["config.yaml"] = msgspec.to_builtins(config, enc_hook=str)
    return doc


def by_identity(docs: list[dict[str, Any]]) -> dict[tuple[str, ...], dict[str, Any]]:
    objects: dict[tuple[str, ...], dict[str, Any]] = {}
    for doc in docs:
        doc = comparable(doc)
        metadata = doc["metadata"]
        key = (doc["apiVersion"], doc["kind"], metadata.get("namespace", ""), metadata["name"])
        assert key not in objects, f"{key} rendered twice"
        objects[key] = doc
    return objects


def assert_same_objects(chart_docs: list[dict], deploy_docs: list[dict]) -> None:
    """Object by object, whole objects: what to change in the chart when deploy/ changes.
    The chart's hooks are left out (installed): they have no kustomize counterpart."""
    ours, theirs = by_identity(installed(chart_docs)), by_identity(deploy_docs)
    assert sorted(set(theirs) - set(ours)) == [], "deploy/ renders these; the chart does not"
    assert sorted(set(ours) - set(theirs)) == [], "the chart renders these; deploy/ does not"
    for key, expected in theirs.items():
        assert list(differences(ours[key], expected)) == [], f"{key}: chart vs deploy/"


def differences(ours: Any, theirs: Any, path: str = "") -> Iterator[tuple[str, Any, Any]]:
    """(path, the chart's, deploy/'s) of each place two objects differ, deepest first found."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        for key in sorted(set(ours) | set(theirs)):
            yield from differences(ours.get(key), theirs.get(key), f"{path}.{key}")
    elif isinstance(ours, list) and isinstance(theirs, list) and len(ours) == len(theirs):
        for index, (mine, other) in enumerate(zip(ours, theirs, strict=True)):
            yield from differences(mine, other, f"{path}[{index}]")
    elif ours != theirs:
        yield path, ours, theirs


@pytest.mark.parametrize("toggles", ["defaults", "everything on"])
def test_the_chart_lints_clean_with_helm(toggles):
    values = everything_on() if toggles == "everything on" else None
    report = helm.lint(str(CHART), values, strict=True, kube_version="v1.28.0")
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] > 1] == []


def test_the_generated_files_are_current():
    """values.schema.json, the README's table, the copies of deploy/'s files: `make chart`."""
    for path, content in generator().generated().items():
        assert path.read_text() == content, f"{path.name} is stale: run `make chart`"


def test_default_values_render_what_deploy_base_renders(chart, tmp_path):
    assert_same_objects(rendered(chart), kustomized(tmp_path, [], []))


@pytest.mark.parametrize("toggle", sorted(TOGGLES))
def test_each_toggle_renders_what_its_deploy_part_adds(chart, tmp_path, toggle):
    resources, components = TOGGLES[toggle]
    docs = rendered(chart, {toggle: on(toggle)})
    assert_same_objects(docs, kustomized(tmp_path, resources, components))


def test_the_network_policy_is_not_rendered_without_the_api_servers_cidrs(chart):
    with pytest.raises(Exception, match=r"networkPolicy\.apiServerCIDRs: name the API server"):
        rendered(chart, {"networkPolicy": {"enabled": True}})
    values = {"networkPolicy": {"enabled": True, "apiServerCIDRs": ["10.0.0.0/28", "fd00::/64"]}}
    [policy] = [d for d in rendered(chart, values) if d["kind"] == "NetworkPolicy"]
    kubernetes_validate.validate(policy, "1.30.0", strict=True)
    [admission] = [r for r in policy["spec"]["ingress"] if r["ports"][0]["port"] == 8443]
    assert admission["from"] == [
        {"ipBlock": {"cidr": "10.0.0.0/28"}},
        {"ipBlock": {"cidr": "fd00::/64"}},
    ]


def test_the_crds_are_deploys_shared_policyreport_crds(chart):
    """In crds/, which Helm installs with any values and never upgrades or deletes."""
    assert_same_objects(crds(chart), kustomize("deploy/policyreport-crds"))


def test_helm_refuses_a_config_value_the_guard_would_refuse(chart):
    values = {"config": {"policies": {"nodeName": {"mode": "enforced"}}}}
    with pytest.raises(helm.HelmValuesError) as refused:
        rendered(chart, values)
    assert "at '/config/policies/nodeName/mode': value must be one of" in str(refused.value)
    with pytest.raises(helm.HelmValuesError, match="additional properties 'modee' not allowed"):
        rendered(chart, {"config": {"policies": {"nodeName": {"modee": "audit"}}}})


def test_helm_refuses_a_mistyped_value_of_the_chart(chart):
    with pytest.raises(helm.HelmValuesError, match="additional properties 'replica' not allowed"):
        rendered(chart, {"replica": 3})
    with pytest.raises(helm.HelmValuesError, match="at '/audit/enabled': got string"):
        rendered(chart, {"audit": {"enabled": "yes"}})


@pytest.mark.parametrize("change", sorted(CONFIG_CHANGES))
def test_a_config_change_changes_the_config_map_alone(chart, change):
    """The reconciler makes the registrations, policies and certificates from the ConfigMap in
    the cluster: `helm upgrade` with a new config has nothing else to change, and no object of
    the chart is rendered for one config."""
    before = by_identity(rendered(chart))
    after = by_identity(rendered(chart, {"config": CONFIG_CHANGES[change]}))
    assert set(after) == set(before)
    changed = [key for key in before if before[key] != after[key]]
    assert changed == [("v1", "ConfigMap", NAMESPACE, "volcano-guard-config")]
    assert "WARNING" not in notes(chart, {"config": CONFIG_CHANGES[change]})


def test_the_chart_renders_no_object_the_reconciler_owns(chart):
    owned = {"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}
    owned |= {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    # The reconciler's limits are the installer's, never the reconciler's to write.
    kinds = {
        doc["kind"]
        for doc in rendered(chart, everything_on())
        if doc["metadata"]["name"] != "volcano-guard-reconciler-limits"
    }
    assert kinds & owned == set()
    secrets = [doc for doc in rendered(chart, everything_on()) if doc["kind"] == "Secret"]
    assert secrets == []


def reconciler_pod(docs: list[dict[str, Any]]) -> dict[str, Any]:
    [deployment] = [
        d
        for d in docs
        if d["metadata"]["name"] == "volcano-guard-reconciler" and d["kind"] == "Deployment"
    ]
    return dict(deployment["spec"]["template"]["spec"])


def reconciler_args(docs: list[dict[str, Any]]) -> list[str]:
    [container] = reconciler_pod(docs)["containers"]
    return list(container["args"])


def test_the_reconciler_takes_its_values(chart):
    default = reconciler_args(rendered(chart))
    assert default == ["reconcile", "--metrics-listen", "0.0.0.0:9093"]
    values = {"reconciler": {"replicas": 3, "gitops": True, "resources": {"limits": {"cpu": 2}}}}
    docs = rendered(chart, values)
    assert reconciler_args(docs) == [*default, "--gitops"]
    [replicas] = [
        d["spec"]["replicas"]
        for d in docs
        if d["kind"] == "Deployment" and d["metadata"]["name"] == "volcano-guard-reconciler"
    ]
    assert replicas == 3
    [container] = reconciler_pod(docs)["containers"]
    assert container["resources"]["limits"] == {"cpu": 2, "memory": "512Mi"}  # merged
    assert "volcano-guard manifests --config" in notes(chart, values)
    with_cert_manager = rendered(chart, {"certManager": {"enabled": True}})
    assert reconciler_args(with_cert_manager) == [*default, "--certificates=cert-manager"]


@pytest.mark.parametrize("toggles", ["defaults", "everything on"])
def test_the_uninstall_hook_runs_the_reconcilers_uninstall_before_helm_deletes(chart, toggles):
    """Helm does not own the reconciler's objects: a pre-delete Job pauses the reconciler and
    deletes them, under the reconciler's account and its Deployment's securityContext."""
    docs = rendered(chart, everything_on() if toggles == "everything on" else None)
    [job] = hooks(docs)
    assert (job["kind"], job["metadata"]["name"]) == ("Job", "volcano-guard-uninstall")
    assert job["metadata"]["annotations"] == {
        HOOK: "pre-delete",
        "helm.sh/hook-delete-policy": "before-hook-creation,hook-succeeded",
    }
    pod = job["spec"]["template"]["spec"]
    [container] = pod["containers"]
    command = container["command"] + container["args"]
    # Under cert-manager the reconciler has no right to the Secrets, so it leaves them.
    certificates = ["--certificates=cert-manager"] * (toggles == "everything on")
    assert command == ["volcano-guard", "reconcile", "--uninstall", *certificates]
    reconciler = reconciler_pod(docs)
    assert pod["serviceAccountName"] == reconciler["serviceAccountName"]
    assert pod["securityContext"] == reconciler["securityContext"]
    [running] = reconciler["containers"]
    assert container["securityContext"] == running["securityContext"]
    assert container["image"] == running["image"]
    assert container["env"] == running["env"][:1]  # POD_NAMESPACE: the guard's namespace


def granted(docs: list[dict[str, Any]], account: str) -> set[tuple[str, str, str, str]]:
    """(namespace or "" for the cluster, resource, name or "*", verb) the rendered RBAC grants
    the ServiceAccount `account`."""
    roles = {(d["kind"], d["metadata"]["name"]): d for d in docs if d["kind"].endswith("Role")}
    rights = set()
    for binding in (d for d in docs if d["kind"].endswith("RoleBinding")):
        if {"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE} not in binding[
            "subjects"
        ]:
            continue
        role = roles[(binding["roleRef"]["kind"], binding["roleRef"]["name"])]
        scope = binding["metadata"].get("namespace", "")
        for rule in role["rules"]:
            for resource in rule["resources"]:
                for name in rule.get("resourceNames", ["*"]):
                    rights |= {(scope, resource, name, verb) for verb in rule["verbs"]}
    return rights


def test_the_uninstall_hooks_account_may_pause_the_reconciler_and_delete_what_it_owns(chart):
    docs = rendered(chart)
    [job] = hooks(docs)
    rights = granted(docs, job["spec"]["template"]["spec"]["serviceAccountName"])
    assert (NAMESPACE, "configmaps", "volcano-guard-config", "patch") in rights
    for owned in OWNED:
        assert ("", PLURALS[owned.kind], owned.name, "delete") in rights, owned
        assert ("", PLURALS[owned.kind], owned.name, "get") in rights, owned


def test_volcanos_release_sets_the_allowed_binders_unless_the_config_does(chart):
    def binders(values: dict[str, Any]) -> list[str]:
        [config] = [d for d in rendered(chart, values) if d["metadata"]["name"].endswith("config")]
        guard = parse_config(config["data"]["config.yaml"]).policies.nodeName.bindingGuard
        return list(guard.allowedBinders)

    volcano = {"volcano": {"releaseName": "vc", "namespace": "batch"}}
    assert binders(volcano) == ["system:serviceaccount:batch:vc-scheduler"]
    explicit = ["system:serviceaccount:x:y"]
    config = {"policies": {"nodeName": {"bindingGuard": {"allowedBinders": explicit}}}}
    assert binders({**volcano, "config": config}) == explicit


def test_every_object_validates_against_the_kubernetes_schema(chart):
    values = {
        **everything_on(),
        "nodeSelector": {"pool": "system"},
        "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {"podAntiAffinity": {}},
        "podAnnotations": {"team": "platform"},
        "image": {"repository": "registry.example/volcano-guard", "pullPolicy": "Always"},
    }
    docs = rendered(chart, values) + crds(chart)
    for doc in docs:
        if doc["apiVersion"].split("/")[0] not in OPERATOR_GROUPS:
            kubernetes_validate.validate(doc, "1.30.0", strict=True)
    images = {c["image"] for doc in docs for c in containers(doc)}
    assert images == {"registry.example/volcano-guard:0.1.0"}


def containers(doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    spec = doc.get("spec", {})
    template = spec.get("jobTemplate", {}).get("spec", spec).get("template", {})
    yield from template.get("spec", {}).get("containers", [])


def namespace_references(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """(path, namespace) of each place an object names a namespace: a `namespace` field, a
    namespace selector's names, a Service's DNS names, cert-manager's inject-ca-from."""
    if isinstance(value, dict):
        if value.get("key") == "kubernetes.io/metadata.name":
            yield from ((f"{path}.values", v) for v in value.get("values", []))
        for key, item in value.items():
            if key == "namespace" and isinstance(item, str):
                yield f"{path}.namespace", item
            yield from namespace_references(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from namespace_references(item, f"{path}[{index}]")
    elif isinstance(value, str):
        service_name = re.fullmatch(r"volcano-guard\.([a-z0-9-]+)(\.svc.*)?", value)
        if service_name and re.search(r"(dnsNames|commonName)", path):
            yield path, service_name.group(1)
        if path.endswith("cert-manager.io/inject-ca-from"):
            yield path, value.split("/")[0]


def test_another_release_namespace_leaves_no_reference_to_volcano_guards(chart):
    docs = rendered(chart, everything_on(), namespace="guard-ops")
    references = [(d["kind"], *ref) for d in docs for ref in namespace_references(d)]
    assert {kind for kind, path, _ in references if not path.startswith(".metadata.namespace")} == {
        "Certificate",
        "ClusterRoleBinding",
        "RoleBinding",
    }
    assert [r for r in references if r[2] == NAMESPACE] == []
    for doc in docs:
        assert doc["metadata"].get("namespace", "guard-ops") == "guard-ops"


def test_kubectl_applies_a_render_and_an_upgrade_with_a_changed_value(chart, kubectl):
    namespace = "guard-ops"
    kubectl("create", "namespace", namespace)
    install = installed(rendered(chart, namespace=namespace))
    kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(install))
    values = {
        "replicas": 3,
        "config": {"policies": {"nodeName": {"managedNodeSelectors": ["volcano.sh/role:train"]}}},
    }
    upgrade = installed(rendered(chart, values, namespace=namespace))
    applied = kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(upgrade))
    changed = [line for line in applied.stdout.splitlines() if not line.endswith(" unchanged")]
    assert sorted(changed) == [
        "configmap/volcano-guard-config configured",
        "deployment.apps/volcano-guard configured",
        # A PDB's selector has patch strategy "replace": kubectl always says "configured".
        "poddisruptionbudget.policy/volcano-guard configured",
    ]
    got = kubectl("-n", namespace, "get", "configmap", "volcano-guard-config", "-o", "yaml")
    config = parse_config(yaml.safe_load(got.stdout)["data"]["config.yaml"])
    assert config.policies.nodeName.managedNodeSelectors == ("volcano.sh/role:train",)
    replicas = kubectl("-n", namespace, "get", "deployment", "volcano-guard", "-o", "yaml")
    assert yaml.safe_load(replicas.stdout)["spec"]["replicas"] == 3


def run_as_its_pod(
    container: dict[str, Any], namespace: str, kubeconfig: Path
) -> subprocess.CompletedProcess[str]:
    """A container of the chart's run here, as its pod would run it in namespace: the sandbox
    runs no kubelet. Its env's fieldRefs are the pod's namespace only (POD_NAMESPACE)."""
    scripts = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    program = shutil.which(container["command"][0], path=scripts)  # the guard's console script
    assert program, f"{container['command'][0]} is not installed"
    command = [program, *container["command"][1:]]
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "POD_NAMESPACE": namespace}
    return subprocess.run(
        [*command, *container.get("args", [])],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def utc_now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def play_the_job_controller(
    kubectl: Callable[..., Any], namespace: str, name: str, kubeconfig: Path
) -> tuple[threading.Thread, list[subprocess.CompletedProcess[str]]]:
    """A thread that waits for Job `name` (a hook Helm creates, then waits for), runs its pod's
    one container and writes the Job's status as the Job controller would: the sandbox has
    none, and Helm waits for a hook Job to complete."""
    ran: list[subprocess.CompletedProcess[str]] = []

    def play() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            got = kubectl("-n", namespace, "get", "job", name, "-o", "yaml", check=False)
            if got.returncode == 0:
                break
            time.sleep(0.2)
        else:
            return
        job = yaml.safe_load(got.stdout)
        [container] = job["spec"]["template"]["spec"]["containers"]
        started = utc_now()
        ran.append(run_as_its_pod(container, namespace, kubeconfig))
        outcome = "Complete" if ran[-1].returncode == 0 else "Failed"
        status = {
            "startTime": started,
            "conditions": [{"type": outcome, "status": "True", "lastTransitionTime": utc_now()}],
            **({"succeeded": 1, "completionTime": utc_now()} if ran[-1].returncode == 0 else {}),
            **({"failed": 1} if ran[-1].returncode else {}),
        }
        patch = yaml.safe_dump({"status": status})
        kubectl(
            "-n",
            namespace,
            "patch",
            "job",
            name,
            "--subresource=status",
            "--type=merge",
            "-p",
            patch,
        )

    thread = threading.Thread(target=play, daemon=True)
    thread.start()
    return thread, ran


SANDBOX_NAMESPACE = "guard-ops"
# Every kind of the guard's that is not in a namespace: what an uninstall must not leave.
CLUSTER_KINDS = "clusterrole,clusterrolebinding,mutatingwebhookconfiguration," + (
    "validatingwebhookconfiguration,validatingadmissionpolicy,validatingadmissionpolicybinding"
)


def helm_install(sandbox: Any) -> tuple[Any, Any]:
    """The chart installed by Helm into the sandbox (its namespace created): Helm's
    configuration for the sandbox, and the chart."""
    cluster = helm.Config(kube_apiserver=sandbox.url, namespace=SANDBOX_NAMESPACE)
    chart = helm.Chart.load(str(CHART))
    try:
        cluster.install(
            chart, "volcano-guard", {}, namespace=SANDBOX_NAMESPACE, create_namespace=True
        )
    except helm.HelmError as exc:
        if "server-side apply not available" in str(exc):
            pytest.skip("the sandbox does not take server-side apply yet, which Helm v4 uses")
        raise
    return cluster, chart


def test_helm_installs_and_upgrades_the_chart_in_the_sandbox(sandbox, kubectl):
    """Helm's own actions (server-side apply, its release Secrets): the upgrade changes the
    config in place."""
    cluster, chart = helm_install(sandbox)
    selectors = {"policies": {"nodeName": {"managedNodeSelectors": ["volcano.sh/role:train"]}}}
    cluster.upgrade(chart, "volcano-guard", {"config": selectors}, namespace=SANDBOX_NAMESPACE)
    got = kubectl("-n", SANDBOX_NAMESPACE, "get", "configmap", "volcano-guard-config", "-o", "yaml")
    config = parse_config(yaml.safe_load(got.stdout)["data"]["config.yaml"])
    assert config.policies.nodeName.managedNodeSelectors == ("volcano.sh/role:train",)


@pytest.mark.slow  # ~25 s: the reconciler's pass and its uninstall's pauses, Helm's hook wait
def test_helm_uninstall_runs_the_hook_that_deletes_what_the_reconciler_made(
    sandbox, kubectl, tmp_path
):
    """Helm does not own the registrations and policies: its pre-delete Job removes them, and
    the uninstall leaves the shared CRDs and nothing else of the guard outside its namespace."""
    kubeconfig = tmp_path / "kubeconfig"
    write_kubeconfig(kubeconfig, sandbox.url)
    cluster, chart = helm_install(sandbox)
    # One pass of the reconciler stands in for its Deployment (no kubelet here): it makes the
    # registrations and policies.
    [reconciler] = reconciler_pod(rendered(chart, namespace=SANDBOX_NAMESPACE))["containers"]
    once = {**reconciler, "args": ["reconcile", "--once"]}
    assert run_as_its_pod(once, SANDBOX_NAMESPACE, kubeconfig).returncode == 0
    made = kubectl("get", CLUSTER_KINDS, "-o", "name").stdout.split()
    assert "mutatingwebhookconfiguration.admissionregistration.k8s.io/volcano-guard" in made
    job, ran = play_the_job_controller(
        kubectl, SANDBOX_NAMESPACE, "volcano-guard-uninstall", kubeconfig
    )
    cluster.uninstall("volcano-guard", timeout=90)
    job.join(timeout=10)
    [uninstall] = ran
    assert uninstall.returncode == 0, uninstall.stderr
    left = kubectl("get", CLUSTER_KINDS, "-o", "name").stdout.split()
    assert [name for name in left if "volcano-guard" in name] == []
    jobs = kubectl("-n", SANDBOX_NAMESPACE, "get", "job", "-o", "name").stdout.split()
    assert jobs == []  # hook-succeeded: Helm deleted it
    crds = kubectl("get", "crd", "-o", "name").stdout.split()
    assert "customresourcedefinition.apiextensions.k8s.io/policyreports.wgpolicyk8s.io" in crds
