"""What the audit finds in Volcano's Queues, read from volcano-sh/volcano's scheduler:

- **queueGuarantees** (#4261): the Queues' `spec.guarantee.resource` summed, resource by
  resource, past the allocatable of the nodes Volcano schedules. The scheduler sums every
  Queue's guarantee (plugins capacity and proportion, OnSessionOpen / buildQueueAttrs) and
  compares it with the session's TotalResource: the allocatable of every node in its cache
  (framework/session.go openSession), which holds the nodes its `--node-selector` admits
  (cache/event_handlers.go nodeCanAddCache; the guard's `managedNodeSelectors`), Ready as soon as
  the cache has them, whatever their conditions (api/node_info.go setNodeState). A resource
  the nodes lack counts as none (Resource.LessEqual with Zero). Which releases panic on it is
  the advisory table's row `queue-guarantees-past-cluster` (base/advisories.py: before
  v1.12.0); from v1.12.0 nothing panics, and the guarantees cannot all be met. So the finding
  is graded by the Volcano schedulers found (their image tags): a warning naming their release
  when every one is of a release the row leaves out, a failure naming the release(s) when any
  is one it covers, runs an image of unknown version, or when none is found.
  The proportion plugin and capacity without hierarchy sum every Queue, capacity's hierarchy
  the root queue's children only (no parent, or `root`): past the nodes, the children's sum is
  graded so, the sum over every Queue alone is a warning, since which mode runs is the
  scheduler's configuration. #4261 also fires when the guarantees fit but
  the scheduler opens a session before its cache has every node: the audit cannot see that.
- **queueHierarchyAnnotations**: Queues carrying `volcano.sh/hierarchy` or
  `volcano.sh/hierarchy-weights`, the hierarchy of the drf plugin's hierarchical mode (every
  release reads them into QueueInfo, api/queue_info.go NewQueueInfo; up to v1.10 they are the
  only way to nest queues, later `spec.parent` is the capacity plugin's). Reported, not judged:
  whether they matter depends on the scheduler's plugin configuration, which the audit does not
  read.

Pure: Queues, nodes, the config and the scheduler releases found in, findings out.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping
from decimal import Decimal
from typing import Any

from volcano_guard.audit.accounting import Resources, requests_of
from volcano_guard.audit.findings import FAIL, WARN, Finding
from volcano_guard.base.advisories import ADVISORIES, GUARANTEES_PAST_CLUSTER, Version
from volcano_guard.base.node_selectors import is_managed
from volcano_guard.base.quantity import EXACT
from volcano_guard.base.volcano import SCHEDULER
from volcano_guard.base.volcano_units import shown_units, volcano_units
from volcano_guard.webhook.config import Config
from volcano_guard.webhook.policies.node_name import node_labels

QUEUE_GUARANTEES = "queueGuarantees"
HIERARCHY_ANNOTATIONS = "queueHierarchyAnnotations"
HIERARCHY, HIERARCHY_WEIGHTS = "volcano.sh/hierarchy", "volcano.sh/hierarchy-weights"
LISTED_QUEUES = 5  # the largest guarantees a message names
ROOT_QUEUE = "root"  # capacity's hierarchy hangs every Queue without a parent under it
# The releases that panic on guarantees past the cluster: one row of the advisory table.
PANICS = next(row for row in ADVISORIES if row.key == GUARANTEES_PAST_CLUSTER)
Schedulers = Collection[Version | None]  # the Volcano schedulers' releases found (None: unknown)


def queue_findings(
    queues: Iterable[Mapping[str, Any]],
    nodes: Iterable[Mapping[str, Any]],
    config: Config,
    schedulers: Schedulers = (),
) -> list[Finding]:
    """Both kinds of finding, from the nodes as the API serves them and the releases of the
    Volcano schedulers found."""
    queues = list(queues)
    total = scheduled_allocatable(nodes, config) if queues else {}
    return [*guarantee_findings(queues, total, schedulers), *hierarchy_findings(queues)]


def scheduled_allocatable(nodes: Iterable[Mapping[str, Any]], config: Config) -> Resources:
    """The session's TotalResource: the allocatable of the nodes Volcano's scheduler caches."""
    selectors = config.policies.nodeName.managed_selectors
    return total_of(
        requests_of(_mapping(node.get("status")).get("allocatable"))
        for node in nodes
        if is_managed(node_labels(dict(node)), selectors)
    )


def total_of(resource_lists: Iterable[Mapping[str, Decimal]]) -> Resources:
    """The lists (as accounting.requests_of parses them) summed in Volcano's units."""
    return _added(in_units(resources) for resources in resource_lists)


def in_units(resources: Mapping[str, Decimal]) -> Resources:
    """A list as NewResource counts it: cpu in millicores, rounded up; the rest as
    base/volcano_units.py says."""
    counted = ((name, volcano_units(name, amount)) for name, amount in resources.items())
    return {name: units for name, units in counted if units is not None}


def _added(unit_lists: Iterable[Mapping[str, Decimal]]) -> Resources:
    """Summed exactly: a forged 1e1000000 overflows the default context."""
    total: Resources = {}
    for units in unit_lists:
        for resource, amount in units.items():
            total[resource] = EXACT.add(total.get(resource, Decimal(0)), amount)
    return total


def _exact_sum(amounts: Iterable[Decimal]) -> Decimal:
    total = Decimal(0)
    for amount in amounts:
        total = EXACT.add(total, amount)
    return total


def guarantees(queues: Iterable[Mapping[str, Any]]) -> dict[str, Resources]:
    """Queue name -> its guarantee in Volcano's units (none: left out)."""
    out: dict[str, Resources] = {}
    for queue in queues:
        guarantee = _mapping(_mapping(queue.get("spec")).get("guarantee")).get("resource")
        counted = {name: units for name, units in in_units(requests_of(guarantee)).items() if units}
        if counted:
            out[_name(queue)] = counted
    return out


def guarantee_ratios(
    queues: Iterable[Mapping[str, Any]], total: Mapping[str, Decimal]
) -> dict[str, float]:
    """resource -> the Queues' guarantees of it over total (inf: guaranteed of none)."""
    summed = _added(guarantees(queues).values())
    return {
        resource: float(EXACT.divide(amount, total[resource]))
        if total.get(resource)
        else float("inf")
        for resource, amount in sorted(summed.items())
    }


def root_children(queues: Iterable[Mapping[str, Any]]) -> set[str]:
    """The Queues capacity's hierarchy puts under the root queue: no parent, or `root`."""
    return {
        _name(queue)
        for queue in queues
        if _mapping(queue.get("spec")).get("parent") in (None, "", ROOT_QUEUE)
        and _name(queue) != ROOT_QUEUE
    }


def guarantee_findings(
    queues: Iterable[Mapping[str, Any]], total: Mapping[str, Decimal], schedulers: Schedulers = ()
) -> Iterator[Finding]:
    """One finding a resource whose guarantees sum past total (the scheduled nodes'
    allocatable), on the Queue guaranteeing the most of it: graded by the schedulers
    (`panic_verdict`) when the root's children alone pass it (every plugin and mode sums them),
    a warning when only the sum over every Queue does (the proportion plugin and capacity
    without hierarchy; capacity's hierarchy sums the root's children only)."""
    queues = list(queues)
    by_queue, top = guarantees(queues), root_children(queues)
    verdict, said = panic_verdict(schedulers)
    for resource in sorted({name for counted in by_queue.values() for name in counted}):
        held = [(got[resource], name) for name, got in by_queue.items() if resource in got]
        by_name = sorted(held, key=lambda one: one[1])
        holders = sorted(by_name, key=lambda one: one[0], reverse=True)  # stable: names in ties
        summed = _exact_sum(amount for amount, _ in holders)
        top_summed = _exact_sum(amount for amount, name in holders if name in top)
        have = total.get(resource, Decimal(0))
        if summed > have:
            yield Finding(
                QUEUE_GUARANTEES,
                "Queue",
                "",
                holders[0][1],
                _guarantee_message(resource, summed, have, holders, top_summed, said),
                verdict if top_summed > have else WARN,
            )


def panic_verdict(schedulers: Schedulers) -> tuple[str, str]:
    """(result, what the schedulers found do with guarantees past the cluster): a warning only
    when every one found is of a release the advisory row leaves out."""
    cited = f"{PANICS.upstream()}; {PANICS.releases()}"
    panicking = sorted({v for v in schedulers if v is not None and PANICS.affects(SCHEDULER, v)})
    unknown = None in schedulers
    if not schedulers:
        return FAIL, (
            "no Volcano scheduler was found to tell whether it panics at its sessions on that: "
            f"releases before {PANICS.fixed_in} do ({cited})"
        )
    if panicking:
        another = ", and another runs an image whose tag names no release" if unknown else ""
        return FAIL, (
            f"Volcano's scheduler {_releases(panicking)} panics at its sessions on that"
            f"{another} ({cited})"
        )
    if unknown:
        return FAIL, (
            "Volcano's scheduler runs an image whose tag names no release, and releases before "
            f"{PANICS.fixed_in} panic at their sessions on that ({cited})"
        )
    return WARN, (
        f"Volcano's scheduler {_releases(schedulers)} does not panic on that ({cited}) but "
        "cannot meet the guarantees"
    )


def _releases(versions: Iterable[Version | None]) -> str:
    return ", ".join(str(version) for version in sorted(v for v in set(versions) if v))


def _guarantee_message(
    resource: str,
    summed: Decimal,
    have: Decimal,
    holders: list[tuple[Decimal, str]],
    top_summed: Decimal,
    said: str,
) -> str:
    def shown(amount: Decimal) -> str:
        return shown_units(resource, amount)

    named = ", ".join(f"{name} {shown(amount)}" for amount, name in holders[:LISTED_QUEUES])
    more = f" and {len(holders) - LISTED_QUEUES} more" if len(holders) > LISTED_QUEUES else ""
    which = (
        ""
        if top_summed > have
        else (
            f" (the root queue's children guarantee {shown(top_summed)}, which fits: only "
            "the proportion plugin and the capacity plugin without enableHierarchy sum every "
            "Queue)"
        )
    )
    return (
        f"the Queues' guarantees of {resource} sum to {shown(summed)} ({named}{more}), more "
        f"than the {shown(have)} allocatable of the nodes Volcano schedules{which}: {said}; "
        "lower them or add nodes"
    )


def hierarchy_findings(queues: Iterable[Mapping[str, Any]]) -> Iterator[Finding]:
    for queue in queues:
        annotations = _mapping(_mapping(queue.get("metadata")).get("annotations"))
        hierarchy, weights = annotations.get(HIERARCHY), annotations.get(HIERARCHY_WEIGHTS)
        if hierarchy is None and weights is None:
            continue
        yield Finding(
            HIERARCHY_ANNOTATIONS,
            "Queue",
            "",
            _name(queue),
            (
                f"{HIERARCHY}={hierarchy or ''!r}, {HIERARCHY_WEIGHTS}={weights or ''!r}: the "
                "hierarchy of the drf plugin's hierarchical mode (the only way to nest queues up "
                "to Volcano v1.10); the guard does not judge it, as whether it counts depends on "
                "the scheduler's plugins; spec.parent is the capacity plugin's hierarchy"
            ),
            WARN,
        )


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _name(obj: Mapping[str, Any]) -> str:
    return str(_mapping(obj.get("metadata")).get("name", ""))
