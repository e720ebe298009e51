"""The Volcano components the audit and `check` find, their versions, the known failures of
those versions (volcanoAdvisories) and where the sidecar is needed (queueStatusSidecar): over
Volcano's own installers (v1.10.0 and v1.15.1), in findings, metrics, PolicyReports, `check`,
and against the sandbox with kubectl."""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.core import Metric

from tests.processes import run_here
from tests.upstream import volcano_file, volcano_manifest
from volcano_guard.audit.findings import (
    FAIL,
    QUEUE_STATUS_SIDECAR,
    VOLCANO_ADVISORIES,
    WARN,
    ClusterState,
    advisory_counts,
    findings,
)
from volcano_guard.audit.live import LiveAudit, View
from volcano_guard.audit.metrics import advisory_family
from volcano_guard.audit.reports import reports
from volcano_guard.base.kubeconfig import write_kubeconfig
from volcano_guard.webhook.check import EXIT_CLEAN, EXIT_VIOLATIONS, run_check
from volcano_guard.webhook.config import config_from_dict
from volcano_guard.webhook.policies.sidecar_injection import INJECT_LABEL

CONFIG = config_from_dict({})
INSTALLER = "installer/volcano-development.yaml"
OURS = (VOLCANO_ADVISORIES, QUEUE_STATUS_SIDECAR)


def installed(release: str, namespace: str = "volcano-system") -> list[dict[str, Any]]:
    """The installer's Deployments and Jobs (a copy: the installer is shared), in namespace."""
    objects = [
        copy.deepcopy(d)
        for d in volcano_manifest(INSTALLER, release)
        if d["kind"] in ("Deployment", "Job")
    ]
    for obj in objects:
        obj["metadata"]["namespace"] = namespace
    return objects


def labelled(deployment: dict[str, Any]) -> dict[str, Any]:
    deployment["spec"]["template"]["metadata"].setdefault("labels", {})[INJECT_LABEL] = "true"
    return deployment


def ours(found: list[Any]) -> set[tuple[str, str, str, str]]:
    """(policy, name, result, advisory key or "") of the advisory and sidecar findings."""
    return {
        (f.policy, f.name, f.result, f.message[1:].split("]")[0] if f.message[0] == "[" else "")
        for f in found
        if f.policy in OURS
    }


def test_a_v1_10_0_scheduler_and_controller_have_the_storm_and_need_the_sidecar():
    found = ours(findings(ClusterState(controllers=installed("v1.10.0")), CONFIG))
    for name in ("volcano-scheduler", "volcano-controllers"):
        assert (VOLCANO_ADVISORIES, name, FAIL, "queue-status-storm") in found
        assert (QUEUE_STATUS_SIDECAR, name, FAIL, "") in found
    assert (VOLCANO_ADVISORIES, "volcano-scheduler", WARN, "negative-idle-asserts") in found
    assert (VOLCANO_ADVISORIES, "volcano-controllers", WARN, "stale-podgroup-delete") in found
    assert {name for _, name, _, _ in found} == {
        "volcano-scheduler",
        "volcano-controllers",
        "volcano-admission",  # its admission-init Job runs the same image and serves nothing
    }


def test_with_the_sidecar_label_the_storm_is_covered_and_the_sidecar_needed_no_more():
    objects = [
        labelled(d) if d["metadata"]["name"] in ("volcano-scheduler", "volcano-controllers") else d
        for d in installed("v1.10.0")
    ]
    found = ours(findings(ClusterState(controllers=objects), CONFIG))
    assert (VOLCANO_ADVISORIES, "volcano-scheduler", WARN, "queue-status-storm") in found
    assert not {f for f in found if f[0] == QUEUE_STATUS_SIDECAR or f[2] == FAIL}


def test_v1_15_1_has_its_own_advisories_and_a_sidecar_there_is_not_needed():
    objects = installed("v1.15.1")
    found = ours(findings(ClusterState(controllers=objects), CONFIG))
    assert {(name, result, key) for _, name, result, key in found} == {
        ("volcano-scheduler", WARN, "negative-idle-asserts"),
        ("volcano-controllers", WARN, "stale-podgroup-delete"),
        ("volcano-admission", WARN, "queue-parent-cycle"),
    }
    scheduler = next(d for d in objects if d["metadata"]["name"] == "volcano-scheduler")
    found = ours(findings(ClusterState(controllers=[labelled(scheduler)]), CONFIG))
    assert (QUEUE_STATUS_SIDECAR, "volcano-scheduler", WARN, "") in found


def test_a_feature_turned_off_turns_its_advisory_into_a_failure():
    config = config_from_dict({"policies": {"podGroups": {"deleteGuard": {"mode": "warn"}}}})
    found = ours(findings(ClusterState(controllers=installed("v1.15.1")), config))
    assert (VOLCANO_ADVISORIES, "volcano-controllers", FAIL, "stale-podgroup-delete") in found
    labelled_only = [labelled(d) for d in installed("v1.10.0") if d["kind"] == "Deployment"]
    config = config_from_dict({"policies": {"sidecarInjection": {"mode": "warn"}}})
    found = ours(findings(ClusterState(controllers=labelled_only), config))
    assert (VOLCANO_ADVISORIES, "volcano-scheduler", FAIL, "queue-status-storm") in found


def test_an_advisory_says_whether_its_feature_is_on_in_a_sentence_that_agrees():
    def said(config: Any) -> str:
        [message] = [
            f.message
            for f in findings(ClusterState(controllers=installed("v1.15.1")), config)
            if f.message.startswith("[negative-idle-asserts]")
        ]
        return message

    assert said(CONFIG).endswith("covered: the resourceRequests and nodeName policies are on")
    off = config_from_dict({"policies": {"nodeName": {"mode": "warn"}}})
    assert "the resourceRequests and nodeName policies would cover it and are off: " in said(off)
    upgrade = [
        f.message
        for f in findings(ClusterState(controllers=installed("v1.11.0")), CONFIG)
        if f.message.startswith("[queue-status-apply-allocated]")
    ]
    assert upgrade and all(
        m.endswith("nothing in the guard covers it: upgrade Volcano to v1.11.1 or later")
        for m in upgrade
    )


def test_a_digest_alone_is_version_unknown_and_a_pod_reports_as_its_deployment():
    [scheduler] = [d for d in installed("v1.15.1") if d["metadata"]["name"] == "volcano-scheduler"]
    template = scheduler["spec"]["template"]
    template["spec"]["containers"][0]["image"] = "volcanosh/vc-scheduler@sha256:" + "0" * 64
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            **template["metadata"],
            "name": "volcano-scheduler-6d4b9-x",
            "namespace": "volcano-system",
            "labels": {**template["metadata"]["labels"], "pod-template-hash": "6d4b9"},
            "ownerReferences": [
                {"kind": "ReplicaSet", "name": "volcano-scheduler-6d4b9", "controller": True}
            ],
        },
        "spec": template["spec"],
    }
    found = [
        f
        for f in findings(ClusterState(pods=[pod], controllers=[scheduler]), CONFIG)
        if f.policy in OURS
    ]
    assert [(f.kind, f.name, f.result) for f in found] == [
        ("Deployment", "volcano-scheduler", WARN)
    ]
    assert "version unknown" in found[0].message


def test_a_tenants_pod_with_a_pre_release_of_v0_0_0_is_judged_as_the_oldest_release():
    """Components are found by image name in every namespace, so a tenant picks the tag; the
    first writers row covers every version before it too, a pre-release of v0.0.0 included."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "tenant"},
        "spec": {"containers": [{"name": "c", "image": "x.example/vc-scheduler:v0.0.0-dev"}]},
        "status": {"phase": "Running"},
    }
    found = ours(findings(ClusterState(pods=[pod]), CONFIG))
    assert (QUEUE_STATUS_SIDECAR, "p", FAIL, "") in found  # the oldest release PUTs its status
    assert (VOLCANO_ADVISORIES, "p", FAIL, "queue-status-storm") in found


def test_metrics_count_workloads_by_component_version_advisory_and_coverage():
    counts = advisory_counts(installed("v1.10.0"), CONFIG)
    assert counts[("scheduler", "v1.10.0", "queue-status-storm", "off")] == 1
    assert counts[("controller-manager", "v1.10.0", "stale-podgroup-delete", "on")] == 1
    family: Metric = advisory_family(View((), (), None, counts))
    samples = {tuple(s.labels.values()): s.value for s in family.samples}
    assert samples[("scheduler", "v1.10.0", "queue-status-storm", "off")] == 1
    assert family.name == "volcano_guard_volcano_advisories"


def test_the_watching_audit_reports_and_counts_from_volcanos_pods():
    from tests.audit.test_control_plane import scheduler_deployment, scheduler_pod

    live = LiveAudit(CONFIG)
    live.pod(scheduler_pod(scheduler_deployment("v1.10.0")), ("volcano-system", "s"))
    view = live.view()
    assert view.advisories[("scheduler", "v1.10.0", "queue-status-storm", "off")] == 1
    assert (QUEUE_STATUS_SIDECAR, "volcano-scheduler", FAIL, "") in ours(list(view.findings))


def test_each_advisory_is_a_policyreport_result_of_its_namespace():
    found = findings(ClusterState(controllers=installed("v1.10.0")), CONFIG)
    document = reports(found, {}, 100)[("PolicyReport", "volcano-system")]
    results = [r for r in document["results"] if r["policy"] == VOLCANO_ADVISORIES]
    storms = [r for r in results if r["message"].startswith("[queue-status-storm]")]
    assert len(storms) == 2 and {r["result"] for r in storms} == {FAIL}
    assert {r["severity"] for r in results} == {"high"}
    assert storms[0]["resources"][0]["apiVersion"] == "apps/v1"


def test_check_fails_the_v1_10_0_installer_and_passes_v1_15_1s(tmp_path):
    answers = {}
    for release in ("v1.10.0", "v1.15.1"):
        manifest = tmp_path / f"{release}.yaml"
        manifest.write_text(volcano_file(INSTALLER, release))
        answers[release] = run_check([str(manifest)], CONFIG)
    old, new = answers["v1.10.0"], answers["v1.15.1"]
    assert old.exit_code == EXIT_VIOLATIONS and new.exit_code == EXIT_CLEAN
    failing = {(v.name, v.policy) for v in old.violations if v.mode == "enforce"}
    assert failing == {
        (name, policy) for name in ("volcano-scheduler", "volcano-controllers") for policy in OURS
    }
    assert {v.policy for v in new.violations if v.policy in OURS} == {VOLCANO_ADVISORIES}


def test_kubectl_created_volcano_deployments_are_reported_by_version(sandbox, kubectl, tmp_path):
    """The Done-when of issue 48: a v1.10.0 scheduler and controller with the storm and the
    sidecar needed; v1.15.1's with their own."""
    old = [d for d in installed("v1.10.0", "volcano-old") if d["kind"] == "Deployment"]
    new = [d for d in installed("v1.15.1", "volcano-new") if d["kind"] == "Deployment"]
    namespaces = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}}
        for n in ("volcano-old", "volcano-new")
    ]
    kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all([*namespaces, *old, *new]))
    result = audit(sandbox.url, tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    found = {
        (f["namespace"], f["name"], f["policy"], f["result"], f["message"].split("]")[0][1:])
        for f in json.loads(result.stdout)["findings"]
        if f["policy"] in OURS and f["kind"] == "Deployment"
    }
    for name in ("volcano-scheduler", "volcano-controllers"):
        assert ("volcano-old", name, VOLCANO_ADVISORIES, FAIL, "queue-status-storm") in found
        assert any(f[:4] == ("volcano-old", name, QUEUE_STATUS_SIDECAR, FAIL) for f in found)
    assert {(f[1], f[4]) for f in found if f[0] == "volcano-new"} == {
        ("volcano-scheduler", "negative-idle-asserts"),
        ("volcano-controllers", "stale-podgroup-delete"),
        ("volcano-admission", "queue-parent-cycle"),
    }
    assert all(f[3] == WARN for f in found if f[0] == "volcano-new")


def audit(url: str, directory: Path) -> subprocess.CompletedProcess[str]:
    kubeconfig = directory / "kubeconfig"
    write_kubeconfig(kubeconfig, url)
    return run_here("audit", "--kubeconfig", str(kubeconfig), "--output", "json")
