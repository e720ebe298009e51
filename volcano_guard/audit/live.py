"""The audit kept up to date event by event (`volcano-guard audit --watch`): an event re-evaluates
what it touches, not the cluster.

- a pod: its own findings, its contribution to its node's account, its orphan status;
- a node: its account, and the nodeName findings of the pods bound to it (managed or not);
  deleted, the pods bound to it (reported past a grace); added, those pods no longer;
- a PodGroup: its generation-id finding, and the orphan status of the pods naming it;
- a Volcano workload: its own findings;
- a DaemonSet: the nodeName findings of the bound pods it controls (it vouches for them);
- a Queue: every Queue's findings, judged again when the view is next taken, the guarantee
  findings against the managed nodes' allocatable, graded by the Volcano schedulers' pods.

What is kept of a pod is a PodRecord of a few hundred bytes (its node, its account, the
PodGroup it names, its findings); of the few pods whose findings can change with their node,
and of other objects, a projection (`trim`) without managedFields, volumes or status beyond the
phase. One owner: every method runs on the event loop that feeds events (`watch.py`); readers
take `view()`, an immutable copy.
"""

from __future__ import annotations

import datetime
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from volcano_guard.audit.accounting import (
    NodeAccount,
    Resources,
    is_accounted,
    pod_request,
    requests_of,
)
from volcano_guard.audit.churn import ChurnView, NodeChurn
from volcano_guard.audit.findings import (
    FAIL,
    ORPHANED_PODS,
    ClusterState,
    Finding,
    account_findings,
    advisory_counts,
    control_plane_findings,
    created_at,
    finding_order,
    finished,
    missing_node_finding,
    orphan_finding,
    pod_group_name,
    policy_findings,
    scheduler_versions,
    unstamped_podgroups,
    volcano_findings,
)
from volcano_guard.audit.queues import (
    guarantee_findings,
    guarantee_ratios,
    hierarchy_findings,
    total_of,
)
from volcano_guard.base.node_selectors import is_managed
from volcano_guard.base.volcano import COMPONENT_IMAGES, may_run_volcano
from volcano_guard.webhook.config import Config
from volcano_guard.webhook.policies.node_name import daemonset_owner, node_labels

Key = tuple[str, str]  # (namespace, name); namespace "" for nodes
_POD_SPEC_DROPPED = ("volumes", "affinity", "tolerations", "topologySpreadConstraints")
_CONTAINER_KEPT = ("name", "resources", "restartPolicy", "image")
_CONTROL_PLANE_KEPT = ("command", "args", "env")  # of Volcano's own pods: what arms a panic


def trim(
    kind: str, obj: Mapping[str, Any], images: Mapping[str, str] = COMPONENT_IMAGES
) -> dict[str, Any]:
    """What the audit keeps of an object: the fields the policies and the accounting read, and
    of a pod that may run a Volcano component (by `images`), its containers' command, args and
    env and their last exits."""
    metadata = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    assert isinstance(metadata, dict)
    kept_metadata = {
        key: metadata[key]
        for key in (
            "name",
            "namespace",
            "uid",
            "labels",
            "annotations",
            "ownerReferences",
            "creationTimestamp",
        )
        if key in metadata
    }
    if kind == "Node":  # an update is told from a re-list's replay by its resourceVersion
        kept_metadata["resourceVersion"] = metadata.get("resourceVersion")
    out: dict[str, Any] = {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "metadata": kept_metadata,
    }
    spec, status = obj.get("spec"), obj.get("status")
    if kind == "DaemonSet":  # who vouches for its pods: its name and uid
        return out
    if kind == "Node":  # what the accounting and the churn counts read
        out["status"] = (
            {key: status.get(key) for key in ("allocatable", "capacity", "conditions")}
            if isinstance(status, dict)
            else {}
        )
        return out
    if kind == "Pod" and isinstance(spec, dict):
        control_plane = may_run_volcano(spec, images)
        kept = _CONTAINER_KEPT + _CONTROL_PLANE_KEPT if control_plane else _CONTAINER_KEPT
        spec = {key: value for key, value in spec.items() if key not in _POD_SPEC_DROPPED}
        for field_name in ("containers", "initContainers"):
            if isinstance(spec.get(field_name), list):
                spec[field_name] = [
                    {key: c[key] for key in kept if key in c} if isinstance(c, dict) else c
                    for c in spec[field_name]
                ]
        out["status"] = {"phase": status.get("phase")} if isinstance(status, dict) else {}
        if control_plane and isinstance(status, dict):
            out["status"]["containerStatuses"] = _last_exits(status.get("containerStatuses"))
    out["spec"] = spec
    return out


def _last_exits(statuses: Any) -> list[dict[str, Any]]:
    """Container statuses as the restart finding reads them."""
    return (
        [
            {
                "name": status.get("name"),
                "image": status.get("image"),
                "restartCount": status.get("restartCount"),
                "lastState": {"terminated": (status.get("lastState") or {}).get("terminated")},
            }
            for status in statuses
            if isinstance(status, dict)
        ]
        if isinstance(statuses, list)
        else []
    )


@dataclass(frozen=True)
class View:
    """What the audit holds at one moment, for metrics and reports."""

    findings: tuple[Finding, ...]
    accounts: tuple[NodeAccount, ...]  # every managed node's
    churn: ChurnView | None = None  # managed nodes' updates (--watch only)
    # (component, version, advisory, coverage) -> Volcano workloads so (webhook/volcano_versions)
    advisories: Mapping[tuple[str, str, str, str], int] = field(default_factory=dict)
    # resource -> the Queues' guarantees over the managed nodes' allocatable
    guarantee_ratios: tuple[tuple[str, float], ...] = ()

    def violations(self) -> Counter[tuple[str, str]]:
        """(policy, namespace) -> failures."""
        return Counter(
            (finding.policy, finding.namespace)
            for finding in self.findings
            if finding.result == FAIL
        )

    def warnings(self) -> Counter[tuple[str, str]]:
        """(policy, namespace) -> warnings."""
        return Counter(
            (finding.policy, finding.namespace)
            for finding in self.findings
            if finding.result != FAIL
        )

    def overcommitted(self) -> Counter[str]:
        """resource -> managed nodes over their allocatable on it."""
        return Counter(
            resource for account in self.accounts for resource in account.overcommitted()
        )

    def orphans(self) -> Counter[str]:
        """namespace -> orphaned pods."""
        return Counter(
            finding.namespace for finding in self.findings if finding.policy == ORPHANED_PODS
        )


def _daemonset_key(pod: Mapping[str, Any]) -> Key | None:
    """The DaemonSet a pod names as its controller (namespace, name), if it names one."""
    owner = daemonset_owner(dict(pod))
    if owner is None:
        return None
    return (str((pod.get("metadata") or {}).get("namespace") or ""), str(owner.get("name")))


def _version(node: Mapping[str, Any]) -> Any:
    return (node.get("metadata") or {}).get("resourceVersion")


def _utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


@dataclass(frozen=True, slots=True)
class PodRecord:
    """What the audit keeps of a pod: enough to re-judge it when its node or its PodGroup
    changes, a few hundred bytes. The whole (trimmed) pod is kept only where its findings can
    change with its node: bound, and not placed by Volcano (the nodeName policy)."""

    node: str
    request: tuple[tuple[str, Decimal], ...]  # what it adds to its node's account
    group: str  # the PodGroup it names, or ""
    created: datetime.datetime | None
    finished: bool
    policy_findings: tuple[Finding, ...]


@dataclass
class LiveAudit:
    config: Config
    clock: Callable[[], datetime.datetime] = _utc_now
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    pods: dict[Key, PodRecord] = field(default_factory=dict)
    podgroups: dict[Key, dict[str, Any]] = field(default_factory=dict)
    workloads: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    daemonsets: dict[Key, dict[str, Any]] = field(default_factory=dict)
    queues: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Derived, kept current by the events:
    _object_findings: dict[tuple[str, str, str], tuple[Finding, ...]] = field(
        default_factory=dict
    )  # only objects with findings
    _requested: dict[str, Resources] = field(default_factory=dict)  # node -> its pods' sum
    # Managed node -> its allocatable, parsed once per node event rather than on every view.
    _managed: dict[str, Resources] = field(default_factory=dict)
    _node_sensitive: dict[Key, dict[str, Any]] = field(default_factory=dict)
    _on_node: dict[str, set[Key]] = field(default_factory=dict)  # node -> node-sensitive pods
    _naming: dict[Key, set[Key]] = field(default_factory=dict)  # PodGroup -> pods naming it
    _controlled: dict[Key, set[Key]] = field(default_factory=dict)  # DaemonSet -> node-sensitive
    _control_plane: dict[Key, dict[str, Any]] = field(default_factory=dict)  # Volcano's pods
    # Pods bound to a node that does not exist: (the node, when first seen so).
    _unplaced: dict[Key, tuple[str, datetime.datetime]] = field(default_factory=dict)
    _queue_findings: tuple[Finding, ...] | None = None  # None: judge the Queues again
    churn: NodeChurn = field(default_factory=NodeChurn)

    # -- events ---------------------------------------------------------------------------

    def node(self, obj: Mapping[str, Any] | None, name: str) -> None:
        """A node added or changed (obj), or deleted (None)."""
        if obj is None:
            if self.nodes.pop(name, None) is not None:
                self._unplace(key for key, record in self.pods.items() if record.node == name)
            self._managed.pop(name, None)
            self.churn.forget(name)
        else:
            if name not in self.nodes:
                for key in [k for k, (node, _) in self._unplaced.items() if node == name]:
                    del self._unplaced[key]
            old, node = self.nodes.get(name), trim("Node", obj)
            self.nodes[name] = node
            if is_managed(node_labels(node), self.config.policies.nodeName.managed_selectors):
                self._managed[name] = requests_of((node.get("status") or {}).get("allocatable"))
                if old is not None and _version(old) != _version(node):
                    self.churn.updated(name, old, node, self.clock().timestamp())
            else:
                self._managed.pop(name, None)
                self.churn.forget(name)
        self._rejudge(self._on_node.get(name, ()))  # managed or not may have changed

    def daemonset(self, obj: Mapping[str, Any] | None, key: Key) -> None:
        if obj is None:
            self.daemonsets.pop(key, None)
        else:
            self.daemonsets[key] = trim("DaemonSet", obj)
        self._rejudge(self._controlled.get(key, ()))

    def pod(self, obj: Mapping[str, Any] | None, key: Key) -> None:
        self._forget_pod(key)
        if obj is not None:
            self._add_pod(trim("Pod", obj, self.config.audit.component_images), key)
        self._judge_pod(key)

    def podgroup(self, obj: Mapping[str, Any] | None, key: Key) -> None:
        if obj is None:
            self.podgroups.pop(key, None)
        else:
            self.podgroups[key] = trim("PodGroup", obj)
        self._set_findings(
            ("PodGroup", *key),
            tuple(
                unstamped_podgroups(
                    ClusterState(podgroups=[self.podgroups[key]] if key in self.podgroups else []),
                    self.config,
                )
            ),
        )
        for pod_key in list(self._naming.get(key, ())):
            self._judge_pod(pod_key)

    def workload(self, obj: Mapping[str, Any] | None, kind: str, key: Key) -> None:
        full_key = (kind, *key)
        if obj is None:
            self.workloads.pop(full_key, None)
            self._object_findings.pop(full_key, None)
            return
        self.workloads[full_key] = trim(kind, obj)
        self._set_findings(
            full_key,
            tuple(
                policy_findings(
                    ClusterState(
                        nodes=list(self.nodes.values()), workloads=[self.workloads[full_key]]
                    ),
                    self.config,
                )
            ),
        )

    def queue(self, obj: Mapping[str, Any] | None, name: str) -> None:
        """A Queue changed: every Queue is judged again when next read (a Queue's change moves
        its relatives' sums and capabilities; judged once a view, not once an event: the first
        list would otherwise judge n Queues n times)."""
        if obj is None:
            self.queues.pop(name, None)
        else:
            self.queues[name] = trim("Queue", obj)
        self._queue_findings = None

    def recheck_orphans(self) -> None:
        """Orphans age into findings without an event: run now and then."""
        for keys in self._naming.values():
            for key in list(keys):
                self._judge_pod(key)

    # -- reading --------------------------------------------------------------------------

    def view(self) -> View:
        accounts = tuple(self._accounts())
        now = self.clock()
        overcommitted = any(account.overcommitted() for account in accounts)
        # Against the managed nodes' allocatable, as parsed at their last event.
        queued_total = total_of(self._managed.values()) if self.queues else {}
        found = [
            *account_findings(accounts),
            *(finding for found in self._object_findings.values() for finding in found),
            *self._judged_queues(),
            *control_plane_findings(self._control_plane.values(), self.config, now, overcommitted),
            *volcano_findings(self._control_plane.values(), self.config),
            *(
                finding
                for finding in (
                    missing_node_finding(*key, node, since, now, self.config)
                    for key, (node, since) in self._unplaced.items()
                )
                if finding
            ),
            *guarantee_findings(
                self.queues.values(),
                queued_total,
                scheduler_versions(self._control_plane.values(), self.config),
            ),
            *hierarchy_findings(self.queues.values()),
        ]
        audit = self.config.audit
        return View(
            tuple(sorted(found, key=finding_order)),
            accounts,
            self.churn.view(
                now.timestamp(), audit.nodeUpdatesPerMinute, audit.schedulerDeviceSharing
            ),
            advisory_counts(self._control_plane.values(), self.config),
            tuple(guarantee_ratios(self.queues.values(), queued_total).items()),
        )

    # -- internals ------------------------------------------------------------------------

    def _judged_queues(self) -> tuple[Finding, ...]:
        if self._queue_findings is None:
            state = ClusterState(queues=list(self.queues.values()))
            self._queue_findings = tuple(policy_findings(state, self.config))
        return self._queue_findings

    def _accounts(self) -> Iterable[NodeAccount]:
        for name, allocatable in self._managed.items():
            requested = {
                resource: amount
                for resource, amount in self._requested.get(name, {}).items()
                if amount
            }
            yield NodeAccount(name, dict(allocatable), requested)

    def _policy_findings(self, pod: dict[str, Any]) -> tuple[Finding, ...]:
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        nodes = [self.nodes[node]] if node in self.nodes else []
        key = _daemonset_key(pod)
        daemonset = self.daemonsets.get(key) if key else None
        return tuple(
            policy_findings(
                ClusterState(nodes=nodes, pods=[pod], daemonsets=[daemonset] if daemonset else []),
                self.config,
            )
        )

    def _rejudge(self, keys: Iterable[Key]) -> None:
        """Node-sensitive pods whose node or DaemonSet changed: their findings anew."""
        for key in list(keys):
            record = self.pods[key]
            self.pods[key] = replace(
                record, policy_findings=self._policy_findings(self._node_sensitive[key])
            )
            self._judge_pod(key)

    def _add_pod(self, pod: dict[str, Any], key: Key) -> None:
        spec = pod.get("spec") if isinstance(pod.get("spec"), dict) else {}
        assert isinstance(spec, dict)
        node = str(spec.get("nodeName") or "")
        request = tuple(sorted(pod_request(pod).items())) if is_accounted(pod) else ()
        record = PodRecord(
            node,
            request,
            pod_group_name(pod),
            created_at(pod),
            finished(pod),
            self._policy_findings(pod),
        )
        self.pods[key] = record
        if request:
            total = self._requested.setdefault(node, {})
            for resource, amount in request:
                total[resource] = total.get(resource, Decimal(0)) + amount
        if node and spec.get("schedulerName") not in self.config.volcanoSchedulerNames:
            self._node_sensitive[key] = pod
            self._on_node.setdefault(node, set()).add(key)
            daemonset = _daemonset_key(pod)
            if daemonset is not None:
                self._controlled.setdefault(daemonset, set()).add(key)
        if record.group:
            self._naming.setdefault((key[0], record.group), set()).add(key)
        if may_run_volcano(spec, self.config.audit.component_images):
            self._control_plane[key] = pod
        if node and node not in self.nodes:
            self._unplace([key])

    def _unplace(self, keys: Iterable[Key]) -> None:
        """Pods now bound to a node that does not exist, from now (finished ones aside)."""
        now = self.clock()
        for key in list(keys):
            if not self.pods[key].finished:
                self._unplaced.setdefault(key, (self.pods[key].node, now))

    def _forget_pod(self, key: Key) -> None:
        self._control_plane.pop(key, None)
        self._unplaced.pop(key, None)
        record = self.pods.pop(key, None)
        if record is None:
            return
        total = self._requested.get(record.node)
        if total is not None:
            for resource, amount in record.request:
                total[resource] -= amount
        pod = self._node_sensitive.pop(key, None)
        if pod is not None:
            self._on_node.get(record.node, set()).discard(key)
            self._controlled.get(_daemonset_key(pod) or ("", ""), set()).discard(key)
        if record.group:
            self._naming.get((key[0], record.group), set()).discard(key)

    def _judge_pod(self, key: Key) -> None:
        """The pod's findings: its policy findings and, if it names a missing PodGroup, the
        orphan finding (which the clock can bring about without an event)."""
        record = self.pods.get(key)
        if record is None:
            self._object_findings.pop(("Pod", *key), None)
            return
        found = record.policy_findings
        if record.group and not record.finished and (key[0], record.group) not in self.podgroups:
            orphan = orphan_finding(
                key[0], key[1], record.group, record.created, self.clock(), self.config
            )
            found = (*found, orphan) if orphan else found
        self._set_findings(("Pod", *key), found)

    def _set_findings(self, key: tuple[str, str, str], found: tuple[Finding, ...]) -> None:
        if found:
            self._object_findings[key] = found
        else:
            self._object_findings.pop(key, None)
