"""Policy queues: refuse the Volcano Queue shapes that crash or hang Volcano.

Two Policy objects, one config section (`policies.queues`, one mode):

- queues (webhook, reads the Queue cache): what Volcano v1.15.1's admission checks of a
  `spec.parent` hierarchy (`validateHierarchicalQueueResources`): the parent exists; the queue's
  capability is within its nearest ancestor's that sets each resource; the guarantees and the
  deserved of a parent's children sum within the parent's; a parent's capability covers its
  descendants' largest. Plus what v1.15.1 misses: a queue re-parented onto itself or its own
  descendant (volcano-sh/volcano#5807, which pins Volcano's admission at 100% CPU and aborts
  scheduling sessions), or under a parent chain that loops. Every walk over the cache is bounded
  by its size: a corrupted or hostile cache cannot make it loop.
- queueResources (in the API server where the config installs admission policies, else the
  webhook): what the object alone decides: quantities that are not quantities or are below
  zero, and guarantee <= deserved <= capability for each resource both name (#4292).

Quantities compare as Volcano's scheduler counts them (api.NewResource: milli-units for cpu,
ephemeral-storage and extended resources, units for memory and pods, rounded up; other
resources are not counted); decisions follow docs/decisions/policies.md. The
`volcano.sh/hierarchy` annotations of releases up to v1.10 are never judged here.

Outside this module the guard uses only what __all__ lists: the two Policy objects, for the
registry (webhook.evaluation); QUEUES and queue_record, for the audit and `check` to build the
Queue snapshot as the cache does (MANIFESTS_ONLY marks one built from manifests alone), then
judge each Queue through the registry as a CREATE (`check` tells a Queue by is_queue); its
config section, for the config.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Mapping
from decimal import Decimal
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import msgspec

from volcano_guard.base.informer import Snapshot
from volcano_guard.base.jsonbody import object_at
from volcano_guard.base.quantity import EXACT, QuantityError, parse_quantity
from volcano_guard.base.volcano_units import scaled, shown_units, volcano_scale
from volcano_guard.webhook.cel import Expr, all_of, any_of, concat, kind_is, operation_is
from volcano_guard.webhook.policies.base import (
    NOTHING_FOUND,
    VALIDATE,
    InServerCheck,
    Policy,
    PolicyContext,
    Rule,
    Scope,
    Verdict,
    WatchedList,
    reported,
)
from volcano_guard.webhook.review import AdmissionRequest
from volcano_guard.webhook.sections import Mode, Section

if TYPE_CHECKING:  # config.py gathers the policies' sections: at run time, it imports this
    from volcano_guard.webhook.config import Config

__all__ = [
    "HIERARCHY_POLICY",
    "MANIFESTS_ONLY",
    "QUEUES",
    "RESOURCES_POLICY",
    "QueuesConfig",
    "is_queue",
    "queue_record",
]


class QueuesConfig(Section, frozen=True):
    """`policies.queues`."""

    mode: Mode = "enforce"


NAME, RESOURCES = "queues", "queueResources"
QUEUE = ("scheduling.volcano.sh", "Queue")
ROOT = "root"  # Volcano's root queue: every queue without a parent is its child
FIELDS = ("capability", "deserved", "guarantee")  # as messages name them
ORDER = "Volcano needs guarantee <= deserved <= capability for each resource"
# (lower, higher, unless this one names the resource): the comparisons order is made of; a
# guarantee meets the capability only where no deserved stands between them.
PAIRS = (
    ("deserved", "capability", ""),
    ("guarantee", "deserved", ""),
    ("guarantee", "capability", "deserved"),
)
# The resource_version of a Queue snapshot built from manifests (`check`): a parent missing
# from it may well exist in the cluster, so it is not judged.
MANIFESTS_ONLY = "manifests"


def settings(config: Config) -> QueuesConfig:
    return config.policies.queues


class QueueRecord(msgspec.Struct, frozen=True):
    """What the Queue cache keeps of a Queue: its name, its parent ("" for none) and its three
    resource lists as written (quantity text or numbers)."""

    name: str = ""
    parent: str = ""
    capability: dict[str, Any] = msgspec.field(default_factory=dict)
    deserved: dict[str, Any] = msgspec.field(default_factory=dict)
    guarantee: dict[str, Any] = msgspec.field(default_factory=dict)
    # each of FIELDS as Volcano counts it (units_of): once, when the Queue enters the cache,
    # not once a decision that reads it; () for a record built without (then counted on use)
    units: tuple[dict[str, Decimal], ...] = ()

    def field(self, name: str) -> dict[str, Any]:
        """One of FIELDS by name."""
        found: dict[str, Any] = getattr(self, name)
        return found


def queue_record(obj: dict[str, Any]) -> QueueRecord:
    spec = object_at(obj, "spec")
    name, parent = object_at(obj, "metadata").get("name"), spec.get("parent")
    lists = (
        _resources(spec.get("capability")),
        _resources(spec.get("deserved")),
        _resources(object_at(spec, "guarantee").get("resource")),
    )
    return QueueRecord(
        name if isinstance(name, str) else "",
        parent if isinstance(parent, str) else "",
        *lists,
        tuple(_counted(field, values) for field, values in zip(FIELDS, lists, strict=True)),
    )


def _resources(value: Any) -> dict[str, Any]:
    """A resource list's entries of a scalar JSON type (a quantity or not: the order check
    names what is not one, as the in-server check does)."""
    if not isinstance(value, dict):
        return {}
    return {str(key): raw for key, raw in value.items() if isinstance(raw, str | int | float)}


def cached_queue(obj: dict[str, Any]) -> QueueRecord:
    """What the webhook's cache keeps of a Queue: its counts without the lists as written,
    which only the queue judged is read for (its messages, its order): 100,000 queues keep
    ~60 MiB, not ~130 (each quantity's count is one Decimal shared by all who write it)."""
    record = queue_record(obj)
    return QueueRecord(record.name, record.parent, _NONE, _NONE, _NONE, record.units)


# The lists cached_queue leaves out, and every empty count: one empty dict for all, unwritten.
_NONE: dict[str, Any] = {}


QUEUES = WatchedList("queues", "Queue", cached_queue, QUEUE[0], "v1beta1")


def is_queue(request: AdmissionRequest) -> bool:
    return (request.kind.group, request.kind.kind) == QUEUE and not request.sub_resource


def _written(request: AdmissionRequest) -> bool:
    return is_queue(request) and request.operation in ("CREATE", "UPDATE") and bool(request.object)


# -- the object alone: quantities and their order ------------------------------------------------


def _text(raw: Any) -> str:
    """A quantity as the message shows it (CEL: string(value))."""
    if isinstance(raw, bool):
        return "true" if raw else "false"
    return raw if isinstance(raw, str) else str(raw)


def _quantity(raw: Any) -> Decimal | None:
    try:
        return parse_quantity(raw)
    except QuantityError:
        return None


def order_problems(described: str, queue: QueueRecord) -> list[str]:
    """Quantities that are not quantities or are below zero, then each resource out of order,
    in the order the in-server check finds them (queueResources)."""
    found: list[str] = []
    parsed: dict[str, dict[str, Decimal]] = {}
    for field in FIELDS:
        parsed[field] = {}
        for resource, raw in queue.field(field).items():
            quantity = _quantity(raw)
            if quantity is None:
                found.append(f"{described}: {field} {resource} {_text(raw)} is not a quantity")
            elif quantity < 0:
                found.append(
                    f"{described}: {field} {resource} {_text(raw)} is below zero; use a "
                    "quantity >= 0"
                )
            parsed[field][resource] = quantity if quantity is not None else Decimal(0)
    for low, high, only_without in PAIRS:
        for resource, raw in queue.field(low).items():
            skipped = only_without and resource in queue.field(only_without)
            if resource not in queue.field(high) or skipped:
                continue
            if _quantity(raw) is None or _quantity(queue.field(high)[resource]) is None:
                continue
            if parsed[low][resource] > parsed[high][resource]:
                found.append(
                    out_of_order(described, low, high, resource, raw, queue.field(high)[resource])
                )
    return found


def out_of_order(
    described: str, low: str, high: str, resource: str, low_value: Any, high_value: Any
) -> str:
    return (
        f"{described}: {low} {resource} {_text(low_value)} is more than {high} {resource} "
        f"{_text(high_value)}; {ORDER}"
    )


# -- against the other queues: v1.15.1's hierarchy checks, and cycles ----------------------------


# One Decimal for each quantity text and scale, shared by every queue that writes it: the
# cache keeps each queue's counts, and 100,000 queues of "1" and "1Gi" need a handful.
@lru_cache(maxsize=4096, typed=True)  # typed: True is not the quantity 1
def _units(raw: Any, scale: int) -> Decimal | None:
    quantity = _quantity(raw)
    return None if quantity is None else scaled(quantity, scale)


def counted(values: Mapping[str, Any]) -> dict[str, Decimal]:
    """A resource list as Volcano counts it; what does not parse is left out."""
    found: dict[str, Decimal] = {}
    for resource, raw in values.items():
        scale = volcano_scale(resource)
        units = None if scale is None else _units(raw, scale)
        if units is not None:
            found[resource] = units
    return found


def units_of(record: QueueRecord, field: str) -> Mapping[str, Decimal]:
    """counted(record.field(field)), as queue_record keeps it: the capability's resources
    above 0 only (the hierarchy reads no other)."""
    if record.units:
        return record.units[FIELDS.index(field)]
    return _counted(field, record.field(field))


def _counted(field: str, values: Mapping[str, Any]) -> dict[str, Decimal]:
    if not values:
        return _NONE
    found = counted(values)
    return {r: units for r, units in found.items() if units > 0} if field == FIELDS[0] else found


def _exceeded(limit: Mapping[str, Decimal], total: Mapping[str, Decimal]) -> list[str]:
    """The resources in which limit.LessPartly(total, api.Zero) holds: cpu and memory below
    the total (absent counts 0); any other resource the total names and the limit does not,
    or that the limit holds less of."""
    found = [r for r in ("cpu", "memory") if limit.get(r, 0) < total.get(r, 0)]
    # by name: the same order however the total was summed (once a snapshot, or again)
    scalars = sorted(r for r in {**limit, **total} if r not in ("cpu", "memory"))
    return found + [
        r for r in scalars if (r in total and r not in limit) or limit.get(r, 0) < total.get(r, 0)
    ]


def _positive(values: Mapping[str, Decimal]) -> list[str]:
    """Resource.ResourceNames(): the resources counted at least 0.1 (whole units: above 0)."""
    return [resource for resource, units in values.items() if units > 0]


class ChildrenIndex:
    """One snapshot's queues by parent name (each list by name), and the sums of their
    guarantees and deserved by parent, each summed when first asked."""

    def __init__(self, queues: Mapping[str, QueueRecord]) -> None:
        self.children: dict[str, list[QueueRecord]] = {}
        for name in sorted(queues):
            record = queues[name]
            self.children.setdefault(record.parent, []).append(record)
        self._sums: dict[tuple[str, str], dict[str, Decimal]] = {}
        self._ends: dict[str, bool] = {}

    def ends(self, name: str, queues: Mapping[str, QueueRecord]) -> bool:
        """name's parent chain in the snapshot reaches the root or a queue missing from it,
        without a loop; remembered for every queue on the way, so `check` and the audit,
        judging every queue of a chain 4,000 deep, walk it once, not once a queue."""
        path: dict[str, None] = {}  # in walk order, and a set's lookup: one walk, not n^2
        current, ended = name, True
        while current not in self._ends:
            record = queues.get(current)
            if record is None:
                break
            if current in path:
                ended = False
                break
            path[current] = None
            if record.parent in ("", ROOT):
                ended = record.parent != current  # the root queue as its own parent loops
                break
            current = record.parent
        else:
            ended = self._ends[current]
        for seen in path:
            self._ends[seen] = ended
        return ended

    def sums(self, parent: str, field: str) -> dict[str, Decimal]:
        found = self._sums.get((parent, field))
        if found is None:
            found = self._sums[(parent, field)] = summed(self.children.get(parent, []), field)
        return found


def summed(records: Iterable[QueueRecord], field: str) -> dict[str, Decimal]:
    """The units of field summed over records, each resource any of them names."""
    total: dict[str, Decimal] = {}
    for record in records:
        for resource, units in units_of(record, field).items():
            total[resource] = EXACT.add(total.get(resource, Decimal(0)), units)
    return total


# The index of the last snapshot a decision read: the informer publishes a new mapping on each
# change, and `check` and the audit judge every Queue against one. One entry: tuple assignment
# is atomic, so decisions in threads at worst build it twice.
_last_index: tuple[Mapping[str, QueueRecord], ChildrenIndex] | None = None


def children_index(queues: Mapping[str, QueueRecord]) -> ChildrenIndex:
    """The index of queues, built once a snapshot."""
    global _last_index
    last = _last_index
    if last is not None and last[0] is queues:
        return last[1]
    index = ChildrenIndex(queues)
    _last_index = (queues, index)
    return index


class Hierarchy:
    """The cached queues as one decision reads them: by name and by parent, the queue judged
    taking its place (its cached version is the one it replaces). The index by parent is built
    once a snapshot (children_index), not once a decision: with 100,000 queues a copy and a
    sort cost ~60 ms, which every Queue request, and `check` once a Queue, paid. The walks
    below visit a queue once for all resources: a decision costs the queues it reads, not
    that times the resources they name."""

    def __init__(self, queue: QueueRecord, queues: Mapping[str, QueueRecord]) -> None:
        self.queue = queue
        self._queues = queues
        self._replaced = queues.get(queue.name)
        self._index = children_index(queues)

    def get(self, name: str) -> QueueRecord | None:
        return self.queue if name == self.queue.name else self._queues.get(name)

    def children(self, name: str) -> list[QueueRecord]:
        """The queues whose parent is name, by name; only the lists the judged queue leaves or
        joins are copied."""
        listed = self._index.children.get(name, [])
        if not self._leaves(name) and self.queue.parent != name:
            return listed
        found = [record for record in listed if record is not self._replaced]
        if self.queue.parent == name:
            bisect.insort(found, self.queue, key=lambda record: record.name)
        return found

    def _leaves(self, name: str) -> bool:
        """The judged queue's cached version is a child of name."""
        return self._replaced is not None and self._replaced.parent == name

    def child_sums(self, name: str, field: str) -> dict[str, Decimal]:
        """summed(self.children(name), field): from the snapshot's sums where the judged queue
        left name's children as they were (`check`, the audit: it is the cached one) or joins
        them (a CREATE), one sum a snapshot; summed again where it replaces one of them."""
        unchanged = self._replaced == self.queue
        if self._leaves(name) and not unchanged:
            return summed(self.children(name), field)
        cached = self._index.sums(name, field)
        if self.queue.parent != name or unchanged:
            return cached
        units = tuple(cached if name == field else _NONE for name in FIELDS)
        return summed((QueueRecord(units=units), self.queue), field)

    def capability(self, record: QueueRecord) -> Mapping[str, Decimal]:
        """The resources record's capability sets above 0, as Volcano counts them."""
        return units_of(record, "capability")

    def ancestors(self) -> Iterator[QueueRecord]:
        """The queue's parent, its parent's, ... up to the root, a queue missing from the
        cache, or a queue already seen (a loop): at most one step a cached queue."""
        seen, parent = {self.queue.name}, self.queue.parent
        while parent not in ("", ROOT) and parent not in seen:
            record = self.get(parent)
            if record is None:
                return
            seen.add(parent)
            yield record
            parent = record.parent

    def loop(self) -> list[str] | None:
        """The names from the queue up its parent chain to the first one seen twice, when the
        chain loops (through the queue itself or above it); None when it ends."""
        if self._replaced == self.queue and self._index.ends(self.queue.name, self._queues):
            return None  # as cached (`check`, the audit), and the snapshot's chain ends
        chain = [self.queue.name, *(record.name for record in self.ancestors())]
        last = self.get(chain[-1])
        end = last.parent if last is not None else ""
        return [*chain, end] if end in chain else None

    def nearest_limits(self, resources: Iterable[str]) -> dict[str, QueueRecord]:
        """For each of resources, the nearest ancestor whose capability sets it above 0 (none:
        left out). One pass up the chain; each ancestor costs the resources it names."""
        pending: set[str] = set(resources)
        found: dict[str, QueueRecord] = {}
        for ancestor in self.ancestors():
            if not pending:
                break
            limits = self.capability(ancestor)
            settled = pending & limits.keys() if len(pending) < len(limits) else limits.keys()
            for resource in [r for r in settled if r in pending]:
                pending.discard(resource)
                found[resource] = ancestor
        return found

    def subtree_max(
        self, tops: Iterable[QueueRecord], resources: Iterable[str]
    ) -> dict[str, tuple[Decimal, str]]:
        """findSubtreeMaxCapability for each of resources, the largest over tops: a queue's
        capability of a resource when above 0, else the largest of its children's subtrees';
        with the queue that sets it. One walk for all resources: a queue's capability counts
        for a resource unless a queue above it (below the judged one) sets it, which `blocked`
        counts along the path; below a queue where every resource is set (`covered`), nothing
        is read, as Volcano's walk stops there. Each queue is visited once, the judged one
        never (it is the subtree's parent); ties go to the queue Volcano's order finds first."""
        wanted = set(resources)
        best: dict[str, tuple[Decimal, str]] = {}
        blocked: dict[str, int] = {}
        covered = 0  # resources of wanted set by a queue on the path
        seen = {self.queue.name}
        pending: list[tuple[QueueRecord, bool]] = [(top, False) for top in reversed(list(tops))]
        while pending and wanted:
            record, leaving = pending.pop()
            if not leaving and record.name in seen:
                continue
            seen.add(record.name)
            limits = self.capability(record)
            setting = [(r, limits[r]) for r in limits if r in wanted]
            if leaving:
                for resource, _ in setting:
                    blocked[resource] -= 1
                    covered -= not blocked[resource]
                continue
            for resource, units in setting:
                if not blocked.get(resource) and units > best.get(resource, (0, ""))[0]:
                    best[resource] = (units, record.name)
                covered += not blocked.get(resource)
                blocked[resource] = blocked.get(resource, 0) + 1
            pending.append((record, True))
            if covered < len(wanted):
                pending.extend((child, False) for child in self.children(record.name))
        return best


def hierarchy_problems(
    described: str,
    queue: QueueRecord,
    queues: Mapping[str, QueueRecord],
    parents_known: bool = True,
    judge_loops: bool = True,
) -> list[str]:
    """What the queue's place among the cached queues breaks: a loop in its parent chain
    first (nothing else is judged on one; judge_loops false: an UPDATE that keeps its parent
    made no loop, and is not refused for one), then v1.15.1's checks but for the root queue.
    parents_known false: a parent missing from queues is not judged."""
    if queue.name == ROOT and queue.parent not in ("", ROOT):
        # Every parent chain ends at the root: a parent on it loops back, whether or not the
        # chain above the parent names the root (no parent counts as the root's child).
        return [_root_problem(described, queue)] if judge_loops else []
    hierarchy = Hierarchy(queue, queues)
    loop = hierarchy.loop()
    if loop is not None:
        return [_loop_problem(described, queue, loop)] if judge_loops else []
    if queue.name == ROOT:
        return []
    found: list[str] = []
    if queue.parent not in ("", ROOT):
        parent = hierarchy.get(queue.parent)
        if parent is None:
            if not parents_known:
                return []
            return [
                f'{described}: parent queue "{queue.parent}" does not exist; create it first '
                "(if it was just created, retry)"
            ]
        found += _against_ancestors(described, hierarchy)
        found += _sums(described, hierarchy, parent, False)
    children = [c for c in hierarchy.children(queue.name) if c.name != queue.name]
    if children:
        found += _against_descendants(described, hierarchy, children)
        found += _sums(described, hierarchy, queue, True)
    return found


# A loop's path in a message: its first and last names, the rest counted. A loop through a
# cache of 20,000 long names, named in full, was a 5 MB message: an answer past the size cap.
LOOP_SHOWN = (5, 3)


def _loop_path(loop: list[str]) -> str:
    first, last = LOOP_SHOWN
    names = [f'"{name}"' for name in loop]
    if len(names) > first + last + 1:
        names = [*names[:first], f"... {len(names) - first - last:,} more ...", *names[-last:]]
    return " -> ".join(names)


def _root_problem(described: str, queue: QueueRecord) -> str:
    return (
        f'{described}: the root queue cannot have a parent ("{queue.parent}"): every queue\'s '
        "parent chain ends at the root, so any parent makes a cycle; remove spec.parent"
    )


def _loop_problem(described: str, queue: QueueRecord, loop: list[str]) -> str:
    path = _loop_path(loop)
    if loop[-1] == queue.name:
        return (
            f'{described}: parent "{queue.parent}" makes a cycle ({path}): a queue cannot be its '
            "own ancestor; Volcano's admission and scheduler loop on it"
        )
    return (
        f"{described}: its parent chain loops ({path}) and never reaches the root queue; fix "
        "the parent of one of those queues first"
    )


def _against_ancestors(described: str, hierarchy: Hierarchy) -> list[str]:
    """validateChildAgainstAncestor: each resource of the queue's capability within the
    capability of the nearest ancestor that sets it above 0."""
    found = []
    own = hierarchy.capability(hierarchy.queue)
    nearest = hierarchy.nearest_limits(_positive(own))
    for resource in _positive(own):
        ancestor = nearest.get(resource)
        if ancestor is None:
            continue
        limit = hierarchy.capability(ancestor)[resource]
        if own[resource] > limit:
            found.append(
                f"{described}: capability {resource} {shown_units(resource, own[resource])} "
                f"is more than the capability {resource} {shown_units(resource, limit)} of "
                f'its ancestor queue "{ancestor.name}"; a child queue cannot have more '
                "capability than its ancestors"
            )
    return found


def _against_descendants(
    described: str, hierarchy: Hierarchy, children: list[QueueRecord]
) -> list[str]:
    """validateChildrenConstraints, capability: each resource of the queue's capability at
    least the largest capability of it in its children's subtrees."""
    found = []
    own = hierarchy.capability(hierarchy.queue)
    largest = hierarchy.subtree_max(children, _positive(own))
    for resource in _positive(own):
        best, holder = largest.get(resource, (Decimal(0), ""))
        if own[resource] < best:
            found.append(
                f"{described}: capability {resource} {shown_units(resource, own[resource])} is "
                f"less than the capability {resource} {shown_units(resource, best)} of its "
                f'descendant queue "{holder}"; a parent queue needs at least the capability of '
                "each queue below it"
            )
    return found


def _sums(described: str, hierarchy: Hierarchy, parent: QueueRecord, as_parent: bool) -> list[str]:
    """validateSiblingsSum (the queue among its parent's children) and
    validateChildrenConstraints (the queue as the parent): the children's guarantees, then
    their deserved, summed, within the parent's. Volcano stops at the first child whose running
    sum passes; with quantities >= 0 (queueResources) that is the same outcome as the sum."""
    found = []
    for field in ("guarantee", "deserved"):
        total = hierarchy.child_sums(parent.name, field)
        limit = units_of(parent, field)
        for resource in _exceeded(limit, total):
            summed = shown_units(resource, total.get(resource, Decimal(0)))
            whose, owner = ("it", "its") if as_parent else ("the parent", "the parent's")
            held = (
                f"more than {owner} {field} {resource} {shown_units(resource, limit[resource])}"
                if resource in limit
                else f"while {whose} sets no {field} of {resource}"
            )
            children_of = (
                "its child queues have a"
                if as_parent
                else f'with it, the child queues of parent queue "{parent.name}" have a'
            )
            found.append(
                f"{described}: {children_of} {field} of {resource} summing to {summed}, {held}; "
                f"a parent queue's {field} must cover its children's"
            )
    return found


# -- the decision --------------------------------------------------------------------------------


def _same(first: Mapping[str, Any], second: Mapping[str, Any]) -> bool:
    """equality.Semantic.DeepEqual of two resource lists: the same resources, equal amounts."""
    if first.keys() != second.keys():
        return False
    return all(
        _quantity(first[key]) == _quantity(second[key])
        if _quantity(first[key]) is not None
        else first[key] == second[key]
        for key in first
    )


def needs_hierarchy(queue: QueueRecord, old: QueueRecord | None) -> bool:
    """needsValidateHierarchicalQueue (the root queue aside: its parent chain is still
    walked): a CREATE, or an UPDATE of the parent or of a resource list. No parent and the root
    are one place: Volcano's queue controller patches `parent: root` onto a Queue without one,
    which moves nothing."""
    if old is None or (old.parent or ROOT) != (queue.parent or ROOT):
        return True
    return not all(_same(queue.field(f), old.field(f)) for f in FIELDS)


def _raw_lists(obj: dict[str, Any]) -> tuple[Any, ...]:
    """The resource lists as sent (absent: None), compared as the API server's CEL compares them."""
    spec = object_at(obj, "spec")
    return (
        spec.get("capability"),
        spec.get("deserved"),
        object_at(spec, "guarantee").get("resource"),
    )


def validate_resources(request: AdmissionRequest, context: PolicyContext) -> Verdict | None:
    """Every CREATE; an UPDATE only when it changes a resource list, as Volcano judges the
    hierarchy: a Queue out of order from before stays writable (labels, Volcano's controller
    patching its parent or annotations) until its resources are written."""
    if not _written(request):
        return None
    old = request.old_object if request.operation == "UPDATE" else None
    if old is not None and _raw_lists(request.object or {}) == _raw_lists(old):
        return NOTHING_FOUND
    found = order_problems(request.describe(), queue_record(request.object or {}))
    return Verdict(violations=reported(tuple(found))) if found else NOTHING_FOUND


def validate_hierarchy(request: AdmissionRequest, context: PolicyContext) -> Verdict | None:
    if not _written(request):
        return None
    queue = queue_record(request.object or {})
    if not queue.name:  # generateName: no queue can name it as its parent yet
        queue = msgspec.structs.replace(queue, name=request.object_name)
    updated = request.operation == "UPDATE" and request.old_object is not None
    old = queue_record(request.old_object or {}) if updated else None
    if not needs_hierarchy(queue, old):
        return NOTHING_FOUND
    snapshot: Snapshot[QueueRecord] | None = context.snapshot(QUEUES)
    if snapshot is None:
        return NOTHING_FOUND  # no cluster to judge against
    if not snapshot.synced:
        if not context.config.failClosed:
            return NOTHING_FOUND
        return Verdict(
            violations=(
                f"{request.describe()}: the Queue cache is not synced, and failClosed is true; "
                "retry",
            )
        )
    found = hierarchy_problems(
        request.describe(),
        queue,
        snapshot.items,
        parents_known=snapshot.resource_version != MANIFESTS_ONLY,
        judge_loops=old is None or old.parent != queue.parent,
    )
    return Verdict(violations=reported(tuple(found))) if found else NOTHING_FOUND


# -- registrations and the in-server check -------------------------------------------------------


def _queues_rule() -> Rule:
    return Rule(QUEUE[0], "v1beta1", ("queues",), ("CREATE", "UPDATE"), "Cluster")


def _present(obj: str, *path: str) -> str:
    """CEL: obj has every field of path, each under the one before."""
    return " && ".join(f"has({obj}.{'.'.join(path[: depth + 1])})" for depth in range(len(path)))


def _changed(*path: str) -> str:
    """CEL: an UPDATE changes the field at path (added, removed or different)."""
    now, before = _present("object", *path), _present("oldObject", *path)
    field = ".".join(path)
    return f"({now}) != ({before}) || ({now} && object.{field} != oldObject.{field})"


_LIST_PATHS = (("capability",), ("deserved",), ("guarantee", "resource"))


def _written_condition(*paths: tuple[str, ...]) -> str:
    """CEL: a Queue CREATE, or an UPDATE that changes a field at one of paths (below spec)."""
    changes = any_of(*(_changed("spec", *path) for path in paths))
    return any_of(operation_is("CREATE"), all_of(operation_is("UPDATE"), changes))


def hierarchy_scopes(config: Config) -> tuple[Scope, ...]:
    """Queue CREATEs, and UPDATEs of the parent or a resource list (status is a subresource:
    Volcano's status writes never reach it). failurePolicy Fail: the hierarchy is judged
    only against the cache, and a Queue written while the guard is down can hang Volcano."""
    condition = all_of(kind_is(*QUEUE), _written_condition(("parent",), *_LIST_PATHS))
    return (Scope(VALIDATE, (_queues_rule(),), condition),)


def resources_scopes(config: Config) -> tuple[Scope, ...]:
    """Queue CREATEs, and UPDATEs of a resource list (validate_resources)."""
    return (Scope(VALIDATE, (_queues_rule(),), all_of(kind_is(*QUEUE), _resources_written())),)


def _resources_written() -> str:
    return _written_condition(*_LIST_PATHS)


def _listed(field: str) -> str:
    path = ("guarantee", "resource") if field == "guarantee" else (field,)
    return f"{_present('object', 'spec', *path)} ? object.spec.{'.'.join(path)} : {{}}"


def _is_quantity(value: str) -> str:
    return f"isQuantity(string({value}))"


def _amount(value: str) -> str:
    return f"quantity(string({value}))"


DESCRIBED = ('Queue "', Expr("object.metadata.name"), '"')


def resources_in_server(config: Config) -> tuple[InServerCheck, ...]:
    """queueResources in the API server: the same problems, each named as order_problems
    names it (the first resource the API server's map order finds)."""
    variables: list[tuple[str, str]] = [(field, _listed(field)) for field in FIELDS]
    validations: list[tuple[str, str]] = []

    def first_of(name: str, field: str, test: str, *words: str) -> None:
        """A variable of the keys of field passing test, and the validation that it is empty,
        saying words (named(..., name) names its first key)."""
        variables.append((name, f"variables.{field}.filter(k, {test})"))
        validations.append((f"size(variables.{name}) == 0", concat(*DESCRIBED, ": ", *words)))

    def named(field: str, name: str) -> tuple[str, ...]:
        """The words `<field> <resource> <value>` for the first key of variable name."""
        first = f"variables.{name}[0]"
        return (f"{field} ", Expr(first), " ", Expr(f"string(variables.{field}[{first}])"))

    for field in FIELDS:
        value = f"variables.{field}[k]"
        invalid, negative = f"{field}Invalid", f"{field}Negative"
        first_of(
            invalid, field, f"!{_is_quantity(value)}", *named(field, invalid), " is not a quantity"
        )
        below = f"{_is_quantity(value)} && {_amount(value)}.isLessThan(quantity('0'))"
        first_of(
            negative, field, below, *named(field, negative), " is below zero; use a quantity >= 0"
        )
    for low, high, only_without in PAIRS:
        lower, higher = f"variables.{low}[k]", f"variables.{high}[k]"
        test = all_of(
            f"k in variables.{high}",
            f"!(k in variables.{only_without})" if only_without else "",
            _is_quantity(lower),
            _is_quantity(higher),
            f"{_amount(lower)}.isGreaterThan({_amount(higher)})",
        )
        name = f"{low}Over{high.capitalize()}"
        words = (*named(low, name), " is more than ", *named(high, name), f"; {ORDER}")
        first_of(name, low, test, *words)
    return (
        InServerCheck(
            "queue-resources",
            (_queues_rule(),),
            all_of("has(object.spec)", _resources_written()),
            tuple(validations),
            tuple(variables),
        ),
    )


def _mode(config: Config) -> Mode:
    return settings(config).mode


OFF = "policies.queues.mode: off"
HIERARCHY_POLICY = Policy(
    name=NAME,
    mode=_mode,
    off=OFF,
    validate=validate_hierarchy,
    kinds=frozenset({QUEUE}),
    scopes=hierarchy_scopes,
    watches=(QUEUES,),
)
# Apart from the hierarchy: a policy with in-server checks has its scopes leave the webhook
# where they are installed, and the hierarchy needs the webhook's cache.
RESOURCES_POLICY = Policy(
    name=RESOURCES,
    mode=_mode,
    off=OFF,
    validate=validate_resources,
    kinds=frozenset({QUEUE}),
    scopes=resources_scopes,
    in_server=resources_in_server,
)
