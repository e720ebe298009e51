"""Server-side apply, dry runs and immutable fields in the sandbox, driven by the real kubectl
as install rehearsals drive it (kubectl kustomize deploy/base | kubectl apply --server-side)."""

from __future__ import annotations

import copy
import json
import subprocess

import pytest
import yaml

from tests.conftest import REPO

CONFIG = """apiVersion: v1
kind: ConfigMap
metadata: {name: volcano-guard-config, namespace: volcano-guard}
data: {config.yaml: "x: 1\\n"}
"""

CONFIGMAP = {"apiVersion": "v1", "kind": "ConfigMap"}
JOB = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "once", "namespace": "team-a"},
    "spec": {
        "template": {
            "spec": {"restartPolicy": "Never", "containers": [{"name": "work", "image": "busybox"}]}
        }
    },
}
DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "web"},
    "spec": {
        "selector": {"matchLabels": {"app": "web"}},
        "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "web", "image": "nginx"}]},
        },
    },
}


@pytest.fixture(scope="module")
def base() -> str:
    result = subprocess.run(
        ["kubectl", "kustomize", str(REPO / "deploy" / "base")],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return result.stdout


def resource_version(kubectl) -> str:
    return json.loads(kubectl("get", "--raw", "/sandbox/stats").stdout)["resourceVersion"]


def managers(kubectl, *what: str) -> dict[str, str]:
    got = json.loads(kubectl(*what, "-o", "json", "--show-managed-fields").stdout)
    return {e["manager"]: e["operation"] for e in got["metadata"]["managedFields"]}


def test_server_side_apply_of_deploy_base_creates_then_changes_nothing(kubectl, base):
    applied = kubectl("apply", "--server-side", "-f", "-", stdin=base).stdout.splitlines()
    assert applied and all(line.endswith(" serverside-applied") for line in applied)
    before = resource_version(kubectl)
    kubectl("apply", "--server-side", "-f", "-", stdin=base)
    assert resource_version(kubectl) == before
    assert kubectl("diff", "--server-side", "-f", "-", stdin=base, check=False).returncode == 0
    what = ("-n", "volcano-guard", "get", "deployment", "volcano-guard")
    assert managers(kubectl, *what) == {"kubectl": "Apply"}


def test_a_changed_field_is_applied_and_a_dropped_one_removed(kubectl, base):
    kubectl("apply", "--server-side", "-f", "-", stdin=base)
    docs = list(yaml.safe_load_all(base))
    [deployment] = [
        d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "volcano-guard"
    ]
    deployment["spec"]["replicas"] = 5
    deployment["metadata"]["labels"].pop("app.kubernetes.io/part-of")
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    container["env"].append({"name": "EXTRA", "value": "1"})
    kubectl("apply", "--server-side", "-f", "-", stdin=yaml.safe_dump(deployment))
    got = json.loads(
        kubectl("-n", "volcano-guard", "get", "deployment", "volcano-guard", "-o", "json").stdout
    )
    assert got["spec"]["replicas"] == 5
    assert "app.kubernetes.io/part-of" not in got["metadata"]["labels"]
    [live] = got["spec"]["template"]["spec"]["containers"]
    assert live["env"] == container["env"]  # merged by name, in the applied order


def test_another_managers_field_conflicts_unless_forced(kubectl, base):
    kubectl("apply", "--server-side", "-f", "-", stdin=base)
    other = ("apply", "--server-side", "--field-manager=other", "-f", "-")
    refused = kubectl(*other, stdin=CONFIG, check=False)
    assert refused.returncode == 1
    assert (
        'Apply failed with 1 conflict: conflict with "kubectl": .data.config.yaml' in refused.stderr
    )
    kubectl(*other, "--force-conflicts", stdin=CONFIG)
    what = ("-n", "volcano-guard", "get", "configmap", "volcano-guard-config")
    assert json.loads(kubectl(*what, "-o", "json").stdout)["data"] == {"config.yaml": "x: 1\n"}
    # kubectl keeps the labels it applied; the data is other's now, and its re-apply conflicts
    assert managers(kubectl, *what) == {"kubectl": "Apply", "other": "Apply"}
    again = kubectl("apply", "--server-side", "-f", "-", stdin=base, check=False)
    assert 'conflict with "other": .data.config.yaml' in again.stderr


def test_an_update_by_another_manager_conflicts_with_its_time_and_version(kubectl, base):
    kubectl("apply", "--server-side", "-f", "-", stdin=base)
    patch = '{"data":{"config.yaml":"y: 2\\n"}}'
    kubectl("-n", "volcano-guard", "patch", "configmap", "volcano-guard-config", "-p", patch)
    refused = kubectl("apply", "--server-side", "-f", "-", stdin=base, check=False)
    assert 'conflict with "kubectl-patch" using v1 at ' in refused.stderr


def test_kubectl_diff_exits_0_without_a_change_and_1_with_one(kubectl, base):
    kubectl("apply", "-f", "-", stdin=base)
    before = resource_version(kubectl)
    assert kubectl("diff", "-f", "-", stdin=base, check=False).returncode == 0
    changed = base.replace("replicas: 2", "replicas: 4")
    assert changed != base
    result = kubectl("diff", "-f", "-", stdin=changed, check=False)
    assert result.returncode == 1 and "+  replicas: 4" in result.stdout
    server_side = kubectl("diff", "--server-side", "-f", "-", stdin=changed, check=False)
    assert server_side.returncode == 1
    kubectl("apply", "--dry-run=server", "-f", "-", stdin=changed)
    assert resource_version(kubectl) == before  # nothing stored


def test_a_dry_run_create_and_delete_store_nothing(kubectl):
    created = kubectl("create", "namespace", "trial", "--dry-run=server", "-o", "json")
    assert json.loads(created.stdout)["metadata"]["name"] == "trial"
    assert kubectl("get", "namespace", "trial", check=False).returncode == 1
    kubectl("delete", "namespace", "team-a", "--dry-run=server")
    kubectl("get", "namespace", "team-a")


def test_a_changed_job_template_is_refused_as_immutable(kubectl):
    kubectl("apply", "-f", "-", stdin=json.dumps(JOB))
    changed = copy.deepcopy(JOB)
    changed["spec"]["template"]["spec"]["containers"][0]["image"] = "busybox:2"
    result = kubectl("apply", "-f", "-", stdin=json.dumps(changed), check=False)
    assert result.returncode == 1
    assert 'The Job "once" is invalid: spec.template: Invalid value: ' in result.stderr
    assert "field is immutable" in result.stderr


def test_an_immutable_configmaps_data_and_a_deployments_selector_are_refused(kubectl):
    frozen = {"metadata": {"name": "frozen"}, "data": {"a": "1"}, "immutable": True}
    kubectl("-n", "team-a", "create", "-f", "-", stdin=json.dumps(CONFIGMAP | frozen))
    result = kubectl(
        "-n", "team-a", "patch", "configmap", "frozen", "-p", '{"data":{"a":"2"}}', check=False
    )
    assert (
        'The ConfigMap "frozen" is invalid: data: Forbidden: field is immutable when '
        "`immutable` is set" in result.stderr
    )
    kubectl("-n", "team-a", "create", "-f", "-", stdin=json.dumps(DEPLOYMENT))
    result = kubectl(
        "-n",
        "team-a",
        "patch",
        "deployment",
        "web",
        "-p",
        '{"spec":{"selector":{"matchLabels":{"app":"other"}}}}',
        check=False,
    )
    assert "spec.selector: Invalid value: v1.LabelSelector{...}: field is immutable" in (
        result.stderr
    )
