"""What the audit finds in Volcano's Queues, read from volcano-sh/volcano's scheduler:

- **queueGuarantees** (#4261): the Queues' `spec.guarantee.resource` summed, resource by
  resource, past the allocatable of the nodes Volcano schedules. The scheduler sums every
  Queue's guarantee (plugins capacity and proportion, OnSessionOpen / buildQueueAttrs) and
  compares it with the session's TotalResource: the allocatable of every node in its cache
  (framework/session.go openSession), which holds the nodes its `--node-selector` admits
  (cache/event_handlers.go nodeCanAddCache; the guard's `managedNodeSelectors`), Ready as soon as
  the cache has them, whatever their conditions (api/node_info.go setNodeState). A resource
  the nodes lack counts as none (Resource.LessEqual with Zero). What follows depends on the
  release: up to v1.10 both plugins compute `totalResource.Sub(totalGuarantee)`, whose assert
  panics the scheduler at every session; v1.11 computes that part with ExceededPart, but the
  proportion plugin's `remaining.Sub(increasedDeserved)` still asserts when the guarantees lift
  the queues' deserved past what remains (#4261, fixed in v1.12.0 by #4273), and so does
  capacity's hierarchy (enableHierarchy, from v1.11) with the root's children's guarantees
  (checkHierarchicalQueue); from v1.12 nothing panics, and the guarantees cannot all be met.
  The proportion plugin and capacity without hierarchy sum every Queue, capacity's hierarchy
  the root queue's children only (no parent, or `root`): past the nodes, the children's sum is
  a failure, the sum over every Queue alone a warning, since which mode runs is the
  scheduler's configuration. #4261 also fires when the guarantees fit but
  the scheduler opens a session before its cache has every node: the audit cannot see that.
- **queueHierarchyAnnotations**: Queues carrying `volcano.sh/hierarchy` or
  `volcano.sh/hierarchy-weights`, the hierarchy of the drf plugin's hierarchical mode (every
  release reads them into QueueInfo, api/queue_info.go NewQueueInfo; up to v1.10 they are the
  only way to nest queues, later `spec.parent` is the capacity plugin's). Reported, not judged:
  whether they matter depends on the scheduler's plugin configuration, which the audit does not
  read.

Pure: Queues, nodes and the config in, findings out.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from decimal import Decimal
from typing import Any

from volcano_guard.audit.accounting import Resources, requests_of
from volcano_guard.audit.findings import FAIL, WARN, Finding
from volcano_guard.base.node_selectors import is_managed
from volcano_guard.webhook.config import Config
from volcano_guard.webhook.policies.node_name import node_labels

QUEUE_GUARANTEES = "queueGuarantees"
HIERARCHY_ANNOTATIONS = "queueHierarchyAnnotations"
HIERARCHY, HIERARCHY_WEIGHTS = "volcano.sh/hierarchy", "volcano.sh/hierarchy-weights"
LISTED_QUEUES = 5  # the largest guarantees a message names
ROOT_QUEUE = "root"  # capacity's hierarchy hangs every Queue without a parent under it


def queue_findings(
    queues: Iterable[Mapping[str, Any]], nodes: Iterable[Mapping[str, Any]], config: Config
) -> list[Finding]:
    """Both kinds of finding, from the nodes as the API serves them."""
    queues = list(queues)
    total = scheduled_allocatable(nodes, config) if queues else {}
    return [*guarantee_findings(queues, total), *hierarchy_findings(queues)]


def scheduled_allocatable(nodes: Iterable[Mapping[str, Any]], config: Config) -> Resources:
    """The session's TotalResource: the allocatable of the nodes Volcano's scheduler caches."""
    selectors = config.policies.nodeName.managed_selectors
    return total_of(
        requests_of(_mapping(node.get("status")).get("allocatable"))
        for node in nodes
        if is_managed(node_labels(dict(node)), selectors)
    )


def total_of(allocatables: Iterable[Mapping[str, Decimal]]) -> Resources:
    total: Resources = {}
    for allocatable in allocatables:
        for resource, amount in allocatable.items():
            total[resource] = total.get(resource, Decimal(0)) + amount
    return total


def guarantees(queues: Iterable[Mapping[str, Any]]) -> dict[str, Resources]:
    """Queue name -> its counted guarantee (none: left out)."""
    out: dict[str, Resources] = {}
    for queue in queues:
        guarantee = _mapping(_mapping(queue.get("spec")).get("guarantee")).get("resource")
        counted = {name: amount for name, amount in requests_of(guarantee).items() if amount}
        if counted:
            out[_name(queue)] = counted
    return out


def guarantee_ratios(
    queues: Iterable[Mapping[str, Any]], total: Mapping[str, Decimal]
) -> dict[str, float]:
    """resource -> the Queues' guarantees of it over total (inf: guaranteed of none)."""
    summed = total_of(guarantees(queues).values())
    return {
        resource: float(amount / total[resource]) if total.get(resource) else float("inf")
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
    queues: Iterable[Mapping[str, Any]], total: Mapping[str, Decimal]
) -> Iterator[Finding]:
    """One finding a resource whose guarantees sum past total (the scheduled nodes'
    allocatable), on the Queue guaranteeing the most of it: a failure when the root's children
    alone pass it (every plugin and mode sums them), a warning when only the sum over every
    Queue does (the proportion plugin and capacity without hierarchy; capacity's hierarchy
    sums the root's children only)."""
    queues = list(queues)
    by_queue, top = guarantees(queues), root_children(queues)
    for resource in sorted({name for counted in by_queue.values() for name in counted}):
        held = [(got[resource], name) for name, got in by_queue.items() if resource in got]
        holders = sorted(held, key=lambda one: (-one[0], one[1]))
        summed = sum((amount for amount, _ in holders), Decimal(0))
        top_summed = sum((amount for amount, name in holders if name in top), Decimal(0))
        have = total.get(resource, Decimal(0))
        if summed > have:
            yield Finding(
                QUEUE_GUARANTEES,
                "Queue",
                "",
                holders[0][1],
                _guarantee_message(resource, summed, have, holders, top_summed),
                FAIL if top_summed > have else WARN,
            )


def _guarantee_message(
    resource: str,
    summed: Decimal,
    have: Decimal,
    holders: list[tuple[Decimal, str]],
    top_summed: Decimal,
) -> str:
    def shown(amount: Decimal) -> str:
        return _amount(amount, resource)

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
        f"than the {shown(have)} allocatable of the nodes Volcano schedules{which}: Volcano's "
        "scheduler up to v1.10 panics at every session (its capacity and proportion plugins "
        "subtract the guarantees from the cluster's total), v1.11 can still panic "
        "(volcano-sh/volcano#4261 in the proportion plugin, fixed in v1.12.0 by #4273), and "
        "later releases cannot meet the guarantees; lower them or add nodes"
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


def _amount(amount: Decimal, resource: str) -> str:
    """amount as a user writes it: bytes of memory in the largest binary unit that divides it
    (32Gi, not 34359738368)."""
    exact = amount >= 1024 and amount.adjusted() < 28  # past 28 digits, % cannot be taken
    if resource in BYTES and exact and amount == amount.to_integral_value():
        for power, suffix in reversed(tuple(enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"), 1))):
            if not amount % 1024**power:
                return f"{amount // 1024**power:f}{suffix}"
    return format(amount.normalize(), "f")


BYTES = frozenset({"memory", "ephemeral-storage"})


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _name(obj: Mapping[str, Any]) -> str:
    return str(_mapping(obj.get("metadata")).get("name", ""))
