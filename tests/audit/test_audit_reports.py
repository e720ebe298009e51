"""The audit's PolicyReports (wgpolicyk8s.io/v1alpha2) and its Lease, against the sandbox."""

from __future__ import annotations

import datetime
import json

from kubernetes import client
from prometheus_client import CollectorRegistry, Counter

from tests.sandbox_fixtures import KUBECTL
from volcano_guard.audit.findings import NODE_ACCOUNTING, ORPHANED_PODS, Finding
from volcano_guard.audit.reports import FirstSeen, ReportWriter, reports
from volcano_guard.base.lease import LeaseElector, LeaseSettings
from volcano_guard_sandbox.apiserver.faults import FaultRule

NOW = datetime.datetime(2026, 11, 24, 12, 0, tzinfo=datetime.UTC)


def orphan(name: str, namespace: str = "team-a") -> Finding:
    return Finding(ORPHANED_PODS, "Pod", namespace, name, f"{name} names a missing PodGroup")


OVER = Finding(NODE_ACCOUNTING, "Node", "", "gpu-1", "pods request more cpu than it has")


def test_a_report_lists_at_most_the_limit_and_counts_every_finding():
    found = [orphan(f"p{i}") for i in range(5)] + [OVER]
    seen = FirstSeen()
    seen.update(found, NOW)
    documents = reports(found, seen.seen, limit=3)
    namespaced = documents[("PolicyReport", "team-a")]
    assert namespaced["summary"] == {"pass": 0, "fail": 5, "warn": 0, "error": 0, "skip": 0}
    assert len(namespaced["results"]) == 3
    assert namespaced["results"][0] == {
        "source": "volcano-guard",
        "policy": ORPHANED_PODS,
        "result": "fail",
        "severity": "high",
        "scored": True,
        "category": "Volcano",
        "message": "p0 names a missing PodGroup",
        "timestamp": {"seconds": int(NOW.timestamp()), "nanos": 0},
        "resources": [{"apiVersion": "v1", "kind": "Pod", "name": "p0", "namespace": "team-a"}],
    }
    cluster = documents[("ClusterPolicyReport", "")]
    assert (
        cluster["results"][0]["severity"] == "critical" and "namespace" not in cluster["metadata"]
    )


def test_a_finding_keeps_the_time_it_was_first_seen():
    seen = FirstSeen()
    seen.update([OVER], NOW)
    seen.update([OVER, orphan("p1")], NOW + datetime.timedelta(minutes=5))
    assert seen.seen[OVER] == int(NOW.timestamp())
    seen.update([orphan("p1")], NOW + datetime.timedelta(minutes=6))
    assert OVER not in seen.seen


def writer(api) -> tuple[ReportWriter, Counter]:
    errors = Counter("writes_failed", "test", registry=CollectorRegistry())
    return ReportWriter(api, limit=100, errors=errors), errors


def test_reports_are_written_once_and_again_only_when_they_change(sandbox, api, custom):
    report_writer, _ = writer(api)
    assert report_writer.sync([OVER, orphan("p1")], NOW) == 2
    assert report_writer.sync([OVER, orphan("p1")], NOW + datetime.timedelta(seconds=30)) == 0
    assert report_writer.sync([OVER], NOW) == 1  # team-a's emptied
    stored = custom.get_namespaced_custom_object(
        "wgpolicyk8s.io", "v1alpha2", "team-a", "policyreports", "volcano-guard"
    )
    assert stored["summary"]["fail"] == 0 and stored["results"] == []
    cluster = custom.get_cluster_custom_object(
        "wgpolicyk8s.io", "v1alpha2", "clusterpolicyreports", "volcano-guard"
    )
    assert cluster["results"][0]["resources"][0]["name"] == "gpu-1"
    if KUBECTL:
        listed = kubectl_get(sandbox.url)
        assert "volcano-guard" in listed


def kubectl_get(url: str) -> str:
    import subprocess

    assert KUBECTL is not None
    return subprocess.run(
        [KUBECTL, "--server", url, "get", "clusterpolicyreports"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def test_a_failed_write_is_counted_and_retried_with_backoff(sandbox, api, custom):
    report_writer, errors = writer(api)
    sandbox.set_faults(FaultRule(resources=frozenset({"policyreports"}), error_rate=1.0))
    later = NOW
    assert report_writer.sync([orphan("p1")], later) == 1  # the ClusterPolicyReport only
    for seconds in (2, 4, 8):  # each retry waits twice as long as the one before
        assert (
            report_writer.sync([orphan("p1")], later + datetime.timedelta(seconds=seconds - 1)) == 0
        )
        later += datetime.timedelta(seconds=seconds)
        assert report_writer.sync([orphan("p1")], later) == 0
    assert errors._value.get() == 4
    sandbox.set_faults()
    later += datetime.timedelta(seconds=16)
    assert report_writer.sync([orphan("p1")], later) == 1
    assert custom.get_namespaced_custom_object(
        "wgpolicyk8s.io", "v1alpha2", "team-a", "policyreports", "volcano-guard"
    )


class Replica:
    """An elector with a clock of its own: `local` seconds (monotonic), and a wall clock
    `skew` seconds off the true time."""

    def __init__(self, api, identity: str, settings: LeaseSettings, skew: float = 0) -> None:
        self.local, self.skew = 0.0, skew
        self.elector = LeaseElector(api, identity, settings, clock=lambda: self.local)

    def tick(self, seconds: float) -> bool:
        """`seconds` later on both clocks, one try."""
        self.local += seconds
        return self.elector.try_lead(NOW + datetime.timedelta(seconds=self.local + self.skew))


def test_one_replica_leads_and_another_takes_over_once_the_lease_runs_out(sandbox, api):
    settings = LeaseSettings(namespace="team-a", duration=15)
    first, second = (Replica(api, name, settings) for name in ("audit-a", "audit-b"))
    assert first.tick(0) and not second.tick(0)
    assert first.tick(10)  # renewed
    assert not second.tick(10)  # it saw the renewal 0 s ago on its clock
    assert not second.tick(14)  # 14 s since the change it saw
    assert second.tick(2)  # 16 s: it ran out
    assert not first.tick(17)
    lease = client.CoordinationV1Api(api).read_namespaced_lease("volcano-guard-audit", "team-a")
    assert (lease.spec.holder_identity, lease.spec.lease_transitions) == ("audit-b", 1)


def test_a_standby_tries_again_the_moment_the_lease_it_saw_runs_out(sandbox, api):
    settings = LeaseSettings(namespace="team-a", duration=3, retry=0.6)
    leader, standby = (Replica(api, name, settings) for name in ("audit-a", "audit-b"))
    assert leader.tick(0) and leader.elector.next_try_in() == 0.6  # the leader renews
    assert not standby.tick(0.5)  # it saw the record change at 0.5 s on its clock
    assert standby.elector.next_try_in() == 0.6
    standby.local += 2.6  # its tries at 1.1 ... 2.9 s saw no change; now 3.1 s
    assert abs(standby.elector.next_try_in() - 0.4) < 1e-9  # it runs out at 3.5 s, not 3.7 s
    assert standby.tick(0.4)  # 3 s after the change it saw: it takes over


def test_a_standby_that_cannot_reach_the_api_server_past_the_expiry_waits_between_tries(
    sandbox, api
):
    settings = LeaseSettings(namespace="team-a", duration=3, retry=0.6)
    leader, standby = (Replica(api, name, settings) for name in ("audit-a", "audit-b"))
    assert leader.tick(0) and not standby.tick(0.5)
    sandbox.set_faults(FaultRule(resources=frozenset({"leases"}), error_rate=1.0))
    standby.local += 5  # the record it saw ran out 2.5 s ago, and its tries fail
    assert not standby.tick(0)
    assert standby.elector.next_try_in() == 0.6  # 0 here made a reconciler spin at 73% CPU
    sandbox.set_faults()
    assert standby.tick(0.6)


def test_clocks_60_s_apart_still_give_one_leader(sandbox, api):
    """The renewTime a replica 60 s behind writes looks expired to one on true time, and one
    60 s ahead writes renewals that look 60 s away: neither counts, only seeing them change."""
    settings = LeaseSettings(namespace="team-a", duration=15)
    for skews in ((-60, 0), (60, 0), (0, -60), (0, 60)):
        client.CoordinationV1Api(api).delete_collection_namespaced_lease("team-a")
        leader, standby = (
            Replica(api, name, settings, skew)
            for name, skew in zip(("audit-a", "audit-b"), skews, strict=True)
        )
        assert leader.tick(0) and not standby.tick(0)
        for _ in range(30):  # a minute of renewals and tries, 2 s apart
            assert leader.tick(2) and not standby.tick(2), skews
        assert not standby.tick(14)  # the leader stops: its record unchanged for 14 s
        assert standby.tick(2)


def test_a_leader_that_cannot_renew_stops_before_another_may_take_over(sandbox, api):
    settings = LeaseSettings(namespace="team-a", duration=15, renew_deadline=10)
    leader, standby = (Replica(api, name, settings) for name in ("audit-a", "audit-b"))
    assert leader.tick(0) and not standby.tick(0)
    sandbox.set_faults(FaultRule(resources=frozenset({"leases"}), error_rate=1.0))
    assert leader.tick(9)  # renewals failing, within the renew deadline
    assert not leader.tick(1.5)  # 10.5 s without a renewal: it stops at once
    sandbox.set_faults()
    assert not standby.tick(11)  # 11 s after the change it saw: the lease still runs
    assert standby.tick(4)  # 15 s: it takes over, the old leader long stopped


def test_a_leader_that_stops_releases_the_lease_to_the_next_try(sandbox, api):
    settings = LeaseSettings(namespace="team-a", duration=15)
    leader, standby = (Replica(api, name, settings) for name in ("audit-a", "audit-b"))
    assert leader.tick(0) and not standby.tick(0)
    leader.elector.release()
    assert standby.tick(2)


def test_a_lease_namespace_that_does_not_exist_is_named_with_its_flag(sandbox, api):
    elector = LeaseElector(api, "audit-a", LeaseSettings(namespace="nowhere"))
    assert not elector.try_lead(NOW)
    assert elector.problem == (
        "lease nowhere/volcano-guard-audit: the namespace nowhere does "
        "not exist; create it or choose another with --lease-namespace"
    )


def test_a_queue_finding_goes_to_the_cluster_report_naming_the_queue():
    cycle = Finding(
        "queues", "Queue", "", "loop-a", 'Queue "loop-a": parent "loop-b" makes a cycle'
    )
    seen = FirstSeen()
    seen.update([cycle], NOW)
    (result,) = reports([cycle], seen.seen, limit=3)[("ClusterPolicyReport", "")]["results"]
    assert result["policy"] == "queues" and result["severity"] == "medium"
    assert result["resources"] == [
        {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "name": "loop-a"}
    ]


def test_findings_quoting_huge_names_keep_the_cluster_report_storable():
    """A Queue's resource name is bounded only by the object's size: 100 findings quoting
    100 KB made a 10 MB report, past what the API server stores (1.5 MiB)."""
    huge = "example.com/" + "x" * 100_000
    found = [
        Finding("queues", "Queue", "", f"q{i}", f'Queue "q{i}": capability {huge} 2 is more')
        for i in range(100)
    ]
    seen = FirstSeen()
    seen.update(found, NOW)
    report = reports(found, seen.seen, limit=100)[("ClusterPolicyReport", "")]
    assert len(json.dumps(report)) < 200_000
    message = report["results"][0]["message"]
    assert message.startswith('Queue "q0": capability example.com/xxx')
    assert message.endswith(f"... ({len(found[0].message) - 1024:,} more characters)")
    assert len(message) < 1_100
