"""What sets Volcano's control plane off, found by the audit and `check`: a scheduler armed to
panic (no PANIC_ON_ERROR=false), pods bound to a node that does not exist, and control-plane
containers that exited non-zero lately. The scheduler is Volcano's own, from its installer files;
the cluster's objects are created with kubectl, as a user and a kubelet would."""

from __future__ import annotations

import datetime
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.processes import run_here
from tests.upstream import go_function, volcano_file, volcano_manifest
from volcano_guard.audit.findings import (
    CONTROL_PLANE_RESTARTS,
    FAIL,
    MISSING_NODES,
    NODE_ACCOUNTING,
    QUEUE_STATUS_SIDECAR,
    VOLCANO_ADVISORIES,
    WARN,
    ClusterState,
    Finding,
    findings,
    owning_workload,
)
from volcano_guard.base.kubeconfig import write_kubeconfig
from volcano_guard.base.volcano import (
    COMPONENT_IMAGES,
    PANIC_ON_ERROR,
    SCHEDULER_PANICS,
    armed_schedulers,
    component,
    image_name,
    pod_template_spec,
)
from volcano_guard.webhook.config import config_from_dict

NOW = datetime.datetime(2026, 11, 24, 12, 0, tzinfo=datetime.UTC)
CONFIG = config_from_dict({})
INSTALLERS = [
    ("installer/volcano-development.yaml", "v1.10.0"),
    ("installer/volcano-development.yaml", "v1.11.0"),
    ("installer/volcano-development.yaml", None),
    ("installer/volcano-agent-scheduler-development.yaml", None),
]


def scheduler_deployment(release: str | None = "v1.11.0") -> dict[str, Any]:
    return next(
        d
        for d in volcano_manifest("installer/volcano-development.yaml", release)
        if d["kind"] == "Deployment" and d["metadata"]["name"] == "volcano-scheduler"
    )


def scheduler_pod(
    deployment: dict[str, Any], name: str = "volcano-scheduler-6d4b9-x2x7q", **extra_env: str
) -> dict[str, Any]:
    """A pod of the Deployment as its ReplicaSet makes it (pod-template-hash 6d4b9)."""
    spec = json.loads(json.dumps(deployment["spec"]["template"]["spec"]))
    for container in spec["containers"]:
        container.setdefault("env", []).extend(
            {"name": key, "value": value} for key, value in extra_env.items()
        )
    labels = {**deployment["spec"]["template"]["metadata"]["labels"], "pod-template-hash": "6d4b9"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "spec": spec,
        "metadata": {
            "name": name,
            "namespace": "volcano-system",
            "labels": labels,
            "creationTimestamp": "2026-11-24T10:00:00Z",
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "volcano-scheduler-6d4b9",
                    "uid": "rs-uid",
                    "controller": True,
                }
            ],
        },
    }


# --- the facts, pinned to Volcano's source ----------------------------------------------------


@pytest.mark.parametrize("release", ["v1.10.0", "v1.11.0", None])
def test_the_scheduler_panics_on_a_failed_assertion_unless_panic_on_error_is_false(release):
    source = volcano_file("pkg/scheduler/util/assert/assert.go", release)
    assert f'EnvPanicOnError = "{PANIC_ON_ERROR}"' in source
    assert re.search(r"panicOnError\s*=\s*true", source)  # the default
    assert 'if env == "false" {\n\t\tpanicOnError = false' in go_function(source, "init")
    assert "panic(message)" in go_function(source, "Assert")


def test_resource_sub_asserts_so_a_negative_idle_is_a_panic():
    source = volcano_file("pkg/scheduler/api/resource_info.go")
    assert "assert.Assertf(rr.LessEqual(r, Zero)" in go_function(source, "Sub")


def test_the_component_images_are_the_ones_volcanos_helm_chart_names():
    values = yaml.safe_load(volcano_file("installer/helm/chart/volcano/values.yaml"))["basic"]
    named = {image_name(value) for key, value in values.items() if key.endswith("image_name")}
    assert named - {"vc-agent"} == set(COMPONENT_IMAGES)  # the agent runs on nodes, not the
    assert "vc-agent" in named  # control plane (colocation's DaemonSet)


@pytest.mark.parametrize(("path", "release"), INSTALLERS)
def test_volcanos_installers_ship_their_scheduler_armed_to_panic(path, release):
    armed = {
        (d["kind"], d["metadata"]["name"]): armed_schedulers(
            pod_template_spec(d), CONFIG.volcanoSchedulerNames
        )
        for d in volcano_manifest(path, release)
    }
    flagged = {key: containers for key, containers in armed.items() if containers}
    assert len(flagged) == 1, flagged
    (kind, name), containers = next(iter(flagged.items()))
    assert kind == "Deployment" and "scheduler" in name and len(containers) == 1


def test_check_warns_of_the_installers_scheduler_and_exits_0(tmp_path):
    manifest = tmp_path / "volcano.yaml"
    manifest.write_text(volcano_file("installer/volcano-development.yaml", "v1.11.0"))
    result = subprocess.run(
        [sys.executable, "-m", "volcano_guard.cli", "check", "-f", str(manifest)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    warned = [
        line
        for line in result.stdout.splitlines()
        if SCHEDULER_PANICS in line or PANIC_ON_ERROR in line
    ]
    assert len(warned) == 1 and "Deployment/volcano-scheduler: [warn]" in warned[0]


def test_a_scheduler_with_panic_on_error_false_or_found_by_its_name_flag():
    deployment = scheduler_deployment()
    assert (
        armed_schedulers(
            pod_template_spec(scheduler_pod(deployment, **{PANIC_ON_ERROR: "false"})), ["volcano"]
        )
        == []
    )
    assert (
        armed_schedulers(
            pod_template_spec(scheduler_pod(deployment, **{PANIC_ON_ERROR: "False"})), ["volcano"]
        )
        != []
    )  # Go compares with "false" exactly
    renamed = {
        "name": "s",
        "image": "mirror.example/ai/sched:1",
        "args": ["--scheduler-name=volcano"],
    }
    assert component(renamed, ["volcano"]) == "scheduler"
    assert component({**renamed, "args": ["--scheduler-name=other"]}, ["volcano"]) is None
    assert (
        component({"image": "mirror.example/ai/sched:1"}, ["volcano"], {"sched": "scheduler"})
        == "scheduler"
    )


# --- the findings -------------------------------------------------------------------------------


def node(name: str, cpu: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"}},
    }


def bound(name: str, node_name: str, cpu: str = "1") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "creationTimestamp": "2026-11-24T10:00:00Z",
        },
        "spec": {
            "schedulerName": "volcano",
            "nodeName": node_name,
            "containers": [
                {
                    "name": "c",
                    "image": "x",
                    "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}},
                }
            ],
        },
        "status": {"phase": "Running"},
    }


def others(found: list[Finding]) -> list[Finding]:
    """The findings besides the version advisories (tests/audit/test_advisories.py's)."""
    return [f for f in found if f.policy not in (VOLCANO_ADVISORIES, QUEUE_STATUS_SIDECAR)]


def test_an_armed_scheduler_is_a_warning_until_a_managed_node_is_over_committed():
    scheduler = scheduler_pod(scheduler_deployment())
    quiet = findings(
        ClusterState(nodes=[node("n1", "4")], pods=[scheduler, bound("p", "n1", "2")], now=NOW),
        CONFIG,
    )
    assert [(f.policy, f.kind, f.name, f.result) for f in others(quiet)] == [
        (SCHEDULER_PANICS, "Deployment", "volcano-scheduler", WARN)
    ]
    over = findings(
        ClusterState(nodes=[node("n1", "1")], pods=[scheduler, bound("p", "n1", "2")], now=NOW),
        CONFIG,
    )
    assert [(f.policy, f.result) for f in others(over)] == [
        (NODE_ACCOUNTING, FAIL),
        (SCHEDULER_PANICS, FAIL),
    ]
    assert "next scheduling session" in others(over)[1].message


def test_replicas_of_one_scheduler_are_one_finding_for_their_deployment():
    deployment = scheduler_deployment()
    pods = [scheduler_pod(deployment, name=f"volcano-scheduler-6d4b9-{n}") for n in "ab"]
    assert {(f.kind, f.name) for f in findings(ClusterState(pods=pods, now=NOW), CONFIG)} == {
        ("Deployment", "volcano-scheduler")
    }
    assert owning_workload({"metadata": {"name": "bare"}}) == ("Pod", "bare")


def test_a_pod_on_a_missing_node_is_reported_past_the_grace_period():
    pod = bound("stray", "gone")
    assert [(f.policy, f.name) for f in findings(ClusterState(pods=[pod], now=NOW), CONFIG)] == [
        (MISSING_NODES, "stray")
    ]
    young = {**pod, "metadata": {**pod["metadata"], "creationTimestamp": "2026-11-24T11:59:00Z"}}
    assert findings(ClusterState(pods=[young], now=NOW), CONFIG) == []  # within 2m
    done = {**pod, "status": {"phase": "Succeeded"}}
    assert findings(ClusterState(pods=[done], now=NOW), CONFIG) == []
    assert findings(ClusterState(nodes=[node("gone", "4")], pods=[pod], now=NOW), CONFIG) == []


def exited(pod: dict[str, Any], code: int, at: str, reason: str = "Error") -> dict[str, Any]:
    container = pod["spec"]["containers"][0]
    return {
        **pod,
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {
                    "name": container["name"],
                    "image": container["image"],
                    "restartCount": 3,
                    "lastState": {
                        "terminated": {"exitCode": code, "reason": reason, "finishedAt": at}
                    },
                }
            ],
        },
    }


@pytest.mark.parametrize(
    ("code", "at", "found"),
    [
        (2, "2026-11-24T11:30:00Z", True),
        (137, "2026-11-24T11:59:00Z", True),
        (0, "2026-11-24T11:30:00Z", False),
        (2, "2026-11-24T10:30:00Z", False),
    ],
    ids=["a panic 30 min ago", "OOMKilled", "a clean exit", "a panic 90 min ago"],
)
def test_control_plane_exits_within_the_restart_window_are_reported(code, at, found):
    scheduler = scheduler_pod(scheduler_deployment(), **{PANIC_ON_ERROR: "false"})
    restarts = [
        f
        for f in findings(ClusterState(pods=[exited(scheduler, code, at)], now=NOW), CONFIG)
        if f.policy == CONTROL_PLANE_RESTARTS
    ]
    assert bool(restarts) == found
    if code == 2:
        assert not found or "Go panic" in restarts[0].message
    user_pod = exited(bound("app", "n1"), 2, at)  # not Volcano's: not this finding
    assert not [
        f for f in findings(ClusterState(nodes=[node("n1", "4")], pods=[user_pod], now=NOW), CONFIG)
    ]


# --- against the sandbox, with kubectl ----------------------------------------------------------


def apply(run: Any, *objects: dict[str, Any]) -> None:
    run("apply", "-f", "-", stdin=yaml.safe_dump_all(objects))


def audit(url: str, directory: Path) -> subprocess.CompletedProcess[str]:
    kubeconfig, config = directory / "kubeconfig", directory / "config.yaml"
    write_kubeconfig(kubeconfig, url)
    config.write_text("audit: {missingNodeGracePeriod: 0s}\n")
    return run_here(
        "audit", "--kubeconfig", str(kubeconfig), "--config", str(config), "--output", "json"
    )


def test_created_with_kubectl_the_findings_come_and_go(sandbox, kubectl, tmp_path):
    apply(
        kubectl,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "volcano-system"}},
        node("n1", "4"),
    )
    scheduler = scheduler_pod(scheduler_deployment())
    del scheduler["metadata"]["creationTimestamp"]
    apply(kubectl, scheduler)
    result = audit(sandbox.url, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr  # a warning alone
    assert [
        (f["policy"], f["kind"], f["name"], f["result"])
        for f in json.loads(result.stdout)["findings"]
        if f["policy"] not in (VOLCANO_ADVISORIES, QUEUE_STATUS_SIDECAR)
    ] == [(SCHEDULER_PANICS, "Deployment", "volcano-scheduler", WARN)]

    # A pod bound around Volcano over-commits n1; one names a node that is gone; the
    # scheduler's kubelet reports that it panicked (exit 2) and restarted.
    stray = bound("stray", "gone-node")
    hog = {
        **bound("hog", "n1", "6"),
        "spec": {**bound("hog", "n1", "6")["spec"], "schedulerName": "default-scheduler"},
    }
    for pod in (stray, hog):
        del pod["metadata"]["creationTimestamp"]
        del pod["status"]
    apply(kubectl, stray, hog)
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    status = exited(scheduler, 2, now)["status"]
    kubectl(
        "patch",
        "pod",
        scheduler["metadata"]["name"],
        "-n",
        "volcano-system",
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": status}),
    )
    result = audit(sandbox.url, tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    found = {(f["policy"], f["name"], f["result"]) for f in json.loads(result.stdout)["findings"]}
    assert {
        (SCHEDULER_PANICS, "volcano-scheduler", FAIL),
        (NODE_ACCOUNTING, "n1", FAIL),
        (MISSING_NODES, "stray", FAIL),
        (CONTROL_PLANE_RESTARTS, scheduler["metadata"]["name"], FAIL),
    } <= found

    # Fixed: the scheduler re-created with PANIC_ON_ERROR=false, the strays deleted.
    kubectl("delete", "pod", "-n", "team-a", "stray", "hog")
    kubectl("delete", "pod", "-n", "volcano-system", scheduler["metadata"]["name"])
    apply(
        kubectl,
        {
            **scheduler_pod(scheduler_deployment(), **{PANIC_ON_ERROR: "false"}),
            "metadata": {**scheduler["metadata"]},
        },
    )
    clean = audit(sandbox.url, tmp_path)
    assert clean.returncode == 0, clean.stdout
    assert {f["policy"] for f in json.loads(clean.stdout)["findings"]} == {VOLCANO_ADVISORIES}
