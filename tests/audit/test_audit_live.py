"""The audit kept current event by event holds exactly what a full audit of the same objects
finds, whatever the order of adds, changes and deletes."""

from __future__ import annotations

import datetime
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.webhook.queue_cases import queue, res
from volcano_guard.audit.findings import ClusterState, findings, managed_accounts
from volcano_guard.audit.live import LiveAudit, trim
from volcano_guard.audit.watch import AuditWatch
from volcano_guard.webhook.config import config_from_dict

NOW = datetime.datetime(2026, 11, 24, 12, 0, tzinfo=datetime.UTC)
CONFIG = config_from_dict(
    {
        "audit": {"orphanGracePeriod": "1m"},
        "policies": {"nodeName": {"managedNodeSelectors": ["pool:volcano"]}},
    }
)


def node(name: str, managed: bool, cpu: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"pool": "volcano" if managed else "web"}},
        "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "3"}},
    }


def pod(
    name: str,
    node_name: str,
    scheduler: str,
    cpu: str | None,
    group: str | None,
    phase: str,
    claim: str = "",
) -> dict[str, Any]:
    requests = {"cpu": cpu, "memory": "1Gi"} if cpu else {}
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": "a",
        "creationTimestamp": "2026-11-24T10:00:00Z",
        "managedFields": [{"manager": "kubectl"}],
    }
    if group:
        metadata["annotations"] = {"scheduling.k8s.io/group-name": group}
    if claim == "mirror":
        metadata.setdefault("annotations", {})["kubernetes.io/config.mirror"] = "m"
    elif claim:  # a DaemonSet's pod, of d1 or d2 (uid u1 or u2)
        metadata["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "name": claim,
                "uid": "u" + claim[1:],
                "controller": True,
            }
        ]
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "volumes": [{"name": "v"}],
        "containers": [
            {"name": "c", "image": "x", "env": [{"name": "A"}], "resources": {"requests": requests}}
        ],
    }
    if node_name:
        spec["nodeName"] = node_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": spec,
        "status": {"phase": phase, "conditions": [{"type": "Ready"}]},
    }


def podgroup(name: str, stamped: bool) -> dict[str, Any]:
    annotations = {"volcano-guard.io/generation-id": "0190"} if stamped else {}
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "a", "annotations": annotations},
    }


nodes = st.builds(node, st.sampled_from(["n1", "n2"]), st.booleans(), st.sampled_from(["2", "4"]))
pods = st.builds(
    pod,
    st.sampled_from(["p1", "p2"]),
    st.sampled_from(["", "n1", "n2", "n3"]),
    st.sampled_from(["volcano", "default-scheduler"]),
    st.sampled_from([None, "1", "3"]),
    st.sampled_from([None, "g1", "g2"]),
    st.sampled_from(["Running", "Pending", "Succeeded"]),
    st.sampled_from(["", "", "mirror", "d1", "d2"]),
)


def daemonset(name: str, uid: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": "a", "uid": uid},
    }


daemonsets = st.builds(daemonset, st.sampled_from(["d1", "d2"]), st.sampled_from(["u1", "u2"]))
podgroups = st.builds(podgroup, st.sampled_from(["g1", "g2"]), st.booleans())
# Mostly pods, few names: changes of one pod on one node are what the bookkeeping must get right.
events = st.lists(
    st.tuples(
        st.sampled_from(["set", "set", "delete"]),
        st.one_of(pods, pods, pods, nodes, podgroups, daemonsets),
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=events)
def test_event_by_event_equals_a_full_audit_of_the_same_objects(events):
    # Events a grace period before the view: the live audit times a pod on a missing node
    # from when it saw it so, a full audit (knowing no history) from its creation.
    moment = [NOW - CONFIG.audit.missing_node_grace]
    live = LiveAudit(CONFIG, clock=lambda: moment[0])
    current: dict[tuple[str, str], dict[str, Any]] = {}
    for action, obj in events:
        kind, name = obj["kind"], obj["metadata"]["name"]
        gone = action == "delete"
        if gone:
            current.pop((kind, name), None)
        else:
            current[(kind, name)] = obj
        if kind == "Node":
            live.node(None if gone else obj, name)
        elif kind == "Pod":
            live.pod(None if gone else obj, ("a", name))
        elif kind == "DaemonSet":
            live.daemonset(None if gone else obj, ("a", name))
        else:
            live.podgroup(None if gone else obj, ("a", name))
    state = ClusterState(
        nodes=[o for (k, _), o in current.items() if k == "Node"],
        pods=[o for (k, _), o in current.items() if k == "Pod"],
        podgroups=[o for (k, _), o in current.items() if k == "PodGroup"],
        daemonsets=[o for (k, _), o in current.items() if k == "DaemonSet"],
        now=NOW,
    )
    moment[0] = NOW
    view = live.view()
    assert list(view.findings) == findings(state, CONFIG)
    assert accounts(view.accounts) == accounts(managed_accounts(state, CONFIG))


def accounts(listed: Any) -> dict[str, tuple[dict, dict]]:
    return {
        account.node: (
            account.allocatable,
            {name: amount for name, amount in account.requested.items() if amount},
        )
        for account in listed
    }


def test_what_is_kept_of_a_pod_is_what_the_audit_reads():
    kept = trim("Pod", pod("p1", "n1", "volcano", "1", "g1", "Running"))
    assert "managedFields" not in kept["metadata"] and "volumes" not in kept["spec"]
    assert kept["spec"]["containers"] == [
        {"name": "c", "image": "x", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}
    ]
    assert kept["status"] == {"phase": "Running"}


def test_live_volcano_control_plane_and_pods_left_on_a_deleted_node():
    from tests.audit.test_control_plane import exited, scheduler_deployment, scheduler_pod

    moment = [NOW]
    live = LiveAudit(CONFIG, clock=lambda: moment[0])
    scheduler = scheduler_pod(scheduler_deployment())
    live.pod(exited(scheduler, 2, "2026-11-24T11:50:00Z"), ("volcano-system", "s"))
    assert "env" in live._control_plane[("volcano-system", "s")]["spec"]["containers"][0]
    assert {(f.policy, f.result) for f in live.view().findings} == {
        ("schedulerPanics", "warn"),
        ("controlPlaneRestarts", "fail"),
        ("volcanoAdvisories", "warn"),  # v1.11.0's (tests/audit/test_advisories.py)
    }
    moment[0] = NOW + datetime.timedelta(hours=1)  # the exit ages out of the window
    assert {f.policy for f in live.view().findings} == {"schedulerPanics", "volcanoAdvisories"}

    live.node(node("n1", True, "4"), "n1")
    live.pod(pod("p1", "n1", "volcano", "1", None, "Running"), ("a", "p1"))
    live.node(None, "n1")  # deleted under its pod
    assert "podsOnMissingNodes" not in {f.policy for f in live.view().findings}
    moment[0] += CONFIG.audit.missing_node_grace
    assert "podsOnMissingNodes" in {f.policy for f in live.view().findings}
    live.node(node("n1", True, "4"), "n1")  # back
    assert "podsOnMissingNodes" not in {f.policy for f in live.view().findings}


def test_only_volcanos_own_pods_keep_their_env_and_exits():
    kept = trim("Pod", pod("p1", "n1", "volcano", "1", "g1", "Running"))
    assert "env" not in kept["spec"]["containers"][0]
    assert "containerStatuses" not in kept["status"]


def test_a_queue_event_judges_every_queue_again_as_the_one_shot_audit_does():
    live = LiveAudit(CONFIG, clock=lambda: NOW)
    parent, child = queue("team", "root", res("4")), queue("greedy", "team", res("8"))
    live.queue(parent, "team")
    live.queue(child, "greedy")
    once = findings(ClusterState(queues=[parent, child], now=NOW), CONFIG)
    assert [f for f in live.view().findings if f.kind == "Queue"] == once
    assert [f.name for f in once] == ["greedy", "team"]
    live.queue(queue("team", "root", res("8")), "team")  # raised: both ends are fine
    assert [f for f in live.view().findings if f.kind == "Queue"] == []
    live.queue(None, "team")
    assert [f.name for f in live.view().findings if f.kind == "Queue"] == ["greedy"]  # parent gone


async def test_a_view_that_fails_keeps_the_last_one_and_the_next_change_publishes(caplog):
    """A state the audit cannot judge (a bug yet unknown) is logged, the last view stays (its
    timestamp ages: the stale-audit alert fires) and the next change is judged again; the
    publishing loop does not die with it."""
    audit = AuditWatch(None, CONFIG)
    audit._publish()
    first = audit.published()
    assert first is not None
    judge = audit.live.view

    def broken() -> Any:
        raise ArithmeticError("a judgement that fails")

    audit.live.view = broken  # type: ignore[method-assign]
    audit._publish()
    assert audit.published() is first
    assert "could not judge the cluster" in caplog.text
    audit.live.view = judge  # type: ignore[method-assign]
    audit._publish()
    assert audit.published() is not first
