"""Queue shapes that crash or hang Volcano, against the guarded sandbox with kubectl: a queue
re-parented onto its own descendant (volcano-sh/volcano#5807: Volcano's admission loops on it),
a child over its parent's capability, resources out of order; refused with the policy's
message, and the ones that exist already reported by the audit. On main, without the queues
policy, every write below is admitted and the audit reports none of them."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.processes import run_here
from tests.webhook.queue_cases import queue, res
from volcano_guard_sandbox.guarded_sandbox import GuardedSandbox, guarded_sandbox, kubectl_path

pytestmark = pytest.mark.slow
SEED: list[dict[str, Any]] = [
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}},
    # Written past admission (as before the guard): a cycle, and a child over its parent.
    queue("loop-a", "loop-b"),
    queue("loop-b", "loop-a"),
    queue("team", "root", res("4")),
    queue("greedy", "team", res("8")),
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[GuardedSandbox]:
    if kubectl_path() is None:
        pytest.skip("kubectl is not installed (.ci/run installs it)")
    with guarded_sandbox(tmp_path_factory.mktemp("queues"), SEED) as guarded:
        yield guarded


def refusal(cluster: GuardedSandbox, wanted: str, *args: str, stdin: str | None = None) -> str:
    """kubectl's error for args once it says wanted (the guard's Queue cache may take a moment
    to see the queues just created: until then the parent "does not exist")."""
    deadline = time.monotonic() + 15
    while True:
        run = cluster.kubectl(*args, stdin=stdin, check=False)
        assert run.returncode != 0, f"admitted: {args}"
        if wanted in run.stderr or time.monotonic() > deadline:
            return run.stderr
        time.sleep(0.2)


def test_a_queue_reparented_onto_its_descendant_is_refused_naming_the_cycle(cluster):
    for name, parent in (("a", "root"), ("b", "a"), ("c", "b")):
        cluster.create(queue(name, parent))
    patch = '{"spec": {"parent": "c"}}'
    said = refusal(cluster, "makes a cycle", "patch", "queue", "a", "--type=merge", "-p", patch)
    assert 'Queue "a": parent "c" makes a cycle ("a" -> "c" -> "b" -> "a")' in said
    assert cluster.get("queue", "a")["spec"]["parent"] == "root"


def test_a_child_over_its_parents_capability_is_refused_naming_both(cluster):
    cluster.create(queue("research", "root", res("10", "20Gi")))
    child = queue("intern", "research", res("20", "8Gi"))
    said = refusal(cluster, "capability cpu", "create", "-f", "-", stdin=json.dumps(child))
    assert (
        'Queue "intern": capability cpu 20 is more than the capability cpu 10 of its ancestor '
        'queue "research"'
    ) in said


def test_resources_out_of_order_are_refused_in_the_api_server(cluster):
    backwards = queue("backwards", "", res("4"), res("8"))
    run = cluster.kubectl("create", "-f", "-", stdin=json.dumps(backwards), check=False)
    assert run.returncode != 0
    assert "volcano-guard-queue-resources" in run.stderr
    assert 'Queue "backwards": deserved cpu 8 is more than capability cpu 4' in run.stderr


def test_the_queues_that_break_the_rules_today_are_audit_findings(cluster):
    run = run_here("audit", "--kubeconfig", str(cluster.kubeconfig))
    assert run.returncode == 1, run.stderr
    lines = run.stdout.splitlines()
    assert any(
        line.startswith("Queue loop-a: queues: ") and "makes a cycle" in line for line in lines
    )
    assert any(
        line.startswith("Queue greedy: queues: ")
        and 'capability cpu 8 is more than the capability cpu 4 of its ancestor queue "team"'
        in line
        for line in lines
    )
