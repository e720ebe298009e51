"""`volcano-guard audit` against the sandbox, with real objects created through its API: each
finding kind appears for a planted case and disappears when it is fixed; the exit code says
clean (0), findings (1) or an unreadable cluster (2)."""

from __future__ import annotations

import datetime
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.processes import run_here
from tests.webhook.queue_cases import queue, res
from volcano_guard.audit.findings import (
    EXEMPTION_CLAIMS,
    GENERATION_IDS,
    NODE_ACCOUNTING,
    ORPHANED_PODS,
    ClusterState,
    findings,
)
from volcano_guard.base.kubeconfig import write_kubeconfig
from volcano_guard.webhook.config import ConfigError, config_from_dict

NOW = datetime.datetime(2026, 11, 24, 12, 0, tzinfo=datetime.UTC)
LONG_AGO = "2026-11-24T11:00:00Z"


def node(name: str, cpu: str = "4", memory: str = "8Gi", **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110"}},
    }


def pod(
    name: str, node_name: str = "", scheduler: str = "volcano", group: str = "", **requests: str
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": "team-a"}
    if group:
        metadata["annotations"] = {"scheduling.k8s.io/group-name": group}
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [{"name": "c", "image": "busybox", "resources": {"requests": requests}}],
    }
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def podgroup(name: str, stamped: bool = True) -> dict[str, Any]:
    annotations = {"volcano-guard.io/generation-id": "0190-gen"} if stamped else {}
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "team-a", "annotations": annotations},
        "spec": {"minMember": 1},
    }


OK = {"cpu": "1", "memory": "1Gi"}


def audit(url: str, directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    kubeconfig = directory / "kubeconfig"
    write_kubeconfig(kubeconfig, url)
    return run_here("audit", "--kubeconfig", str(kubeconfig), *args)


def create(core: Any, custom: Any, *objects: dict[str, Any]) -> None:
    """Through the API, as a user (or Volcano) would have created them."""
    for obj in objects:
        if obj["kind"] == "Node":
            core.create_node(obj)
        elif obj["kind"] == "Pod":
            core.create_namespaced_pod("team-a", obj)
        else:
            custom.create_namespaced_custom_object(
                "scheduling.volcano.sh", "v1beta1", "team-a", "podgroups", obj
            )


def test_each_planted_case_is_found_and_gone_once_fixed(sandbox, core, custom, tmp_path):
    create(
        core,
        custom,
        node("gpu-1", cpu="4"),
        pod("big", "gpu-1", **{"cpu": "3", "memory": "1Gi"}),
        pod("bigger", "gpu-1", **{"cpu": "2", "memory": "1Gi"}),
        pod("no-requests"),
        pod("pinned", "gpu-1", scheduler="default-scheduler", **OK),
        pod("orphan", group="gone", **OK),
        podgroup("unstamped", stamped=False),
    )
    config = tmp_path / "config.yaml"
    config.write_text("audit: {orphanGracePeriod: 0s}\n")
    result = audit(sandbox.url, tmp_path, "--config", str(config), "--output", "json")
    assert result.returncode == 1, result.stderr
    found = {(f["policy"], f["name"]) for f in json.loads(result.stdout)["findings"]}
    assert found == {
        (NODE_ACCOUNTING, "gpu-1"),
        ("resourceRequests", "no-requests"),
        ("nodeName", "pinned"),
        (ORPHANED_PODS, "orphan"),
        (GENERATION_IDS, "unstamped"),
    }
    for name in ("bigger", "no-requests", "pinned"):
        core.delete_namespaced_pod(name, "team-a")
    create(core, custom, podgroup("gone"))  # the orphan's PodGroup is back
    custom.delete_namespaced_custom_object(
        "scheduling.volcano.sh", "v1beta1", "team-a", "podgroups", "unstamped"
    )
    clean = audit(sandbox.url, tmp_path, "--config", str(config))
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert clean.stdout.strip().endswith("0 findings")


def test_a_pinned_pod_is_exempt_only_when_the_cluster_vouches_for_its_claim(
    sandbox, core, custom, tmp_path, api
):
    from kubernetes import client

    gpu = core.create_node(node("gpu-1"))
    daemonset = client.AppsV1Api(api).create_namespaced_daemon_set(
        "team-a",
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "agent"},
            "spec": {
                "selector": {"matchLabels": {"a": "b"}},
                "template": {
                    "metadata": {"labels": {"a": "b"}},
                    "spec": {"containers": [{"name": "c", "image": "x"}]},
                },
            },
        },
    )

    def pinned(name: str, **metadata: Any) -> dict[str, Any]:
        obj = pod(name, "gpu-1", scheduler="default-scheduler", **OK)
        obj["metadata"].update(metadata)
        return obj

    def owner(kind: str, name: str, uid: str) -> list[dict[str, Any]]:
        return [
            {
                "apiVersion": "apps/v1" if kind == "DaemonSet" else "v1",
                "kind": kind,
                "name": name,
                "uid": uid,
                "controller": True,
            }
        ]

    mirror = {"kubernetes.io/config.mirror": "hash"}
    create(
        core,
        custom,
        pinned("agent-x", ownerReferences=owner("DaemonSet", "agent", daemonset.metadata.uid)),
        pinned("forged-ds", ownerReferences=owner("DaemonSet", "gone", "u-gone")),
        pinned(
            "static", annotations=mirror, ownerReferences=owner("Node", "gpu-1", gpu.metadata.uid)
        ),
        pinned("forged-mirror", annotations=mirror),
    )
    result = audit(sandbox.url, tmp_path, "--output", "json")
    assert result.returncode == 1, result.stderr
    found = {(f["policy"], f["name"]) for f in json.loads(result.stdout)["findings"]}
    assert found == {
        ("nodeName", "forged-ds"),
        (EXEMPTION_CLAIMS, "forged-ds"),
        ("nodeName", "forged-mirror"),
        (EXEMPTION_CLAIMS, "forged-mirror"),
    }


def test_text_output_is_a_line_a_finding_like_check(sandbox, core, custom, tmp_path):
    create(core, custom, pod("no-requests"))
    result = audit(sandbox.url, tmp_path)
    assert result.returncode == 1
    *lines, summary = result.stdout.strip().splitlines()
    assert [line.split(" has ")[0] for line in lines] == [
        'Pod team-a/no-requests: resourceRequests: Pod "team-a/no-requests": container "c"'
    ] * 2
    assert "no cpu request" in lines[0] and "no memory request" in lines[1]
    assert summary.endswith("2 findings")


def test_an_unreadable_cluster_exits_2(tmp_path):
    result = audit("http://127.0.0.1:1", tmp_path)
    assert result.returncode == 2
    assert "cannot read the cluster: listing nodes" in result.stderr


def test_audit_of_a_missing_namespace_says_so_and_exits_2(sandbox, tmp_path):
    """Listing in a namespace that does not exist answers empty lists: without asking for the
    namespace itself, a typo read as a clean audit."""
    result = audit(sandbox.url, tmp_path, "--namespace", "team-b")
    assert result.returncode == 2, result.stdout
    assert result.stderr.splitlines() == [
        "volcano-guard audit: --namespace team-b: namespace not found"
    ]
    assert result.stdout == ""


def test_audit_of_an_empty_namespace_that_exists_is_clean(sandbox, core, tmp_path):
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "quiet"}})
    create(core, None, pod("no-requests"))  # in team-a: not audited
    result = audit(sandbox.url, tmp_path, "--namespace", "quiet")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("0 findings")


def test_a_user_who_may_not_get_the_namespace_is_audited_on_what_the_lists_say(
    sandbox, core, tmp_path
):
    from volcano_guard_sandbox.apiserver.faults import FaultRule

    create(core, None, pod("no-requests"))
    sandbox.set_faults(
        FaultRule(
            verbs=frozenset({"get"}),
            resources=frozenset({"namespaces"}),
            error_rate=1.0,
            error_code=403,
        )
    )
    result = audit(sandbox.url, tmp_path, "--namespace", "team-a")
    assert sandbox.stats()["injected"] == {"403": 1}  # the get was refused
    assert result.returncode == 1, result.stderr
    assert result.stdout.strip().endswith("2 findings")


def test_orphans_younger_than_the_grace_period_are_not_reported():
    config = config_from_dict({"audit": {"orphanGracePeriod": "10m"}})
    young = pod("young", group="gone", **OK)
    old = pod("old", group="gone", **OK)
    young["metadata"]["creationTimestamp"] = (NOW - datetime.timedelta(minutes=2)).strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )
    old["metadata"]["creationTimestamp"] = LONG_AGO
    state = ClusterState(pods=[young, old], now=NOW)
    assert [f.name for f in findings(state, config) if f.policy == ORPHANED_PODS] == ["old"]


def test_nodes_outside_the_managed_selectors_are_not_accounted():
    config = config_from_dict(
        {"policies": {"nodeName": {"managedNodeSelectors": ["volcano.sh/role:train"]}}}
    )
    state = ClusterState(
        nodes=[node("web-1", cpu="1"), node("gpu-1", cpu="1", **{"volcano.sh/role": "train"})],
        pods=[pod("a", "web-1", **{"cpu": "2"}), pod("b", "gpu-1", **{"cpu": "2"})],
        now=NOW,
    )
    assert [f.name for f in findings(state, config) if f.policy == NODE_ACCOUNTING] == ["gpu-1"]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=10,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=json_values, metadata=json_values, status=json_values)
def test_objects_of_odd_shape_never_crash_the_audit(spec, metadata, status):
    odd = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": status}
    state = ClusterState(
        nodes=[node("n1"), {"metadata": metadata, "status": status}],
        pods=[odd],
        podgroups=[{"metadata": metadata}],
        workloads=[{**odd, "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job"}],
        now=NOW,
    )
    for finding in findings(state, config_from_dict({})):
        assert finding.message


@pytest.mark.parametrize(
    ("audit_config", "message"),
    [
        ({"orphanGracePeriod": "soon"}, "audit.orphanGracePeriod: 'soon' is not a duration"),
        ({"maxResultsPerReport": 0}, "audit.maxResultsPerReport: expected a positive integer"),
        ({"orphanGrace": "5m"}, "audit.orphanGrace: unknown key"),
    ],
)
def test_bad_audit_settings_are_refused_naming_the_key(audit_config, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        config_from_dict({"audit": audit_config})


def test_volcano_workloads_are_judged_by_the_webhooks_own_policy():
    task = {
        "name": "worker",
        "replicas": 2,
        "template": {
            "spec": {
                "containers": [
                    {"name": "tf", "image": "tf", "resources": {"requests": {"cpu": "1"}}}
                ]
            }
        },
    }
    spec = {"schedulerName": "volcano", "tasks": [task]}
    job = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "mnist", "namespace": "team-a"},
        "spec": spec,
    }
    cronjob = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "CronJob",
        "metadata": {"name": "nightly", "namespace": "team-a"},
        "spec": {"schedule": "0 2 * * *", "jobTemplate": {"spec": spec}},
    }
    template = {
        "apiVersion": "flow.volcano.sh/v1alpha1",
        "kind": "JobTemplate",
        "metadata": {"name": "train", "namespace": "team-a"},
        "spec": spec,
    }
    found = findings(
        ClusterState(workloads=[job, cronjob, template], now=NOW), config_from_dict({})
    )
    assert [(f.kind, f.name, f.policy) for f in found] == [
        ("CronJob", "nightly", "resourceRequests"),
        ("Job", "mnist", "resourceRequests"),
        ("JobTemplate", "train", "resourceRequests"),
    ]
    assert all('task "worker": container "tf" has no memory request' in f.message for f in found)


def test_existing_queues_that_break_the_queue_policies_are_findings():
    queues = [
        queue("team", "root", res("4")),
        queue("greedy", "team", res("8")),
        queue("loop-a", "loop-b"),
        queue("loop-b", "loop-a"),
        queue("backwards", "", res("1"), res("2")),
        queue("fine", "team", res("2")),
    ]
    found = findings(ClusterState(queues=queues, now=NOW), config_from_dict({}))
    assert [(f.kind, f.name, f.policy) for f in found] == [
        ("Queue", "backwards", "queueResources"),
        ("Queue", "greedy", "queues"),
        ("Queue", "loop-a", "queues"),
        ("Queue", "loop-b", "queues"),
        ("Queue", "team", "queues"),  # below its child's capability: both ends are told
    ]
    assert 'capability cpu 8 is more than the capability cpu 4 of its ancestor queue "team"' in (
        found[1].message
    )
