"""Node churn as a number: how often Volcano-managed nodes are updated, and what changed.

Volcano's scheduler cache queues every node update event (pkg/scheduler/cache/event_handlers.go
`UpdateNode` adds the node to its queue whatever changed), and `SyncNode` hands the node to
`AddOrUpdateNode`, which runs `NodeInfo.SetNode`; with device sharing on, that rewrites the
devices and `IgnoredDevicesList` while scheduling goroutines read them (the data-race panics of
volcano-sh/volcano#2826, #3478, #3324, #5641). So every update counts, whichever field changed:
an update that changed none of the fields below is counted as `other`.

Per managed node the rate is an exponentially weighted average over RATE_WINDOW seconds, O(1)
a node; the counters hold no node label, and only the TOP_NODES busiest nodes are exported.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

FIELDS = ("labels", "annotations", "allocatable", "capacity", "conditions")
OTHER = "other"
RATE_WINDOW = 60.0  # seconds: a node's update rate is smoothed over about this long
TOP_NODES = 10  # nodes whose rates are exported
ANNOTATION_KEYS = 50  # annotation keys counted by name; others as "other"


def changed_fields(old: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """The fields of FIELDS that differ between two projections of a node, and the annotation
    keys that were added, changed or removed."""
    changed = [name for name in FIELDS if _field(old, name) != _field(new, name)]
    before, after = _field(old, "annotations") or {}, _field(new, "annotations") or {}
    keys = sorted(key for key in before.keys() | after.keys() if before.get(key) != after.get(key))
    return changed, keys


def _field(node: Mapping[str, Any], name: str) -> Any:
    where = node.get("metadata") if name in ("labels", "annotations") else node.get("status")
    return where.get(name) if isinstance(where, dict) else None


@dataclass(frozen=True)
class ChurnView:
    updates: Mapping[str, int]  # field -> managed node updates that changed it
    annotation_updates: Mapping[str, int]  # annotation key -> updates that changed it
    busiest: tuple[tuple[str, float], ...]  # (node, updates a minute), busiest first
    churning: int  # managed nodes updated more often than the configured rate
    device_sharing: bool  # as configured: whether the scheduler races node updates


@dataclass
class NodeChurn:
    """Counts and rates of managed nodes' updates; one owner (the LiveAudit's)."""

    updates: Counter[str] = field(
        default_factory=lambda: Counter(dict.fromkeys((*FIELDS, OTHER), 0))
    )
    annotation_updates: Counter[str] = field(default_factory=Counter)
    _rates: dict[str, tuple[float, float]] = field(default_factory=dict)  # node -> (rate, at)

    def updated(
        self, node: str, old: Mapping[str, Any], new: Mapping[str, Any], now: float
    ) -> None:
        """A managed node's update (its projection before and after) at `now` (seconds)."""
        changed, keys = changed_fields(old, new)
        self.updates.update(changed or [OTHER])
        for key in keys:
            named = key in self.annotation_updates or len(self.annotation_updates) < ANNOTATION_KEYS
            self.annotation_updates[key if named else OTHER] += 1
        rate, at = self._rates.get(node, (0.0, now))
        self._rates[node] = (rate * math.exp((at - now) / RATE_WINDOW) + 1 / RATE_WINDOW, now)

    def forget(self, node: str) -> None:
        self._rates.pop(node, None)

    def view(self, now: float, per_minute_limit: float, device_sharing: bool) -> ChurnView:
        per_minute = {
            node: 60 * rate * math.exp((at - now) / RATE_WINDOW)
            for node, (rate, at) in self._rates.items()
        }
        busiest = heapq.nlargest(TOP_NODES, per_minute.items(), key=lambda item: item[1])
        return ChurnView(
            dict(self.updates),
            dict(self.annotation_updates),
            tuple((node, rate) for node, rate in busiest if rate > 0.01),
            sum(rate > per_minute_limit for rate in per_minute.values()),
            device_sharing,
        )
