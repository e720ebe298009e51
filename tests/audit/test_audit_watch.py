"""`volcano-guard audit --watch` as a process against the sandbox: ready once it has listed
everything, a pod created or deleted through the API reflected in its metrics within moments,
a page promtool accepts."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.promtool import check_metrics
from volcano_guard.base.kubeconfig import write_kubeconfig
from volcano_guard_sandbox.processes import free_port

pytestmark = pytest.mark.slow  # audit processes against a sandbox, a lease running out


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return str(response.read().decode())


def sample(page: str, name: str, **labels: str) -> float | None:
    wanted = ",".join(f'{key}="{value}"' for key, value in sorted(labels.items()))
    pattern = (
        rf"^volcano_guard_{name}{{{re.escape(wanted)}}} (\S+)$"
        if labels
        else (rf"^volcano_guard_{name} (\S+)$")
    )
    match = re.search(pattern, page, re.M)
    return float(match.group(1)) if match else None


def wait_for(port: int, check: Any, timeout: float = 10.0) -> float:
    """Seconds until check(page) holds."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        try:
            if check(scrape(port)):
                return time.monotonic() - started
        except OSError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout}s; last page:\n{scrape(port)}")


def start_audit(url: str, directory: Path) -> tuple[subprocess.Popen[bytes], int]:
    """An audit --watch process (lease in team-a, 3 s); its metrics port once it is ready."""
    kubeconfig = directory / "kubeconfig"
    write_kubeconfig(kubeconfig, url)
    config = directory / "config.yaml"
    config.write_text("audit: {orphanGracePeriod: 1s}\n")
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "volcano_guard.cli",
            "audit",
            "--watch",
            "--kubeconfig",
            str(kubeconfig),
            "--config",
            str(config),
            "--metrics-listen",
            f"127.0.0.1:{port}",
            "--lease-namespace",
            "team-a",
            "--lease-duration",
            "3",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1)
            return proc, port
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise AssertionError("the audit never became ready")


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    assert proc.wait(10) == 0


@pytest.fixture
def watching(sandbox, tmp_path) -> Iterator[int]:
    sandbox.seed([NODE])
    proc, port = start_audit(sandbox.url, tmp_path)
    try:
        wait_for(port, lambda page: sample(page, "audit_leader") == 1)
        yield port
    finally:
        stop(proc)


NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": "gpu-1"},
    "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "10"}},
}


def big_pod(name: str, cpu: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": "gpu-1",
            "schedulerName": "volcano",
            "containers": [
                {
                    "name": "c",
                    "image": "x",
                    "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}},
                }
            ],
        },
    }


def test_a_pod_event_reaches_the_metrics_and_the_page_passes_promtool(watching, core):
    page = scrape(watching)
    assert sample(page, "overcommitted_nodes", resource="cpu") == 0
    assert sample(page, "audit_last_evaluation_timestamp_seconds") > 0
    core.create_namespaced_pod("team-a", big_pod("hog", "5"))
    took = wait_for(watching, lambda page: sample(page, "overcommitted_nodes", resource="cpu") == 1)
    assert took < 5
    page = scrape(watching)
    assert sample(page, "node_request_ratio", node="gpu-1", resource="cpu") == 1.25
    assert sample(page, "audit_violations", policy="nodeAccounting", namespace="") == 1
    linted = check_metrics(page)
    assert linted.returncode == 0, linted.stdout + linted.stderr
    core.delete_namespaced_pod("hog", "team-a")
    wait_for(watching, lambda page: sample(page, "overcommitted_nodes", resource="cpu") == 0)


def test_an_orphan_is_counted_once_its_podgroup_is_gone(watching, core, custom):
    podgroup = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "pg", "annotations": {"volcano-guard.io/generation-id": "0190"}},
        "spec": {"minMember": 1},
    }
    custom.create_namespaced_custom_object(
        "scheduling.volcano.sh", "v1beta1", "team-a", "podgroups", podgroup
    )
    pod = big_pod("member", "1")
    pod["metadata"]["annotations"] = {"scheduling.k8s.io/group-name": "pg"}
    core.create_namespaced_pod("team-a", pod)
    time.sleep(1.5)  # older than the grace period: only the missing PodGroup is lacking
    assert sample(scrape(watching), "orphaned_pods", namespace="team-a") is None
    custom.delete_namespaced_custom_object(
        "scheduling.volcano.sh", "v1beta1", "team-a", "podgroups", "pg"
    )
    wait_for(watching, lambda page: sample(page, "orphaned_pods", namespace="team-a") == 1)


def test_node_updates_are_counted_by_field_and_annotation_key_with_kubectl(watching, kubectl):
    for n in range(5):  # as a device plugin rewriting its annotation
        kubectl("annotate", "node", "gpu-1", "--overwrite", f"vendor.example/devices=gpu-{n}")
    kubectl("label", "node", "gpu-1", "pool=volcano")
    wait_for(
        watching, lambda page: sample(page, "audit_node_updates_total", field="labels") == 1
    )  # the last one
    page = scrape(watching)
    assert sample(page, "audit_node_updates_total", field="annotations") == 5
    assert sample(page, "audit_node_updates_total", field="allocatable") == 0
    assert sample(page, "audit_node_annotation_updates_total", key="vendor.example/devices") == 5
    rate = sample(page, "audit_node_update_rate", node="gpu-1")
    assert rate is not None and 5 < rate <= 6  # six updates in a minute's average
    assert sample(page, "audit_churning_nodes") == 0  # not yet above 6 a minute
    linted = check_metrics(page)
    assert linted.returncode == 0, linted.stdout + linted.stderr


def test_two_replicas_one_reports_and_the_other_takes_over(sandbox, custom, tmp_path):
    sandbox.seed([NODE])
    for replica in ("a", "b"):
        (tmp_path / replica).mkdir()
    first, first_port = start_audit(sandbox.url, tmp_path / "a")
    second, second_port = start_audit(sandbox.url, tmp_path / "b")
    try:
        wait_for(first_port, lambda page: sample(page, "audit_leader") == 1)
        standby = scrape(second_port)
        assert sample(standby, "audit_leader") == 0
        assert sample(standby, "overcommitted_nodes", resource="cpu") is None  # one exporter
        report = custom.get_cluster_custom_object(
            "wgpolicyk8s.io", "v1alpha2", "clusterpolicyreports", "volcano-guard"
        )
        assert report["summary"]["fail"] == 0
        stop(first)
        took = wait_for(second_port, lambda page: sample(page, "audit_leader") == 1, timeout=15)
        assert took < 2  # released on SIGTERM: taken at the next try, 0.6 s apart
        assert sample(scrape(second_port), "overcommitted_nodes", resource="cpu") == 0
    finally:
        for proc in (first, second):
            if proc.poll() is None:
                stop(proc)


def test_a_lease_namespace_that_does_not_exist_is_said_once_and_in_readyz(sandbox, tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    write_kubeconfig(kubeconfig, sandbox.url)
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "volcano_guard.cli",
            "audit",
            "--watch",
            "--kubeconfig",
            str(kubeconfig),
            "--metrics-listen",
            f"127.0.0.1:{port}",
            "--lease-namespace",
            "nowhere",
            "--lease-duration",
            "3",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    said = (
        "lease nowhere/volcano-guard-audit: the namespace nowhere does not exist; create "
        "it or choose another with --lease-namespace"
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1)
            except urllib.error.HTTPError as answer:
                body = answer.read().decode()
                if answer.code == 503 and said in body:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "readyz never said why"
            time.sleep(0.1)
        time.sleep(2)  # a few more tries (0.6 s apart): still said once
    finally:
        proc.terminate()
        _, stderr = proc.communicate(timeout=10)
    assert [line for line in stderr.splitlines() if said in line] == [
        line for line in stderr.splitlines() if "lease" in line
    ]
    assert sum(said in line for line in stderr.splitlines()) == 1
    assert "Traceback" not in stderr


def test_a_queue_guaranteeing_past_the_nodes_reaches_the_metrics_and_the_report(watching, custom):
    queue = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": "research"},
        "spec": {"guarantee": {"resource": {"cpu": "6"}}},
    }
    custom.create_cluster_custom_object("scheduling.volcano.sh", "v1beta1", "queues", queue)
    wait_for(watching, lambda page: sample(page, "queue_guarantee_ratio", resource="cpu") == 1.5)
    page = scrape(watching)
    assert sample(page, "audit_violations", policy="queueGuarantees", namespace="") == 1
    linted = check_metrics(page)
    assert linted.returncode == 0, linted.stdout + linted.stderr
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        report = custom.get_cluster_custom_object(
            "wgpolicyk8s.io", "v1alpha2", "clusterpolicyreports", "volcano-guard"
        )
        results = [r for r in report.get("results", []) if r["policy"] == "queueGuarantees"]
        if results:
            break
        time.sleep(0.1)
    assert [(r["resources"][0]["name"], r["severity"]) for r in results] == [
        ("research", "critical")
    ]
