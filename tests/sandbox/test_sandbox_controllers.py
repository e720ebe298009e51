"""Where the sandbox runs no controller, kubectl still ends at once: the sandbox plays the
Deployment controller's status, the Job controller's pod (which never runs: its logs say so in
one line) and the namespace controller's deletion, driven by the real kubectl."""

from __future__ import annotations

import json
import time

import pytest

from tests.conftest import REPO
from tests.sandbox.test_sandbox_apply import DEPLOYMENT, JOB

BASE = str(REPO / "deploy" / "base")


def timed(kubectl, *args: str, check: bool = True):
    started = time.monotonic()
    result = kubectl(*args, check=check)
    return result, time.monotonic() - started


def test_rollout_status_of_a_deployment_ends_at_once_rolled_out(kubectl):
    kubectl("-n", "team-a", "create", "-f", "-", stdin=json.dumps(DEPLOYMENT))
    kubectl("-n", "team-a", "patch", "deployment", "web", "-p", '{"spec":{"replicas":3}}')
    result, took = timed(
        kubectl, "-n", "team-a", "rollout", "status", "deploy/web", "--timeout=20s"
    )
    assert result.stdout.strip() == 'deployment "web" successfully rolled out'
    assert took < 10
    got = json.loads(kubectl("-n", "team-a", "get", "deploy", "web", "-o", "json").stdout)
    assert got["status"]["availableReplicas"] == 3
    assert got["status"]["observedGeneration"] == got["metadata"]["generation"]


def test_logs_of_a_job_end_at_once_saying_the_sandbox_runs_no_containers(kubectl):
    kubectl("create", "-f", "-", stdin=json.dumps(JOB))
    result, took = timed(kubectl, "-n", "team-a", "logs", "job/once", check=False)
    assert result.returncode == 1 and took < 10
    [line] = result.stderr.splitlines()
    assert line.startswith('Error from server (BadRequest): container "work" in pod "once-')
    assert line.endswith("is waiting to start: the sandbox runs no containers")


def test_a_jobs_pod_carries_its_selector_and_goes_with_it(kubectl):
    kubectl("create", "-f", "-", stdin=json.dumps(JOB))
    job = json.loads(kubectl("-n", "team-a", "get", "job", "once", "-o", "json").stdout)
    uid = job["metadata"]["uid"]
    assert job["spec"]["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    selector = f"batch.kubernetes.io/controller-uid={uid}"
    pods = kubectl("-n", "team-a", "get", "pods", "-l", selector, "-o", "name").stdout.split()
    assert len(pods) == 1 and pods[0].startswith("pod/once-")
    kubectl("-n", "team-a", "delete", "job", "once")
    assert kubectl("-n", "team-a", "get", "pods", "-l", selector, "-o", "name").stdout == ""


@pytest.mark.slow  # the whole install deleted through kubectl, 4 s
def test_delete_k_of_deploy_base_exits_0_and_leaves_nothing(kubectl):
    kubectl("apply", "-k", BASE)
    result = kubectl("delete", "-k", BASE, check=False)
    assert result.returncode == 0, result.stderr
    assert kubectl("get", "namespace", "volcano-guard", check=False).returncode == 1
    left = kubectl(
        "get",
        "pods,configmaps,serviceaccounts,deployments,jobs",
        "-n",
        "volcano-guard",
        "-o",
        "name",
    )
    assert left.stdout == ""


def test_a_terminating_namespace_refuses_new_content_then_its_objects_are_gone(kubectl):
    kubectl("create", "namespace", "doomed")
    kubectl("-n", "doomed", "create", "-f", "-", stdin=json.dumps(DEPLOYMENT))
    kubectl("delete", "namespace", "doomed", "--wait=false")
    phase = kubectl("get", "namespace", "doomed", "-o", "jsonpath={.status.phase}").stdout
    assert phase == "Terminating"
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "late"}}
    refused = kubectl("-n", "doomed", "create", "-f", "-", stdin=json.dumps(configmap), check=False)
    assert (
        "unable to create new content in namespace doomed because it is being terminated"
        in refused.stderr
    )
    kubectl("wait", "--for=delete", "namespace/doomed", "--timeout=20s")
    gone = kubectl("-n", "doomed", "delete", "deployment", "web", check=False)
    assert 'deployments.apps "web" not found' in gone.stderr
