"""The audit's findings as wgpolicyk8s.io/v1alpha2 PolicyReports (the Kubernetes policy working
group's format, which Kyverno, Trivy-operator and Policy Reporter read): one PolicyReport per
namespace with findings, one ClusterPolicyReport for nodes, both named `volcano-guard`.

A report lists at most `audit.maxResultsPerReport` results, each message at most
base.jsonbody.MESSAGE_CHARACTERS characters; its summary counts them all. Each
result's timestamp is when the finding was first seen, so a report whose findings did not change
is the same document and is not written again.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from volcano_guard.audit.findings import (
    CONTROL_PLANE_RESTARTS,
    EXEMPTION_CLAIMS,
    FAIL,
    GENERATION_IDS,
    MISSING_NODES,
    NODE_ACCOUNTING,
    ORPHANED_PODS,
    QUEUE_STATUS_SIDECAR,
    SCHEDULER_PANICS,
    VOLCANO_ADVISORIES,
    WARN,
    WORKLOADS,
    Finding,
)
from volcano_guard.audit.queues import HIERARCHY_ANNOTATIONS, QUEUE_GUARANTEES
from volcano_guard.base.jsonbody import clipped

log = logging.getLogger("volcano_guard.audit")
API_VERSION = "wgpolicyk8s.io/v1alpha2"
REPORT_NAME = "volcano-guard"
SOURCE = "volcano-guard"
# How bad each kind of finding is, in the report's severities (critical high medium low info).
SEVERITY = {
    NODE_ACCOUNTING: "critical",
    ORPHANED_PODS: "high",
    GENERATION_IDS: "low",
    EXEMPTION_CLAIMS: "high",
    SCHEDULER_PANICS: "critical",
    MISSING_NODES: "high",
    CONTROL_PLANE_RESTARTS: "high",
    VOLCANO_ADVISORIES: "high",  # a known failure of the running Volcano (docs/decisions/audit.md)
    QUEUE_STATUS_SIDECAR: "high",
    QUEUE_GUARANTEES: "critical",
    HIERARCHY_ANNOTATIONS: "info",
}
DEFAULT_SEVERITY = "medium"  # an object the webhook would refuse today
_API_VERSIONS = {
    "Pod": "v1",
    "Node": "v1",
    "PodGroup": "scheduling.volcano.sh/v1beta1",
    "Queue": "scheduling.volcano.sh/v1beta1",
    **{kind: "apps/v1" for kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet")},
    **{kind: f"{group}/{version}" for group, version, kind in WORKLOADS},
}

ReportKey = tuple[str, str]  # (kind, namespace): ("ClusterPolicyReport", "") for nodes


@dataclass
class FirstSeen:
    """When each finding was first seen, for stable result timestamps."""

    seen: dict[Finding, int] = field(default_factory=dict)

    def update(self, findings: Iterable[Finding], now: datetime.datetime) -> None:
        current = set(findings)
        self.seen = {finding: self.seen.get(finding, int(now.timestamp())) for finding in current}


def reports(
    findings: Iterable[Finding],
    first_seen: Mapping[Finding, int],
    limit: int,
    namespaces: Iterable[str] = (),
) -> dict[ReportKey, dict[str, Any]]:
    """The report documents for these findings; namespaces given get a report even with none
    (so a namespace whose last finding went away gets its report emptied)."""
    grouped: dict[ReportKey, list[Finding]] = {
        key: []
        for key in (("ClusterPolicyReport", ""), *(("PolicyReport", ns) for ns in namespaces if ns))
    }
    for finding in findings:
        key = (
            ("PolicyReport", finding.namespace)
            if finding.namespace
            else ("ClusterPolicyReport", "")
        )
        grouped.setdefault(key, []).append(finding)
    return {key: _report(key, found, first_seen, limit) for key, found in grouped.items()}


def _report(
    key: ReportKey, found: list[Finding], first_seen: Mapping[Finding, int], limit: int
) -> dict[str, Any]:
    kind, namespace = key
    metadata: dict[str, Any] = {
        "name": REPORT_NAME,
        "labels": {"app.kubernetes.io/managed-by": "volcano-guard"},
    }
    if namespace:
        metadata["namespace"] = namespace
    return {
        "apiVersion": API_VERSION,
        "kind": kind,
        "metadata": metadata,
        "summary": {
            "pass": 0,
            "fail": sum(f.result == FAIL for f in found),
            "warn": sum(f.result == WARN for f in found),
            "error": 0,
            "skip": 0,
        },
        "results": [_result(finding, first_seen.get(finding, 0)) for finding in found[:limit]],
    }


def _result(finding: Finding, seen: int) -> dict[str, Any]:
    subject: dict[str, Any] = {
        "apiVersion": _API_VERSIONS.get(finding.kind, ""),
        "kind": finding.kind,
        "name": finding.name,
    }
    if finding.namespace:
        subject["namespace"] = finding.namespace
    return {
        "source": SOURCE,
        "policy": finding.policy,
        "result": finding.result,
        "severity": SEVERITY.get(finding.policy, DEFAULT_SEVERITY),
        "scored": True,
        "category": "Volcano",
        "message": clipped(finding.message),
        "timestamp": {"seconds": seen, "nanos": 0},
        "resources": [subject],
    }


RETRY_FIRST, RETRY_MAX = 2.0, 120.0  # seconds: a failed report's backoff doubles between them


class ReportWriter:
    """Writes the reports that changed since it last wrote them (kubernetes client, called from
    a worker thread). A write that fails is counted and tried again at a later sync, after a
    backoff that doubles from RETRY_FIRST up to RETRY_MAX (reset by a success)."""

    def __init__(self, api_client: Any, limit: int, errors: Any) -> None:
        from kubernetes import client

        self._custom = client.CustomObjectsApi(api_client)
        self._limit, self._errors = limit, errors
        self._written: dict[ReportKey, dict[str, Any]] = {}
        self._backoff: dict[ReportKey, tuple[datetime.datetime, float]] = {}  # next try, delay
        self.first_seen = FirstSeen()

    def sync(self, findings: list[Finding], now: datetime.datetime) -> int:
        """Write what changed and is not backing off; the number of reports written."""
        self.first_seen.update(findings, now)
        namespaces = [namespace for kind, namespace in self._written if namespace]
        desired = reports(findings, self.first_seen.seen, self._limit, namespaces)
        written = 0
        for key, document in desired.items():
            if self._written.get(key) == document:
                continue
            next_try, delay = self._backoff.get(key, (now, RETRY_FIRST / 2))
            if now < next_try:
                continue
            try:
                self._write(key, document)
            except Exception as exc:  # the API server may be away: try again later
                self._errors.inc()
                delay = min(delay * 2, RETRY_MAX)
                self._backoff[key] = (now + datetime.timedelta(seconds=delay), delay)
                log.warning(
                    "writing %s %s/%s failed (trying again in %.0f s): %s",
                    key[0],
                    key[1] or "-",
                    REPORT_NAME,
                    delay,
                    exc,
                )
                continue
            self._backoff.pop(key, None)
            self._written[key] = document
            written += 1
        return written

    def _write(self, key: ReportKey, document: dict[str, Any]) -> None:
        from kubernetes.client.exceptions import ApiException

        kind, namespace = key
        plural = "clusterpolicyreports" if kind == "ClusterPolicyReport" else "policyreports"
        group, version = API_VERSION.split("/")
        current: Any
        try:
            current = (
                self._custom.get_namespaced_custom_object(
                    group, version, namespace, plural, REPORT_NAME
                )
                if namespace
                else self._custom.get_cluster_custom_object(group, version, plural, REPORT_NAME)
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
            if namespace:
                self._custom.create_namespaced_custom_object(
                    group, version, namespace, plural, document
                )
            else:
                self._custom.create_cluster_custom_object(group, version, plural, document)
            return
        body = {
            **document,
            "metadata": {
                **document["metadata"],
                "resourceVersion": current["metadata"]["resourceVersion"],
            },
        }
        if namespace:
            self._custom.replace_namespaced_custom_object(
                group, version, namespace, plural, REPORT_NAME, body
            )
        else:
            self._custom.replace_cluster_custom_object(group, version, plural, REPORT_NAME, body)
