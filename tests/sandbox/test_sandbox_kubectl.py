"""The sandbox driven by the installed kubectl, with validation left on (no --validate=false)."""

import json
import subprocess
import time

from tests.builders import container, job_template, volcano_cronjob
from tests.sandbox_fixtures import KUBECTL

QUEUE = """apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: research}
spec: {weight: 1}
"""
POD = """apiVersion: v1
kind: Pod
metadata: {name: p1, namespace: team-a}
spec:
  containers: [{name: c, image: busybox}]
"""


def as_json(result):
    return json.loads(result.stdout)


def test_create_get_and_list_across_groups(kubectl):
    assert (
        "queue.scheduling.volcano.sh/research created"
        in kubectl("create", "-f", "-", stdin=QUEUE).stdout
    )
    kubectl("create", "-f", "-", stdin=POD)
    assert as_json(kubectl("get", "queue", "research", "-o", "json"))["spec"] == {
        "weight": 1,
        "dequeueStrategy": "traverse",
    }
    listed = kubectl("get", "pods", "-A").stdout
    assert "team-a" in listed and "p1" in listed


def test_volcano_cronjobs_and_job_templates_are_served(kubectl):
    tasks = {"worker": [container("tf", requests={"cpu": "1", "memory": "1Gi"})]}
    for obj in (volcano_cronjob(tasks), job_template(tasks)):
        kubectl("create", "-f", "-", stdin=json.dumps(obj))
    cronjob = as_json(kubectl("get", "cronvj", "nightly", "-n", "team-a", "-o", "json"))
    assert cronjob["spec"]["jobTemplate"]["spec"]["tasks"][0]["name"] == "worker"
    assert "train" in kubectl("get", "jobtemplates.flow.volcano.sh", "-n", "team-a").stdout


def test_create_of_an_existing_object_fails_with_already_exists(kubectl):
    kubectl("create", "-f", "-", stdin=QUEUE)
    result = kubectl("create", "-f", "-", stdin=QUEUE, check=False)
    assert result.returncode != 0 and "AlreadyExists" in result.stderr


def test_strict_field_validation_refuses_unknown_fields(kubectl):
    bad = QUEUE + "bogus: 1\n"
    result = kubectl("create", "-f", "-", stdin=bad, check=False)
    assert result.returncode != 0
    assert 'strict decoding error: unknown field "bogus"' in result.stderr
    warned = kubectl("create", "--validate=warn", "-f", "-", stdin=bad)
    assert 'Warning: unknown field "bogus"' in warned.stderr


def test_replace_with_a_stale_object_conflicts_and_status_replace_changes_only_status(kubectl):
    kubectl("create", "-f", "-", stdin=QUEUE)
    stale = as_json(kubectl("get", "queue", "research", "-o", "json"))
    kubectl("patch", "queue", "research", "--type=merge", "-p", '{"spec":{"weight":2}}')
    stale["spec"]["weight"] = 3
    result = kubectl("replace", "-f", "-", stdin=json.dumps(stale), check=False)
    assert result.returncode != 0 and "the object has been modified" in result.stderr
    fresh = as_json(kubectl("get", "queue", "research", "-o", "json"))
    fresh["status"] = {"state": "Open"}
    fresh["spec"]["weight"] = 42
    kubectl("replace", "--subresource=status", "-f", "-", stdin=json.dumps(fresh))
    after = as_json(kubectl("get", "queue", "research", "-o", "json"))
    assert after["status"] == {"state": "Open"}
    assert after["spec"]["weight"] == 2


def test_merge_and_json_patch(kubectl):
    kubectl("create", "-f", "-", stdin=QUEUE)
    kubectl(
        "patch",
        "queue",
        "research",
        "--type=merge",
        "-p",
        '{"spec":{"weight":5,"reclaimable":true}}',
    )
    kubectl(
        "patch",
        "queue",
        "research",
        "--type=json",
        "-p",
        '[{"op":"remove","path":"/spec/reclaimable"}]',
    )
    assert as_json(kubectl("get", "queue", "research", "-o", "json"))["spec"] == {
        "weight": 5,
        "dequeueStrategy": "traverse",
    }


def test_label_and_selector(kubectl):
    kubectl("create", "-f", "-", stdin=POD)
    kubectl("label", "pod", "p1", "-n", "team-a", "tier=gold")
    kubectl("label", "queue", "default", "tier=gold", check=False)
    names = kubectl("get", "pods", "-n", "team-a", "-l", "tier=gold", "-o", "name").stdout
    assert names.split() == ["pod/p1"]
    assert (
        kubectl("get", "pods", "-n", "team-a", "-l", "tier=silver", "-o", "name").stdout.strip()
        == ""
    )


def test_delete(kubectl):
    kubectl("create", "-f", "-", stdin=POD)
    assert 'pod "p1" deleted' in kubectl("delete", "pod", "p1", "-n", "team-a").stdout
    result = kubectl("get", "pod", "p1", "-n", "team-a", check=False)
    assert result.returncode != 0 and "NotFound" in result.stderr


def test_get_watch_streams_changes(kubectl, sandbox):
    kubectl("create", "-f", "-", stdin=POD)
    watcher = subprocess.Popen(
        [
            KUBECTL,
            "--server",
            sandbox.url,
            "get",
            "pods",
            "-n",
            "team-a",
            "-w",
            "--output-watch-events",
            "--request-timeout=5s",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(1.0)
    kubectl("label", "pod", "p1", "-n", "team-a", "x=1")
    kubectl("delete", "pod", "p1", "-n", "team-a")
    time.sleep(0.5)
    watcher.terminate()
    out, _ = watcher.communicate(timeout=10)
    kinds = [line.split()[0] for line in out.splitlines()[1:] if line.strip()]
    assert kinds[:3] == ["ADDED", "MODIFIED", "DELETED"], out


def policy(variables, conditions):
    return json.dumps(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": "reapplied"},
            "spec": {
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["pods"],
                        }
                    ]
                },
                "matchConditions": [{"name": n, "expression": "true"} for n in conditions],
                "variables": [{"name": n, "expression": e} for n, e in variables],
                "validations": [{"expression": "variables.b == 2"}],
            },
        }
    )


def test_reapplying_a_policy_keeps_its_variables_and_their_order(kubectl):
    """kubectl apply sends a policy's variables and matchConditions as a strategic merge
    patch keyed by name, with $setElementOrder: only what changed, then the order."""
    kubectl("apply", "-f", "-", stdin=policy([("a", "1"), ("b", "variables.a + 1")], ["x"]))
    changed = [("z", "0"), ("a", "1"), ("b", "variables.a + variables.z + 1"), ("c", "3")]
    kubectl("apply", "-f", "-", stdin=policy(changed, ["x", "y"]))
    spec = as_json(kubectl("get", "validatingadmissionpolicy", "reapplied", "-o", "json"))["spec"]
    assert [(v["name"], v["expression"]) for v in spec["variables"]] == changed
    assert [c["name"] for c in spec["matchConditions"]] == ["x", "y"]
    kubectl("apply", "-f", "-", stdin=policy([("b", "2")], ["y"]))
    spec = as_json(kubectl("get", "validatingadmissionpolicy", "reapplied", "-o", "json"))["spec"]
    assert [(v["name"], v["expression"]) for v in spec["variables"]] == [("b", "2")]
    assert [c["name"] for c in spec["matchConditions"]] == ["y"]
