"""Issue 48's "Done when", as an operator meets it, in the guarded sandbox with kubectl and the
`volcano-guard` command: Volcano v1.10.0's and v1.15.1's scheduler and controller Deployments
(from Volcano's own installers) applied, bad Queues written while the queues policy is off,
then `volcano-guard audit` names each Volcano's known failures and the bad Queues; the policy
turned on as docs/install.md says (the config edited, the registrations `manifests` prints
applied), a Queue cycle and a child over its parent's capability are refused in kubectl's
words; `volcano-guard check` judges the two installers."""

from __future__ import annotations

import copy
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.upstream import volcano_manifest
from volcano_guard_sandbox.guarded_sandbox import (
    GuardedSandbox,
    admission_only,
    guarded_sandbox,
    kubectl_path,
    shipped_config,
    with_policy_changes,
)

pytestmark = pytest.mark.slow
INSTALLER = "installer/volcano-development.yaml"
RELEASES = {"v1.10.0": "volcano-old", "v1.15.1": "volcano-new"}  # release: its namespace
CLI = [sys.executable, "-m", "volcano_guard.cli"]

# What a Volcano user writes (queues.yaml): a small tree, a child over its parent's capability
# and a queue whose deserved passes its capability (Volcano before v1.14 admits both).
QUEUES = """\
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: research}
spec: {weight: 1}
---
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: vision}
spec: {weight: 1, parent: research}
---
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: vision-gpu}
spec: {weight: 1, parent: vision}
---
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: team}
spec: {weight: 1, capability: {cpu: "4"}}
---
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: greedy}
spec: {weight: 1, parent: team, capability: {cpu: "8"}}
---
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: backwards}
spec: {weight: 1, capability: {cpu: "4"}, deserved: {cpu: "8"}}
"""
REPARENT = '{"spec": {"parent": "vision-gpu"}}'  # research under its own grandchild


def volcano_deployments(release: str) -> list[dict[str, Any]]:
    """The scheduler and controller Deployments of Volcano's installer at release, in the
    namespace of their own (a copy: the installer is shared)."""
    wanted = ("volcano-scheduler", "volcano-controllers")
    found = [
        copy.deepcopy(d)
        for d in volcano_manifest(INSTALLER, release)
        if d["kind"] == "Deployment" and d["metadata"]["name"] in wanted
    ]
    assert {d["metadata"]["name"] for d in found} == set(wanted), release
    for deployment in found:
        deployment["metadata"]["namespace"] = RELEASES[release]
    return found


def volcano_guard(*args: str) -> subprocess.CompletedProcess[str]:
    """The command as a user runs it: its own process, its stdout, stderr and exit code."""
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def installers() -> list[list[dict[str, Any]]]:
    return [volcano_deployments(release) for release in RELEASES]  # skips without upstream


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, installers) -> Iterator[GuardedSandbox]:
    """The guard installed with the queues policy off; Volcano's Deployments and the bad
    Queues applied with kubectl, the cycle made by re-parenting."""
    if kubectl_path() is None:
        pytest.skip("kubectl is not installed (.ci/run installs it)")
    off = with_policy_changes(shipped_config(), {"queues": {"mode": "off"}})
    with guarded_sandbox(tmp_path_factory.mktemp("volcano-aware"), [], config=off) as guarded:
        for namespace in RELEASES.values():
            guarded.kubectl("create", "namespace", namespace)
        volcano = [d for deployments in installers for d in deployments]
        guarded.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(volcano))
        guarded.kubectl("apply", "-f", "-", stdin=QUEUES)
        guarded.kubectl("patch", "queue", "research", "--type=merge", "-p", REPARENT)
        yield guarded


@pytest.fixture(scope="module")
def enforced(cluster: GuardedSandbox) -> GuardedSandbox:
    """The queues policy turned on as a GitOps user does: the config edited (the webhook
    re-reads it), then what `manifests` prints for it applied and its caBundle injected."""
    config_file = cluster.directory / "config.yaml"
    config = with_policy_changes(yaml.safe_load(config_file.read_text()), {"queues": {}})
    del config["policies"]["queues"]["mode"]  # the default: enforce
    config_file.write_text(yaml.safe_dump(config))
    deadline = time.monotonic() + 20
    while 'volcano_guard_config_reloads_total{result="applied"} 1' not in cluster.webhook_metrics():
        assert time.monotonic() < deadline, "the webhook never re-read its config"
        time.sleep(0.2)
    manifests = volcano_guard("manifests", "--config", str(config_file))
    assert manifests.returncode == 0, manifests.stderr
    cluster.kubectl("apply", "-f", "-", stdin=admission_only(manifests.stdout))
    ca = cluster.directory / "guard" / "ca.crt"
    kubeconfig = str(cluster.kubeconfig)
    inject = ["--mutating", "volcano-guard", "--validating", "volcano-guard"]
    injected = volcano_guard(
        "certs", "inject", "--ca", str(ca), *inject, "--kubeconfig", kubeconfig
    )
    assert injected.returncode == 0, injected.stderr
    return cluster


def test_the_audit_names_each_volcanos_failures_and_the_queues_that_break_the_rules(cluster):
    run = volcano_guard("audit", "--kubeconfig", str(cluster.kubeconfig))
    assert run.returncode == 1, run.stderr  # findings
    assert run.stderr == ""
    lines = run.stdout.splitlines()

    def said(subject: str, *words: str) -> bool:
        return any(line.startswith(subject) and all(w in line for w in words) for line in lines)

    for name in ("scheduler", "controllers"):
        old = f"Deployment volcano-old/volcano-{name}: "
        assert said(old + "volcanoAdvisories: [queue-status-storm]", "v1.10.0", "#3597")
        assert said(old + "queueStatusSidecar: ", "the sidecar is needed", "is missing")
        new = f"Deployment volcano-new/volcano-{name}: "
        assert not said(new, "queue-status-storm") and not said(new + "queueStatusSidecar")
    new = "Deployment volcano-new/volcano-"
    assert said(new + "scheduler: volcanoAdvisories [warn]: [negative-idle-asserts]", "v1.15.1")
    assert said(new + "controllers: volcanoAdvisories [warn]: [stale-podgroup-delete]", "v1.15.1")
    assert (
        'Queue research: queues: Queue "research": parent "vision-gpu" makes a cycle ("research" '
        '-> "vision-gpu" -> "vision" -> "research"): a queue cannot be its own ancestor'
    ) in run.stdout
    assert (
        'Queue greedy: queues: Queue "greedy": capability cpu 8 is more than the capability cpu 4 '
        'of its ancestor queue "team"'
    ) in run.stdout
    assert (
        'Queue backwards: queueResources: Queue "backwards": deserved cpu 8 is more than '
        "capability cpu 4"
    ) in run.stdout
    assert lines[-1].startswith("0 nodes, 0 pods, ")


def queue_yaml(name: str, spec: str) -> str:
    """A Queue as a Volcano user writes it; spec is its flow-style body."""
    return (
        "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\n"
        f"metadata: {{name: {name}}}\nspec: {{weight: 1, {spec}}}\n"
    )


def refused(cluster: GuardedSandbox, wanted: str, *args: str, stdin: str | None = None) -> str:
    """kubectl's stderr for a write the guard must refuse (exit 1, nothing written), once it
    says wanted: the webhook's Queue cache may take a moment to see the queues just created,
    and until then refuses their children as having no parent."""
    deadline = time.monotonic() + 15
    while True:
        run = cluster.kubectl(*args, stdin=stdin, check=False)
        assert run.returncode == 1, f"kubectl {' '.join(args)}: {run.returncode} {run.stdout}"
        assert run.stdout == ""
        if wanted in run.stderr or time.monotonic() > deadline:
            return run.stderr
        time.sleep(0.2)


def test_with_the_policy_on_a_reparenting_cycle_is_refused_in_kubectls_words(enforced):
    tree = [("nlp", "capability: {cpu: 10}"), ("nlp-a", "parent: nlp"), ("nlp-b", "parent: nlp-a")]
    enforced.kubectl("apply", "-f", "-", stdin="---\n".join(queue_yaml(*q) for q in tree))
    patch = '{"spec": {"parent": "nlp-b"}}'
    said = refused(enforced, "cycle", "patch", "queue", "nlp", "--type=merge", "-p", patch)
    assert said == (
        'Error from server (Forbidden): admission webhook "validate.volcano-guard.io" denied the '
        'request: Queue "nlp": parent "nlp-b" makes a cycle ("nlp" -> "nlp-b" -> "nlp-a" -> '
        '"nlp"): a queue cannot be its own ancestor; Volcano\'s admission and scheduler loop '
        "on it\n"
    )
    edited = queue_yaml("nlp-a", "parent: nlp-b")  # the same cycle, by editing the file
    said = refused(enforced, "cycle", "apply", "-f", "-", stdin=edited)
    assert 'Queue "nlp-a": parent "nlp-b" makes a cycle ("nlp-a" -> "nlp-b" -> "nlp-a")' in said
    assert enforced.get("queue", "nlp")["spec"].get("parent") in (None, "root")
    assert enforced.get("queue", "nlp-a")["spec"]["parent"] == "nlp"


def test_with_the_policy_on_a_child_over_its_parents_capability_is_refused(enforced):
    family = [("lab", "capability: {cpu: 10}"), ("lab-a", "parent: lab, capability: {cpu: 6}")]
    enforced.kubectl("apply", "-f", "-", stdin="---\n".join(queue_yaml(*q) for q in family))
    child = queue_yaml("intern", "parent: lab, capability: {cpu: 20}")
    said = refused(enforced, "capability cpu", "apply", "-f", "-", stdin=child)
    assert said == (
        'Error from server (Forbidden): error when creating "STDIN": admission webhook '
        '"validate.volcano-guard.io" denied the request: Queue "intern": capability cpu 20 is '
        'more than the capability cpu 10 of its ancestor queue "lab"; a child queue cannot have '
        "more capability than its ancestors\n"
    )
    smaller = '{"spec": {"capability": {"cpu": "4"}}}'
    said = refused(
        enforced, "capability cpu", "patch", "queue", "lab", "--type=merge", "-p", smaller
    )
    assert (
        'Queue "lab": capability cpu 4 is less than the capability cpu 6 of its descendant' in said
    )
    assert enforced.get("queue", "lab")["spec"]["capability"] == {"cpu": 10}


def test_with_the_policy_on_the_queues_the_audit_reported_can_be_fixed(enforced):
    """reference.md: a write that fixes an existing bad Queue is admitted, and then the audit
    reports it no more."""
    enforced.kubectl(
        "patch", "queue", "research", "--type=merge", "-p", '{"spec": {"parent": "root"}}'
    )
    enforced.kubectl(
        "patch", "queue", "greedy", "--type=merge", "-p", '{"spec": {"capability": {"cpu": "4"}}}'
    )
    enforced.kubectl("label", "queue", "backwards", "owner=ml")  # other fields: not judged
    run = volcano_guard("audit", "--kubeconfig", str(enforced.kubeconfig))
    fixed_ones = ("research", "vision", "vision-gpu", "greedy", "team")
    for fixed in (f"Queue {name}: " for name in fixed_ones):
        assert fixed not in run.stdout
    assert "Queue backwards: queueResources: " in run.stdout  # not fixed yet


def test_check_fails_the_v1_10_0_installer_and_warns_of_v1_15_1s(tmp_path, installers):
    for release, deployments in zip(RELEASES, installers, strict=True):
        (tmp_path / f"{release}.yaml").write_text(yaml.safe_dump_all(deployments))
    old = volcano_guard("check", "-f", str(tmp_path / "v1.10.0.yaml"))
    assert old.returncode == 1, old.stderr
    assert (
        "Deployment/volcano-scheduler: [queue-status-storm] Volcano scheduler v1.10.0" in old.stdout
    )
    new = volcano_guard("check", "-f", str(tmp_path / "v1.15.1.yaml"))
    assert new.returncode == 0, new.stderr
    assert "[warn] [negative-idle-asserts] Volcano scheduler v1.15.1" in new.stdout
    assert "queue-status-storm" not in new.stdout
    assert new.stdout.splitlines()[-1] == "2 documents checked, 0 violations, 3 warnings"
