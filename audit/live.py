"""The audit kept up to date event by event (`volcano-guard audit --watch`): an event re-evaluates
what it touches, not the cluster.

- a pod: its own findings, its contribution to its node's account, its orphan status;
- a node: its account, and the nodeName findings of the pods bound to it (managed or not);
- a PodGroup: its generation-id finding, and the orphan status of the pods naming it;
- a Volcano workload: its own findings.

What is kept of each object is a projection (`trim`): what the policies and the accounting
read, without managedFields, volumes or status beyond the phase. One owner: every method runs
on the thread that feeds events (`watch.py`); readers take `view()`, an immutable copy.
"""

from __future__ import annotations

import datetime
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from volcano_guard.audit.accounting import (
    NodeAccount,
    Resources,
    is_accounted,
    pod_request,
    requests_of,
)
from volcano_guard.audit.findings import (
    ORPHANED_PODS,
    ClusterState,
    Finding,
    account_findings,
    finding_order,
    orphaned_pods,
    policy_findings,
    unstamped_podgroups,
)
from volcano_guard.base.node_selectors import is_managed
from volcano_guard.webhook.config import Config
from volcano_guard.webhook.policies.node_name import node_labels

Key = tuple[str, str]  # (namespace, name); namespace "" for nodes
_POD_SPEC_DROPPED = ("volumes", "affinity", "tolerations", "topologySpreadConstraints")
_CONTAINER_KEPT = ("name", "resources", "restartPolicy", "image")


def trim(kind: str, obj: Mapping[str, Any]) -> dict[str, Any]:
    """What the audit keeps of an object: the fields the policies and the accounting read."""
    metadata = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    assert isinstance(metadata, dict)
    kept_metadata = {key: metadata[key] for key in (
        "name", "namespace", "uid", "labels", "annotations", "ownerReferences",
        "creationTimestamp") if key in metadata}
    out: dict[str, Any] = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
                           "metadata": kept_metadata}
    spec, status = obj.get("spec"), obj.get("status")
    if kind == "Node":
        out["status"] = {"allocatable": status.get("allocatable")} if isinstance(
            status, dict) else {}
        return out
    if kind == "Pod" and isinstance(spec, dict):
        spec = {key: value for key, value in spec.items() if key not in _POD_SPEC_DROPPED}
        for field_name in ("containers", "initContainers"):
            if isinstance(spec.get(field_name), list):
                spec[field_name] = [
                    {key: c[key] for key in _CONTAINER_KEPT if key in c}
                    if isinstance(c, dict) else c for c in spec[field_name]]
        out["status"] = {"phase": status.get("phase")} if isinstance(status, dict) else {}
    out["spec"] = spec
    return out


@dataclass(frozen=True)
class View:
    """What the audit holds at one moment, for metrics and reports."""

    findings: tuple[Finding, ...]
    accounts: tuple[NodeAccount, ...]  # every managed node's

    def violations(self) -> Counter[tuple[str, str]]:
        """(policy, namespace) -> findings."""
        return Counter((finding.policy, finding.namespace) for finding in self.findings)

    def overcommitted(self) -> Counter[str]:
        """resource -> managed nodes over their allocatable on it."""
        return Counter(resource for account in self.accounts
                       for resource in account.overcommitted())

    def orphans(self) -> Counter[str]:
        """namespace -> orphaned pods."""
        return Counter(finding.namespace for finding in self.findings
                       if finding.policy == ORPHANED_PODS)


def _utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


@dataclass
class LiveAudit:
    config: Config
    clock: Callable[[], datetime.datetime] = _utc_now
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    pods: dict[Key, dict[str, Any]] = field(default_factory=dict)
    podgroups: dict[Key, dict[str, Any]] = field(default_factory=dict)
    workloads: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    # Derived, kept current by the events:
    _object_findings: dict[tuple[str, str, str], tuple[Finding, ...]] = field(
        default_factory=dict)
    _requested: dict[str, Resources] = field(default_factory=dict)  # node -> its pods' sum
    _on_node: dict[str, set[Key]] = field(default_factory=dict)
    _contribution: dict[Key, tuple[str, Resources]] = field(default_factory=dict)
    _naming: dict[Key, set[Key]] = field(default_factory=dict)  # PodGroup -> pods naming it

    # -- events ---------------------------------------------------------------------------

    def node(self, obj: Mapping[str, Any] | None, name: str) -> None:
        """A node added or changed (obj), or deleted (None)."""
        if obj is None:
            self.nodes.pop(name, None)
        else:
            self.nodes[name] = trim("Node", obj)
        for key in list(self._on_node.get(name, ())):  # managed or not may have changed
            self._evaluate_pod(key)

    def pod(self, obj: Mapping[str, Any] | None, key: Key) -> None:
        self._forget_pod(key)
        if obj is not None:
            self.pods[key] = trim("Pod", obj)
            self._index_pod(key)
        self._evaluate_pod(key)

    def podgroup(self, obj: Mapping[str, Any] | None, key: Key) -> None:
        if obj is None:
            self.podgroups.pop(key, None)
        else:
            self.podgroups[key] = trim("PodGroup", obj)
        self._object_findings[("PodGroup", *key)] = tuple(unstamped_podgroups(
            ClusterState(podgroups=[self.podgroups[key]] if key in self.podgroups else []),
            self.config))
        for pod_key in list(self._naming.get(key, ())):
            self._evaluate_pod(pod_key)

    def workload(self, obj: Mapping[str, Any] | None, kind: str, key: Key) -> None:
        full_key = (kind, *key)
        if obj is None:
            self.workloads.pop(full_key, None)
            self._object_findings.pop(full_key, None)
            return
        self.workloads[full_key] = trim(kind, obj)
        self._object_findings[full_key] = tuple(policy_findings(
            ClusterState(nodes=list(self.nodes.values()), workloads=[self.workloads[full_key]]),
            self.config))

    def recheck_orphans(self) -> None:
        """Orphans age into findings without an event: run now and then."""
        for keys in self._naming.values():
            for key in list(keys):
                self._evaluate_pod(key)

    # -- reading --------------------------------------------------------------------------

    def view(self) -> View:
        accounts = tuple(self._accounts())
        found = [*account_findings(accounts),
                 *(finding for found in self._object_findings.values() for finding in found)]
        return View(tuple(sorted(found, key=finding_order)), accounts)

    # -- internals ------------------------------------------------------------------------

    def _accounts(self) -> Iterable[NodeAccount]:
        selectors = self.config.policies.nodeName.managed_selectors
        for name, node in self.nodes.items():
            if is_managed(node_labels(node), selectors):
                allocatable = requests_of((node.get("status") or {}).get("allocatable"))
                requested = {resource: amount for resource, amount in
                             self._requested.get(name, {}).items() if amount}
                yield NodeAccount(name, allocatable, requested)

    def _index_pod(self, key: Key) -> None:
        pod = self.pods[key]
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        if is_accounted(pod):
            request = pod_request(pod)
            self._contribution[key] = (node, request)
            total = self._requested.setdefault(node, {})
            for resource, amount in request.items():
                total[resource] = total.get(resource, Decimal(0)) + amount
        if node:
            self._on_node.setdefault(node, set()).add(key)
        group = ((pod.get("metadata") or {}).get("annotations") or {}).get(
            "scheduling.k8s.io/group-name")
        if group:
            self._naming.setdefault((key[0], str(group)), set()).add(key)

    def _forget_pod(self, key: Key) -> None:
        pod = self.pods.pop(key, None)
        if pod is None:
            return
        node, request = self._contribution.pop(key, ("", {}))
        total = self._requested.get(node)
        if total is not None:
            for resource, amount in request.items():
                total[resource] -= amount
        bound = str((pod.get("spec") or {}).get("nodeName") or "")
        self._on_node.get(bound, set()).discard(key)
        group = ((pod.get("metadata") or {}).get("annotations") or {}).get(
            "scheduling.k8s.io/group-name")
        if group:
            self._naming.get((key[0], str(group)), set()).discard(key)

    def _evaluate_pod(self, key: Key) -> None:
        pod = self.pods.get(key)
        if pod is None:
            self._object_findings.pop(("Pod", *key), None)
            return
        group = ((pod.get("metadata") or {}).get("annotations") or {}).get(
            "scheduling.k8s.io/group-name")
        podgroups = [self.podgroups[(key[0], str(group))]] if group and (
            key[0], str(group)) in self.podgroups else []
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        nodes = [self.nodes[node]] if node in self.nodes else []
        state = ClusterState(nodes=nodes, pods=[pod], podgroups=podgroups, now=self.clock())
        self._object_findings[("Pod", *key)] = (*policy_findings(state, self.config),
                                                *orphaned_pods(state, self.config))
