"""The audit's metrics, read at scrape time from the last published View (immutable: the event
loop swaps it in after each batch of events, so a scrape never sees half an update)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

from prometheus_client import Counter, Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from volcano_guard.audit.churn import ANNOTATION_KEYS, RATE_WINDOW, TOP_NODES, ChurnView
from volcano_guard.audit.live import View
from volcano_guard.base.metrics import PREFIX, REGISTRY

LEADING = Gauge(
    f"{PREFIX}audit_leader",
    "1 while this audit replica holds the lease (exports "
    "the audit's gauges and writes its reports), 0 while it stands by.",
    registry=REGISTRY,
)
REPORT_WRITE_ERRORS = Counter(
    f"{PREFIX}audit_report_write_errors",
    "PolicyReport writes that failed (each is retried at the next sync).",
    registry=REGISTRY,
)

ALWAYS_REPORTED = frozenset({"cpu", "memory", "pods"})


class AuditCollector(Collector):
    """volcano_guard_audit_violations{policy,namespace}, audit_warnings{policy,namespace},
    node_request_ratio{node,resource},
    overcommitted_nodes{resource}, orphaned_pods{namespace}, queue_guarantee_ratio{resource},
    audit_last_evaluation_timestamp_seconds,
    volcano_advisories{component,version,advisory,coverage}."""

    def __init__(self, view: Callable[[], tuple[View, float] | None]) -> None:
        self._view = view  # (the view, when it was evaluated) or None before the first

    def collect(self) -> Iterator[Metric]:
        published = self._view()
        violations = GaugeMetricFamily(
            f"{PREFIX}audit_violations",
            "Findings of the audit now, by policy and namespace (namespace empty for nodes).",
            labels=["policy", "namespace"],
        )
        warnings = GaugeMetricFamily(
            f"{PREFIX}audit_warnings",
            "Warnings of the audit now (risks that are not failures yet), by policy and namespace.",
            labels=["policy", "namespace"],
        )
        ratio = GaugeMetricFamily(
            f"{PREFIX}node_request_ratio",
            "A Volcano-managed node's accounted requests over "
            "its allocatable, by resource (+Inf: requested of none).",
            labels=["node", "resource"],
        )
        overcommitted = GaugeMetricFamily(
            f"{PREFIX}overcommitted_nodes",
            "Volcano-managed nodes whose accounted requests pass their allocatable, by resource.",
            labels=["resource"],
        )
        orphans = GaugeMetricFamily(
            f"{PREFIX}orphaned_pods",
            "Pods naming a PodGroup that does not exist, past the grace period, by namespace.",
            labels=["namespace"],
        )
        guaranteed = GaugeMetricFamily(
            f"{PREFIX}queue_guarantee_ratio",
            "Volcano Queues' guarantees summed over the allocatable of "
            "the nodes Volcano schedules, by resource (over 1: queueGuarantees; +Inf: "
            "guaranteed of none).",
            labels=["resource"],
        )
        evaluated = GaugeMetricFamily(
            f"{PREFIX}audit_last_evaluation_timestamp_seconds",
            "When the audit's findings were last brought up to date (Unix time).",
        )
        if published is not None:
            view, at = published
            for (policy, namespace), count in sorted(view.violations().items()):
                violations.add_metric([policy, namespace], count)
            for (policy, namespace), count in sorted(view.warnings().items()):
                warnings.add_metric([policy, namespace], count)
            for account in view.accounts:
                for resource in account.resources():
                    value = account.ratio(resource)
                    ratio.add_metric(
                        [account.node, resource], math.inf if value == float("inf") else value
                    )
            counts = view.overcommitted()
            for resource in sorted(counts.keys() | ALWAYS_REPORTED):  # 0s too, for graphs
                overcommitted.add_metric([resource], counts.get(resource, 0))
            for namespace, count in sorted(view.orphans().items()):
                orphans.add_metric([namespace], count)
            for resource, value in view.guarantee_ratios:
                guaranteed.add_metric([resource], value)
            evaluated.add_metric([], at)
        yield from (violations, warnings, ratio, overcommitted, orphans, guaranteed, evaluated)
        yield advisory_family(published[0] if published is not None else None)
        yield from churn_families(published[0].churn if published is not None else None)


def advisory_family(view: View | None) -> Metric:
    """Volcano workloads by component, version, advisory and whether the guard covers it."""
    family = GaugeMetricFamily(
        f"{PREFIX}volcano_advisories",
        "Volcano workloads a known failure of their version affects, by component, version, "
        "advisory and coverage (on, off, none, unavailable; advisory version-unknown: an image "
        "tag that names no release).",
        labels=["component", "version", "advisory", "coverage"],
    )
    for labels, count in (view.advisories if view is not None else {}).items():
        family.add_metric(list(labels), count)
    return family


def churn_families(churn: ChurnView | None) -> Iterator[Metric]:
    """The managed nodes' update counts and rates (audit/churn.py); no samples before the
    first view."""
    updates = CounterMetricFamily(
        f"{PREFIX}audit_node_updates",
        "Updates of Volcano-managed nodes (each reaches Volcano's "
        "scheduler cache), by the field they changed (other: none of these).",
        labels=["field"],
    )
    annotations = CounterMetricFamily(
        f"{PREFIX}audit_node_annotation_updates",
        "Updates of Volcano-managed nodes by the "
        f"annotation key they changed (the first {ANNOTATION_KEYS} keys; other: the rest).",
        labels=["key"],
    )
    rate = GaugeMetricFamily(
        f"{PREFIX}audit_node_update_rate",
        f"Updates a minute of the {TOP_NODES} busiest "
        f"Volcano-managed nodes (averaged over about {RATE_WINDOW:.0f} s).",
        labels=["node"],
    )
    churning = GaugeMetricFamily(
        f"{PREFIX}audit_churning_nodes",
        "Volcano-managed nodes updated more often than audit.nodeUpdatesPerMinute.",
    )
    sharing = GaugeMetricFamily(
        f"{PREFIX}audit_scheduler_device_sharing",
        "1 when the config says Volcano's scheduler "
        "runs with device sharing (audit.schedulerDeviceSharing), where node updates race "
        "its scheduling.",
    )
    if churn is not None:
        for name, count in sorted(churn.updates.items()):
            updates.add_metric([name], count)
        for key, count in sorted(churn.annotation_updates.items()):
            annotations.add_metric([key], count)
        for node, per_minute in churn.busiest:
            rate.add_metric([node], per_minute)
        churning.add_metric([], churn.churning)
        sharing.add_metric([], 1 if churn.device_sharing else 0)
    yield from (updates, annotations, rate, churning, sharing)
