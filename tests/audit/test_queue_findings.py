"""The audit's Queue findings: guarantees summing past the allocatable of the nodes Volcano
schedules (#4261), and `volcano.sh/hierarchy` annotations reported, not judged. The facts are
pinned to Volcano's scheduler source; the end-to-end run audits Queues and Nodes created with
kubectl in the sandbox."""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

from tests.audit.test_control_plane import audit
from tests.processes import run_here
from tests.upstream import go_function, volcano_file
from volcano_guard.audit.findings import FAIL, WARN, ClusterState, findings
from volcano_guard.audit.live import LiveAudit
from volcano_guard.audit.metrics import AuditCollector
from volcano_guard.audit.queues import HIERARCHY_ANNOTATIONS, QUEUE_GUARANTEES
from volcano_guard.audit.reports import reports
from volcano_guard.webhook.config import config_from_dict

CONFIG = config_from_dict({})
TRAIN = config_from_dict({"policies": {"nodeName": {"managedNodeSelectors": ["role:train"]}}})


def node(name: str, cpu: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": {"allocatable": {"cpu": cpu, "memory": "16Gi", "pods": "110"}},
    }


def queue(name: str, guarantee: dict[str, Any] | None = None, **annotations: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"weight": 1}
    if guarantee is not None:
        spec["guarantee"] = {"resource": guarantee}
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": name, "annotations": annotations},
        "spec": spec,
    }


def found(state: ClusterState, config=CONFIG) -> list[tuple[str, str, str]]:
    return [(f.policy, f.name, f.result) for f in findings(state, config)]


# --- the facts, pinned to Volcano's source ----------------------------------------------------


def test_the_cluster_a_session_holds_is_the_allocatable_of_the_nodes_its_cache_admits():
    session = volcano_file("pkg/scheduler/framework/session.go", "v1.15.1")
    assert re.search(
        r"for _, n := range ssn.Nodes \{\s*ssn.TotalResource.Add\(n.Allocatable\)", session
    )
    cache = volcano_file("pkg/scheduler/cache/event_handlers.go", "v1.15.1")
    admits = go_function(cache, "(sc *SchedulerCache) nodeCanAddCache")
    assert "if len(sc.nodeSelectorLabels) == 0 {\n\t\treturn true" in admits
    assert "if !sc.nodeCanAddCache(node) {" in go_function(cache, "(sc *SchedulerCache) SyncNode")
    state = go_function(
        volcano_file("pkg/scheduler/api/node_info.go", "v1.15.1"), "(ni *NodeInfo) setNodeState"
    )
    assert "Phase:  Ready" in state and "Conditions" not in state  # conditions are not read


def test_every_release_reads_the_hierarchy_annotations_into_its_queue_info():
    for release in ("v1.10.0", "v1.15.1"):
        info = go_function(volcano_file("pkg/scheduler/api/queue_info.go", release), "NewQueueInfo")
        assert "queue.Annotations[v1beta1.KubeHierarchyAnnotationKey]" in info
        assert "queue.Annotations[v1beta1.KubeHierarchyWeightAnnotationKey]" in info
    labels = volcano_file(
        "staging/src/volcano.sh/apis/pkg/apis/scheduling/v1beta1/labels.go", "v1.15.1"
    )
    assert 'KubeHierarchyAnnotationKey = "volcano.sh/hierarchy"' in labels
    assert 'KubeHierarchyWeightAnnotationKey = "volcano.sh/hierarchy-weights"' in labels


# --- the findings ------------------------------------------------------------------------------


def test_guarantees_past_the_nodes_allocatable_are_one_finding_a_resource_on_the_largest():
    state = ClusterState(
        nodes=[node("n1", "4"), node("n2", "4")],
        queues=[queue("a", {"cpu": "5", "memory": "1Gi"}), queue("b", {"cpu": 4}), queue("c")],
    )
    (finding,) = findings(state, CONFIG)
    assert (finding.policy, finding.kind, finding.name, finding.result) == (
        QUEUE_GUARANTEES,
        "Queue",
        "a",
        FAIL,
    )
    assert finding.message.startswith(
        "the Queues' guarantees of cpu sum to 9 (a 5, b 4), more than the 8 allocatable"
    )
    assert "#4261" in finding.message and "v1.12.0" in finding.message
    fits = ClusterState(nodes=state.nodes, queues=[queue("a", {"cpu": "8"})])
    assert found(fits) == []


def test_memory_guarantees_are_shown_as_a_user_writes_them_not_in_bytes():
    state = ClusterState(nodes=[node("n1", "4")], queues=[queue("big", {"memory": "1Ti"})])
    (finding,) = findings(state, CONFIG)
    assert finding.message.startswith(
        "the Queues' guarantees of memory sum to 1Ti (big 1Ti), more than the 16Gi allocatable"
    )


def test_only_the_nodes_volcano_schedules_count_and_a_resource_they_lack_counts_as_none():
    nodes = [node("train-1", "4", role="train"), node("web-1", "64", role="web")]
    state = ClusterState(nodes=nodes, queues=[queue("a", {"cpu": "6"})])
    assert found(state, CONFIG) == []  # no node selector: every node
    assert found(state, TRAIN) == [(QUEUE_GUARANTEES, "a", FAIL)]
    gpus = ClusterState(nodes=nodes, queues=[queue("g", {"nvidia.com/gpu": 1, "cpu": "0"})])
    assert found(gpus) == [(QUEUE_GUARANTEES, "g", FAIL)]


def test_guarantees_are_counted_as_volcanos_new_resource_counts_them():
    """Each guarantee in milli-cpu rounded up (MilliValue), then summed; a resource Volcano
    does not count (a requests.-prefixed name) is no guarantee; attachable volumes are."""
    tiny = [queue(f"q{i}", {"cpu": "0.0001"}) for i in range(3)]  # 1m each to Volcano
    assert found(ClusterState(nodes=[node("n1", "2m")], queues=tiny)) == [
        (QUEUE_GUARANTEES, "q0", FAIL)
    ]
    ignored = queue("x", {"requests.example.com/x": "1"})
    assert found(ClusterState(nodes=[node("n1", "8")], queues=[ignored])) == []
    volumes = queue("v", {"attachable-volumes-aws-ebs": "100"})
    assert found(ClusterState(nodes=[node("n1", "8")], queues=[volumes])) == [
        (QUEUE_GUARANTEES, "v", FAIL)
    ]


def test_a_forged_guarantee_far_past_any_cluster_is_a_finding_not_a_crash():
    """The Queue CRD's pattern admits 1e1000000, past the default decimal context; two of
    9e999999 sum past it too. The message stays short."""
    forged = [
        queue("a", {"cpu": "1e1000000"}),
        queue("b", {"cpu": "9e999999", "memory": "9e999999"}),
    ]
    nodes = [node("n1", "8")]
    state = ClusterState(nodes=nodes, queues=forged)
    assert sorted(found(state)) == [(QUEUE_GUARANTEES, "a", FAIL), (QUEUE_GUARANTEES, "b", FAIL)]
    assert all(len(f.message) < 1000 for f in findings(state, CONFIG))
    live = LiveAudit(CONFIG)
    for one in forged:
        live.queue(one, one["metadata"]["name"])
    live.node(nodes[0], "n1")
    assert dict(live.view().guarantee_ratios)["cpu"] == float("inf")


def child(name: str, parent: str, cpu: str) -> dict[str, Any]:
    return {
        **queue(name, {"cpu": cpu}),
        "spec": {"parent": parent, "guarantee": {"resource": {"cpu": cpu}}},
    }


def test_nested_guarantees_past_the_nodes_fail_only_when_the_roots_children_pass_them():
    nodes = [node("n1", "8")]
    nested = [child("eng", "root", "6"), child("dev", "eng", "3"), child("prod", "eng", "3")]
    (warning,) = findings(ClusterState(nodes=nodes, queues=nested), CONFIG)
    assert (warning.name, warning.result) == ("eng", WARN)  # 12 summed, the root's children 6
    assert "the root queue's children guarantee 6, which fits" in warning.message
    over = [child("eng", "", "9"), child("dev", "eng", "3"), queue("root", {"cpu": "8"})]
    assert found(ClusterState(nodes=nodes, queues=over)) == [(QUEUE_GUARANTEES, "eng", FAIL)]


# --- graded by the Volcano schedulers found ---------------------------------------------------


def scheduler(tag: str, image: str = "volcanosh/vc-scheduler", kind: str = "Deployment"):
    """A Volcano scheduler workload running image:tag (a digest when tag starts with @)."""
    reference = f"{image}{tag}" if tag.startswith("@") else f"{image}:{tag}"
    name = f"{image.rsplit('/', 1)[-1]}-{tag.strip('@:').replace('.', '-')[:20]}"
    spec = {"containers": [{"name": "volcano-scheduler", "image": reference}]}
    body: dict[str, Any] = (
        {"spec": spec} if kind == "Pod" else {"spec": {"template": {"spec": spec}}}
    )
    return {
        "apiVersion": "v1" if kind == "Pod" else "apps/v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": "volcano-system"},
        **body,
    }


OVER = [node("n1", "4")], [queue("research", {"cpu": "6"})]  # 6 cpu guaranteed of 4


def graded(*schedulers: dict[str, Any]) -> tuple[str, str]:
    nodes, queues = OVER
    state = ClusterState(nodes=nodes, queues=queues, controllers=list(schedulers))
    (finding,) = [f for f in findings(state, CONFIG) if f.policy == QUEUE_GUARANTEES]
    return finding.result, finding.message


def test_guarantees_past_the_nodes_are_a_warning_where_every_scheduler_found_is_v1_12_or_later():
    result, message = graded(scheduler("v1.15.1"))
    assert result == WARN
    assert "Volcano's scheduler v1.15.1 does not panic on that" in message
    assert "cannot meet the guarantees" in message and "fixed in v1.12.0" in message
    result, message = graded(scheduler("v1.12.0"), scheduler("1.15.1"))
    assert (result, "scheduler v1.12.0, v1.15.1 does not panic" in message) == (WARN, True)


def test_a_scheduler_of_a_release_that_panics_keeps_it_a_failure_naming_the_release():
    for tag in ("v1.10.0", "v1.11.2", "v1.12.0-rc.1"):  # a pre-release need not carry the fix
        result, message = graded(scheduler(tag))
        assert (result, f"Volcano's scheduler {tag} panics at its sessions" in message) == (
            FAIL,
            True,
        ), message
    result, message = graded(scheduler("v1.15.1"), scheduler("v1.10.0"), scheduler("v1.11.1"))
    assert result == FAIL and "scheduler v1.10.0, v1.11.1 panics" in message
    assert "v1.15.1" not in message and "#4261" in message


def test_an_unknown_version_or_no_scheduler_keeps_it_a_failure():
    result, message = graded(scheduler("@sha256:" + "0" * 64))
    assert result == FAIL and "runs an image whose tag names no release" in message
    result, message = graded(scheduler("latest"), scheduler("v1.10.0"))
    assert result == FAIL and "v1.10.0 panics" in message and "another runs an image" in message
    result, message = graded()
    assert result == FAIL and message.count("no Volcano scheduler was found") == 1
    # The agent scheduler runs no Queue plugins: it is not the scheduler that sums guarantees.
    result, message = graded(scheduler("v1.15.1", "volcanosh/vc-agent-scheduler"))
    assert result == FAIL and "no Volcano scheduler was found" in message


def test_only_the_roots_children_past_the_nodes_are_graded_the_rest_stays_a_warning():
    nested = [child("eng", "root", "6"), child("dev", "eng", "3"), child("prod", "eng", "3")]
    state = ClusterState(nodes=[node("n1", "8")], queues=nested, controllers=[scheduler("v1.10.0")])
    (warning,) = [f for f in findings(state, CONFIG) if f.policy == QUEUE_GUARANTEES]
    assert warning.result == WARN and "v1.10.0 panics" in warning.message


def test_the_watching_audit_and_its_metrics_grade_by_the_schedulers_pods():
    nodes, queues = OVER
    live = LiveAudit(CONFIG)
    live.node(nodes[0], "n1")
    live.queue(queues[0], "research")
    new = scheduler("v1.12.1", kind="Pod")
    live.pod(new, ("volcano-system", "s"))
    view = live.view()
    assert list(view.findings) == findings(
        ClusterState(nodes=nodes, queues=queues, pods=[new]), CONFIG
    )
    assert (view.warnings()[(QUEUE_GUARANTEES, "")], view.violations()) == (1, {})
    live.pod(scheduler("v1.11.1", kind="Pod"), ("volcano-system", "s"))  # rolled back
    view = live.view()
    assert view.violations()[(QUEUE_GUARANTEES, "")] == 1
    samples = {
        (metric.name, sample.labels.get("policy")): sample.value
        for metric in AuditCollector(lambda: (view, 0.0)).collect()
        for sample in metric.samples
    }
    assert samples[("volcano_guard_audit_violations", QUEUE_GUARANTEES)] == 1
    assert ("volcano_guard_audit_warnings", QUEUE_GUARANTEES) not in samples
    live.pod(None, ("volcano-system", "s"))
    assert "no Volcano scheduler was found" in live.view().findings[0].message


def test_hierarchy_annotations_are_reported_as_warnings():
    annotated = queue("dev", **{"volcano.sh/hierarchy": "root/eng/dev"})
    weights = queue("w", **{"volcano.sh/hierarchy-weights": "1/2"})
    state = ClusterState(queues=[annotated, weights, queue("plain")])
    assert found(state) == [
        (HIERARCHY_ANNOTATIONS, "dev", WARN),
        (HIERARCHY_ANNOTATIONS, "w", WARN),
    ]


def test_the_live_audit_finds_and_measures_queues_as_queues_and_nodes_change():
    nodes = [node("n1", "4")]
    queues = [queue("a", {"cpu": "6"}, **{"volcano.sh/hierarchy": "root/a"})]
    live = LiveAudit(CONFIG)
    for one in queues:
        live.queue(one, one["metadata"]["name"])
    live.node(nodes[0], "n1")
    assert list(live.view().findings) == findings(ClusterState(nodes=nodes, queues=queues), CONFIG)
    assert live.view().guarantee_ratios == (("cpu", 1.5),)
    live.node(node("n2", "4"), "n2")  # 8 cpu now: the guarantee fits
    assert [f.policy for f in live.view().findings] == [HIERARCHY_ANNOTATIONS]
    assert live.view().guarantee_ratios == (("cpu", 0.75),)
    live.queue(None, "a")
    assert live.view().findings == ()


def test_queue_findings_go_to_the_cluster_report_as_critical_and_info():
    state = ClusterState(
        nodes=[node("n1", "1")],
        queues=[queue("a", {"cpu": "2"}, **{"volcano.sh/hierarchy": "root/a"})],
    )
    documents = reports(findings(state, CONFIG), {}, 100)
    results = documents[("ClusterPolicyReport", "")]["results"]
    assert [(r["policy"], r["result"], r["severity"]) for r in results] == [
        (QUEUE_GUARANTEES, "fail", "critical"),
        (HIERARCHY_ANNOTATIONS, "warn", "info"),
    ]
    assert results[0]["resources"] == [
        {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "name": "a"}
    ]


# --- against the sandbox -----------------------------------------------------------------------


def test_queues_and_nodes_created_with_kubectl_are_audited(sandbox, kubectl, tmp_path):
    objects = [
        node("n1", "4"),
        node("n2", "4"),
        queue("research", {"cpu": "6", "memory": "8Gi"}),
        queue("serving", {"cpu": "3"}, **{"volcano.sh/hierarchy": "root/serving"}),
    ]
    kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(objects))
    result = audit(sandbox.url, tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    listed = [(f["policy"], f["name"], f["result"]) for f in json.loads(result.stdout)["findings"]]
    assert listed == [
        (QUEUE_GUARANTEES, "research", FAIL),
        (HIERARCHY_ANNOTATIONS, "serving", WARN),
    ]
    one_namespace = run_here(
        "audit", "--kubeconfig", str(tmp_path / "kubeconfig"), "--namespace", "team-a"
    )
    assert (one_namespace.returncode, one_namespace.stdout.splitlines()[-1]) == (
        0,
        "2 nodes, 0 pods, 0 PodGroups and 0 Volcano workloads read, 0 findings",
    )  # Queues are the whole cluster's: not read for one namespace
    kubectl("patch", "queue", "research", "--type=merge", "-p", '{"spec":{"guarantee":null}}')
    result = audit(sandbox.url, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert [f["policy"] for f in json.loads(result.stdout)["findings"]] == [HIERARCHY_ANNOTATIONS]


def test_a_cluster_without_the_queue_crd_is_audited_without_queues(sandbox, tmp_path):
    """Volcano not installed yet (its Queue CRD absent: 404): no Queue finding, no error."""
    from volcano_guard_sandbox.apiserver.faults import FaultRule

    sandbox.seed([queue("a", {"cpu": "1000"})])  # past every node: a finding when read
    absent = FaultRule(frozenset({"list"}), frozenset({"queues"}), error_rate=1.0, error_code=404)
    sandbox.set_faults(absent)
    run = audit(sandbox.url, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert json.loads(run.stdout)["findings"] == []
