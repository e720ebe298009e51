"""What the audit finds in a snapshot of the cluster, from the same policy code the webhook runs:

- every existing object the policies in enforce mode would refuse today, with the webhook's
  message:
  each Pod, Volcano Job, CronJob and JobTemplate is evaluated as its own CREATE (resourceRequests
  on pods Volcano places; nodeName on pods placed by any other scheduler, since Volcano binds
  its own); the creator's name is not recorded on an object, so user exemptions cannot apply,
  and a pod is judged as created by whom the cluster vouches for (the nodeName policy's
  `vouched_requester`);
- pods claiming an exemption the cluster denies: a mirror pod its node does not own, a pod of a
  DaemonSet that does not exist;
- managed nodes whose accounted requests pass their allocatable (audit/accounting.py);
- pods naming a PodGroup that does not exist, older than `audit.orphanGracePeriod`;
- PodGroups without a generation id (when the guard stamps them);
- Volcano schedulers armed to panic (no PANIC_ON_ERROR=false): a warning, a failure while a
  managed node is over-committed (its next scheduling session on that node panics);
- Volcano Queues the queues and queueResources policies would refuse today, each evaluated as
  its own CREATE among the others (a cycle, a child over its parent's capability, ...);
- pods bound to a node that does not exist, past `audit.missingNodeGracePeriod`;
- Volcano control-plane containers that exited non-zero within `audit.restartWindow`;
- per Volcano component (Deployment, StatefulSet, DaemonSet or Pod), the known failures of its
  version and whether the guard covers them, and where the sidecar is needed and missing or
  present and not needed (webhook/volcano_versions.py).
- Queues whose guarantees pass the scheduled nodes' allocatable, graded by the release of the
  Volcano schedulers found, and Queues carrying `volcano.sh/hierarchy` annotations
  (audit/queues.py).

Pure: a ClusterState and the config in, findings out; reading the cluster is cluster.py's.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from volcano_guard.audit.accounting import NodeAccount, is_accounted, node_account
from volcano_guard.base.advisories import ADVISORIES_POLICY, SIDECAR_SCOPE_POLICY, Version
from volcano_guard.base.informer import static_snapshot
from volcano_guard.base.jsonbody import object_at
from volcano_guard.base.node_selectors import is_managed
from volcano_guard.base.volcano import (
    NEGATIVE_IDLE_RISK,
    SCHEDULER,
    SCHEDULER_PANICS,
    armed_schedulers,
    component,
    containers,
    may_run_volcano,
    panic_message,
    pod_template_spec,
)
from volcano_guard.webhook.config import Config
from volcano_guard.webhook.evaluation import enabled_checks, evaluate
from volcano_guard.webhook.policies.base import PolicyContext
from volcano_guard.webhook.policies.node_name import NODES, node_labels, vouched_requester
from volcano_guard.webhook.policies.pod_groups import (
    GENERATION_ID,
    GROUP_NAME,
    PODGROUPS,
    podgroup_generation,
    podgroup_record,
)
from volcano_guard.webhook.policies.queues import QUEUES, queue_record
from volcano_guard.webhook.review import (
    AdmissionRequest,
    GroupVersionKind,
    GroupVersionResource,
    UserInfo,
)
from volcano_guard.webhook.volcano_versions import (
    SERVING_KINDS,
    Notice,
    component_runs,
    template_labels,
    workload_notices,
)
from volcano_guard.webhook.workloads import ObjectShapeError

NODE_ACCOUNTING = "nodeAccounting"
ORPHANED_PODS = "orphanedPods"
GENERATION_IDS = "podGroupGenerationIds"
EXEMPTION_CLAIMS = "exemptionClaims"
MISSING_NODES = "podsOnMissingNodes"
CONTROL_PLANE_RESTARTS = "controlPlaneRestarts"
VOLCANO_ADVISORIES, QUEUE_STATUS_SIDECAR = ADVISORIES_POLICY, SIDECAR_SCOPE_POLICY
FAIL, WARN = "fail", "warn"
GO_PANIC_EXIT = 2  # what a Go program exits with when a panic is not recovered
# The Volcano kinds the audit evaluates besides pods: (group, version, kind) -> resource.
WORKLOADS = {
    ("batch.volcano.sh", "v1alpha1", "Job"): "jobs",
    ("batch.volcano.sh", "v1alpha1", "CronJob"): "cronjobs",
    ("flow.volcano.sh", "v1alpha1", "JobTemplate"): "jobtemplates",
}


@dataclass(frozen=True)
class Finding:
    policy: str
    kind: str
    namespace: str  # "" for nodes
    name: str
    message: str
    result: str = FAIL  # or WARN: printed and reported, but not a failure of the audit

    def line(self) -> str:
        """One line, as `check` prints one."""
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        flag = "" if self.result == FAIL else f" [{self.result}]"
        return f"{self.kind} {where}: {self.policy}{flag}: {self.message}"


@dataclass(frozen=True)
class ClusterState:
    """What the audit reads: plain objects as the API serves them."""

    nodes: Sequence[dict[str, Any]] = ()
    pods: Sequence[dict[str, Any]] = ()
    podgroups: Sequence[dict[str, Any]] = ()
    workloads: Sequence[dict[str, Any]] = ()  # Volcano Jobs, CronJobs, JobTemplates
    daemonsets: Sequence[dict[str, Any]] = ()  # their metadata: who vouches for their pods
    controllers: Sequence[dict[str, Any]] = ()  # Deployments and StatefulSets: Volcano's own
    queues: Sequence[dict[str, Any]] = ()  # Volcano's Queues (cluster-scoped)
    now: datetime.datetime = field(default_factory=lambda: datetime.datetime.now(datetime.UTC))


def findings(state: ClusterState, config: Config) -> list[Finding]:
    """Every finding, in a stable order: nodes, then objects by namespace and name."""
    from volcano_guard.audit.queues import queue_findings  # it builds on this module

    nodes = list(node_findings(state, config))
    volcano = [*state.controllers, *state.daemonsets, *state.pods]
    found = [
        *nodes,
        *policy_findings(state, config),
        *orphaned_pods(state, config),
        *unstamped_podgroups(state, config),
        *missing_node_findings(state, config),
        *control_plane_findings(state.pods, config, state.now, overcommitted=bool(nodes)),
        *volcano_findings(volcano, config),
        *queue_findings(state.queues, state.nodes, config, scheduler_versions(volcano, config)),
    ]
    return sorted(found, key=finding_order)


def finding_order(finding: Finding) -> tuple[bool, str, str, str, str]:
    """Nodes first, then objects by namespace, kind and name."""
    return (finding.namespace != "", finding.namespace, finding.kind, finding.name, finding.policy)


def managed_accounts(state: ClusterState, config: Config) -> list[NodeAccount]:
    """The account of every Volcano-managed node (managedNodeSelectors; none: every node)."""
    selectors = config.policies.nodeName.managed_selectors
    by_node: dict[str, list[dict[str, Any]]] = {}
    for pod in state.pods:
        if is_accounted(pod):
            by_node.setdefault(str(_spec(pod).get("nodeName")), []).append(pod)
    return [
        node_account(node, by_node.get(_name(node), ()))
        for node in state.nodes
        if is_managed(node_labels(node), selectors)
    ]


def node_findings(state: ClusterState, config: Config) -> Iterator[Finding]:
    return account_findings(managed_accounts(state, config))


def account_findings(accounts: Iterable[NodeAccount]) -> Iterator[Finding]:
    """A finding for each resource a node's pods request past its allocatable."""
    for account in accounts:
        for resource in account.overcommitted():
            yield Finding(
                NODE_ACCOUNTING,
                "Node",
                "",
                account.node,
                (
                    f"pods bound here request {account.requested.get(resource, 0)} {resource}, "
                    f"more than its allocatable {account.allocatable.get(resource, 0)} "
                    f"({_ratio(account.ratio(resource))}): Volcano's scheduler holds a negative "
                    f"idle {resource} for this node, the precondition of its negative-resource "
                    "panic; move or delete pods bound here around Volcano"
                ),
            )


def policy_findings(state: ClusterState, config: Config) -> Iterator[Finding]:
    context = PolicyContext(
        config,
        {
            NODES: static_snapshot({_name(node): node_labels(node) for node in state.nodes}),
            PODGROUPS: static_snapshot(
                {f"{_namespace(pg)}/{_name(pg)}": podgroup_record(pg) for pg in state.podgroups}
            ),
            QUEUES: static_snapshot({_name(queue): queue_record(queue) for queue in state.queues}),
        },
    )
    checks = enabled_checks("validate", config)
    schedulers = config.volcanoSchedulerNames
    node_uids = {_name(node): _metadata(node).get("uid") for node in state.nodes}
    daemonset_uids = {
        (_namespace(ds), _name(ds)): _metadata(ds).get("uid") for ds in state.daemonsets
    }
    for pod in state.pods:
        user = UserInfo()
        if _spec(pod).get("nodeName") and _spec(pod).get("schedulerName") in schedulers:
            pod = {**pod, "spec": {**_spec(pod), "nodeName": ""}}  # bound by Volcano itself
        elif _spec(pod).get("nodeName"):
            user, denied = vouched_requester(
                pod, node_uids, daemonset_uids, config.policies.nodeName
            )
            if denied:
                yield Finding(EXEMPTION_CLAIMS, "Pod", _namespace(pod), _name(pod), denied)
        yield from _evaluated(pod, ("", "v1", "Pod"), "pods", context, checks, user)
    for workload in state.workloads:
        group, _, version = str(workload.get("apiVersion", "")).rpartition("/")
        kind = (group, version, str(workload.get("kind", "")))
        if kind in WORKLOADS:
            yield from _evaluated(workload, kind, WORKLOADS[kind], context, checks)
    for queue in state.queues:  # each judged as a CREATE among the others (policy queues)
        yield from _evaluated(
            queue, ("scheduling.volcano.sh", "v1beta1", "Queue"), "queues", context, checks
        )


def _evaluated(
    obj: dict[str, Any],
    kind: tuple[str, str, str],
    resource: str,
    context: PolicyContext,
    checks: Any,
    user: UserInfo = UserInfo(),  # noqa: B008 (immutable)
) -> Iterator[Finding]:
    group, version, kind_name = kind
    request = AdmissionRequest(
        uid=str(uuid.uuid4()),
        kind=GroupVersionKind(group, version, kind_name),
        resource=GroupVersionResource(group, version, resource),
        operation="CREATE",
        namespace=_namespace(obj),
        name=_name(obj),
        user=user,
        object=obj,
    )
    try:
        evaluation = evaluate("validate", request, context, checks)
    except ObjectShapeError as exc:
        yield Finding("shape", kind_name, _namespace(obj), _name(obj), str(exc))
        return
    for result in evaluation.results:
        if result.mode != "enforce":  # what a policy would not refuse today is not a finding
            continue
        for violation in result.verdict.violations:
            yield Finding(result.policy, kind_name, _namespace(obj), _name(obj), violation)


def orphaned_pods(state: ClusterState, config: Config) -> Iterator[Finding]:
    existing = {(_namespace(pg), _name(pg)) for pg in state.podgroups}
    for pod in state.pods:
        group = pod_group_name(pod)
        if group and (_namespace(pod), group) not in existing and not finished(pod):
            finding = orphan_finding(
                _namespace(pod), _name(pod), group, created_at(pod), state.now, config
            )
            if finding is not None:
                yield finding


def orphan_finding(
    namespace: str,
    name: str,
    group: str,
    created: datetime.datetime | None,
    now: datetime.datetime,
    config: Config,
) -> Finding | None:
    """The finding for a pod naming a PodGroup that does not exist, once past the grace."""
    if created is None or now - created < config.audit.orphan_grace:
        return None
    return Finding(
        ORPHANED_PODS,
        "Pod",
        namespace,
        name,
        (
            f'names PodGroup "{group}", which does not exist (the pod was created '
            f"{_stamp(created)}); Volcano "
            "will not schedule it: recreate the PodGroup or the pod's workload"
        ),
    )


def missing_node_findings(state: ClusterState, config: Config) -> Iterator[Finding]:
    existing = {_name(node) for node in state.nodes}
    for pod in state.pods:
        node = bound_node(pod)
        if node and node not in existing and not finished(pod):
            finding = missing_node_finding(
                _namespace(pod), _name(pod), node, created_at(pod), state.now, config
            )
            if finding is not None:
                yield finding


def missing_node_finding(
    namespace: str,
    name: str,
    node: str,
    since: datetime.datetime | None,
    now: datetime.datetime,
    config: Config,
) -> Finding | None:
    """The finding for a pod bound to a node that does not exist, once it has been so for
    the grace period (since: when it was first seen so, or its creation)."""
    if since is None or now - since < config.audit.missing_node_grace:
        return None
    return Finding(
        MISSING_NODES,
        "Pod",
        namespace,
        name,
        (
            f'is bound to node "{node}", which does not exist: no kubelet runs it, and '
            "Volcano's agent scheduler panics on such a pod "
            "(volcano-sh/volcano#5924); kube-controller-manager's pod garbage collector deletes "
            "these within about a minute, so check that it runs, or delete the pod"
        ),
    )


def control_plane_findings(
    pods: Iterable[Mapping[str, Any]], config: Config, now: datetime.datetime, overcommitted: bool
) -> Iterator[Finding]:
    """Schedulers armed to panic (one finding a workload, its replicas alike) and recent
    non-zero exits of Volcano's control-plane containers."""
    armed: dict[Finding, None] = {}
    images = config.audit.component_images
    for pod in pods:
        if finished(pod) or not may_run_volcano(_spec(pod), images):
            continue
        for container in armed_schedulers(
            _spec(pod), config.volcanoSchedulerNames, config.audit.component_images
        ):
            armed[scheduler_finding(pod, container, overcommitted)] = None
        yield from restart_findings(pod, config, now)
    yield from armed


def scheduler_finding(pod: Mapping[str, Any], container: str, overcommitted: bool) -> Finding:
    kind, name = owning_workload(pod)
    risk = (
        "a Volcano-managed node is over-committed now (nodeAccounting), so its next "
        "scheduling session on that node panics"
        if overcommitted
        else NEGATIVE_IDLE_RISK
    )
    return Finding(
        SCHEDULER_PANICS,
        kind,
        _namespace(pod),
        name,
        panic_message(container, risk),
        FAIL if overcommitted else WARN,
    )


def restart_findings(
    pod: Mapping[str, Any], config: Config, now: datetime.datetime
) -> Iterator[Finding]:
    """A finding for each Volcano control-plane container of the pod whose last run ended
    with a non-zero exit within the restart window."""
    specs = {str(c.get("name")): c for c in containers(_spec(pod))}
    statuses = _status(pod).get("containerStatuses")
    for status in statuses if isinstance(statuses, list) else ():
        if not isinstance(status, dict):
            continue
        name = str(status.get("name", ""))
        spec = specs.get(name, {})
        which = component(
            {**spec, "image": spec.get("image") or status.get("image")},
            config.volcanoSchedulerNames,
            config.audit.component_images,
        )
        terminated = object_at(object_at(status, "lastState"), "terminated")
        code, ended = terminated.get("exitCode"), _time(terminated.get("finishedAt"))
        if (
            which is None
            or not isinstance(code, int)
            or code == 0
            or ended is None
            or now - ended > config.audit.restart_window
        ):
            continue
        cause = (
            "a Go panic's exit code"
            if code == GO_PANIC_EXIT
            else str(terminated.get("reason") or "error")
        )
        yield Finding(
            CONTROL_PLANE_RESTARTS,
            "Pod",
            _namespace(pod),
            _name(pod),
            (
                f"Volcano's {which} (container {name}) exited with code {code} ({cause}) at "
                f"{_stamp(ended)} and has restarted "
                f"{status.get('restartCount', 0)} times: read its last log with kubectl logs "
                f"--previous -n {_namespace(pod)} {_name(pod)} -c {name}"
            ),
        )


def owning_workload(pod: Mapping[str, Any]) -> tuple[str, str]:
    """The Deployment a pod's ReplicaSet belongs to (its name less the pod-template-hash), the
    other controller it names, or the pod itself."""
    for owner in _metadata(pod).get("ownerReferences") or ():
        if not isinstance(owner, dict) or not owner.get("controller"):
            continue
        name, kind = str(owner.get("name", "")), str(owner.get("kind", ""))
        template_hash = (_metadata(pod).get("labels") or {}).get("pod-template-hash")
        if kind == "ReplicaSet" and template_hash and name.endswith(f"-{template_hash}"):
            return "Deployment", name.removesuffix(f"-{template_hash}")
        return kind, name
    return "Pod", _name(pod)


def volcano_findings(objects: Iterable[Mapping[str, Any]], config: Config) -> Iterator[Finding]:
    """The advisories and sidecar scope of each Volcano component, once a workload: a pod of a
    Deployment is reported as its Deployment (the one read from the Deployment itself alike)."""
    found = {
        Finding(notice.policy, kind, namespace, name, notice.message, notice.result): None
        for (kind, namespace, name), notice in _volcano_notices(objects, config)
    }
    yield from found


def advisory_counts(
    objects: Iterable[Mapping[str, Any]], config: Config
) -> dict[tuple[str, str, str, str], int]:
    """(component, version, advisory, coverage) -> how many Volcano workloads are so, for the
    metrics; an image of unknown version counts as advisory "version-unknown"."""
    workloads: dict[tuple[str, str, str, str], set[tuple[str, str, str]]] = {}
    for workload, notice in _volcano_notices(objects, config):
        if notice.policy != ADVISORIES_POLICY:
            continue
        key = (
            notice.component,
            notice.version,
            notice.advisory or "version-unknown",
            notice.coverage or "none",
        )
        workloads.setdefault(key, set()).add(workload)
    return {key: len(found) for key, found in sorted(workloads.items())}


def scheduler_versions(
    objects: Iterable[Mapping[str, Any]], config: Config
) -> frozenset[Version | None]:
    """The releases of the Volcano batch schedulers the workloads run (None: a tag that names
    no release); the agent scheduler is left out: it runs no Queue plugins (predicates and
    nodeorder only), so Queue guarantees mean nothing to it."""
    return frozenset(
        run.version
        for _, spec, labels in _volcano_workloads(objects, config)
        for run in component_runs(spec, labels, config)
        if run.component == SCHEDULER
    )


def _volcano_notices(
    objects: Iterable[Mapping[str, Any]], config: Config
) -> Iterator[tuple[tuple[str, str, str], Notice]]:
    for workload, spec, labels in _volcano_workloads(objects, config):
        for notice in workload_notices(spec, labels, config):
            yield workload, notice


def _volcano_workloads(
    objects: Iterable[Mapping[str, Any]], config: Config
) -> Iterator[tuple[tuple[str, str, str], Any, Mapping[str, Any]]]:
    """(kind, namespace, name), pod spec and pod labels of each object that may run a Volcano
    component and serves: a pod is named by its workload."""
    for obj in objects:
        spec = pod_template_spec(obj)
        if not may_run_volcano(spec, config.audit.component_images) or finished(obj):
            continue
        kind, name = (
            owning_workload(obj) if obj.get("kind") == "Pod" else (str(obj.get("kind")), _name(obj))
        )
        if kind not in SERVING_KINDS:  # a Job's pod (Volcano's admission-init) serves nothing
            continue
        yield (kind, _namespace(obj), name), spec, template_labels(obj)


def bound_node(pod: Mapping[str, Any]) -> str:
    node = _spec(pod).get("nodeName")
    return node if isinstance(node, str) else ""


def _stamp(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _time(text: Any) -> datetime.datetime | None:
    try:
        moment = datetime.datetime.strptime(str(text), "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        return None
    return moment.replace(tzinfo=datetime.UTC)


def pod_group_name(pod: Mapping[str, Any]) -> str:
    group = _annotations(pod).get(GROUP_NAME)
    return group if isinstance(group, str) else ""


def created_at(obj: Mapping[str, Any]) -> datetime.datetime | None:
    return _time(_metadata(obj).get("creationTimestamp"))


def unstamped_podgroups(state: ClusterState, config: Config) -> Iterator[Finding]:
    if not config.policies.podGroups.stampGenerationId:
        return
    for podgroup in state.podgroups:
        if not podgroup_generation(podgroup):
            yield Finding(
                GENERATION_IDS,
                "PodGroup",
                _namespace(podgroup),
                _name(podgroup),
                (
                    f"has no {GENERATION_ID}: it was created before the guard or while the guard "
                    "was down, so a stale delete of it cannot be told from a current one"
                ),
            )


def _ratio(ratio: float) -> str:
    return "requested of none" if ratio == float("inf") else f"{ratio:.0%} of allocatable"


def finished(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status")
    return isinstance(status, dict) and status.get("phase") in ("Succeeded", "Failed")


def _metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    metadata = obj.get("metadata")
    return metadata if isinstance(metadata, dict) else {}


def _status(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    status = obj.get("status")
    return status if isinstance(status, dict) else {}


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = obj.get("spec")
    return spec if isinstance(spec, dict) else {}


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    annotations = _metadata(obj).get("annotations")
    return annotations if isinstance(annotations, dict) else {}


def _name(obj: Mapping[str, Any]) -> str:
    return str(_metadata(obj).get("name", ""))


def _namespace(obj: Mapping[str, Any]) -> str:
    return str(_metadata(obj).get("namespace", "") or "")
