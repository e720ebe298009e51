"""The node states the in-server node-name checks read, published by the reconciler.

A ValidatingAdmissionPolicy cannot look a node up, so when its verdict depends on which nodes
are managed (managedNodeSelectors, or unknownNodes: allow) the guard publishes every node it
knows as `name: managed|unmanaged` in ConfigMaps labelled NODE_STATES_LABEL in its own
namespace: the params of the nodeName policy's in-server checks. One ConfigMap holds 1 MiB,
about 20,000 node names, so the states are split by name into ranges, one ConfigMap each
([volcano-guard.io/nodes-from, volcano-guard.io/nodes-to)), and the API server judges a node
by the one range that holds its name.

Ranges only ever split, a full one into two halves: the upper half is created before the full
one shrinks to the lower, so at every moment every name is in some range, at worst in two that
agree. The first range is created pending, holding every name and refusing them all, before the
others; it takes its own states last. A name no node has is "unknown" (refused under
unknownNodes: deny), so a node that joins while the guard is down is refused until the guard
lists it; one relabelled managed while the guard is down is still judged unmanaged until it is
back (docs/decisions/registrations.md, "Which nodes are managed").
"""

from __future__ import annotations

import asyncio
import bisect
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import aiohttp

from volcano_guard.base.informer import Snapshot
from volcano_guard.base.kubeconfig import Cluster, TokenSource
from volcano_guard.webhook.config import Config
from volcano_guard.webhook.evaluation import POLICIES
from volcano_guard.webhook.policies.base import InServerCheck, InServerMutation
from volcano_guard.webhook.policies.node_name import (
    NODE_STATES_LABEL,
    NODE_STATES_NAMES,
    NODES_FROM,
    NODES_PENDING,
    NODES_TO,
    node_state,
    settings,
)

log = logging.getLogger("volcano_guard.webhook")
# Data a ConfigMap may hold: the API server refuses more than 1 MiB of keys and values
# (ValidateConfigMap); a quarter is left for the object around it and for growth until the
# next split.
RANGE_BYTES = 768 * 1024
# The names the ranges take, fixed in advance so that the reconciler's Role can name every
# ConfigMap it may write (RBAC allows a create by name only to a server-side apply): 32 ranges
# of 384 to 768 KiB of states hold some 400,000 nodes.
NAMES = NODE_STATES_NAMES
INTERVAL = 2.0  # seconds between looks at the node cache
FIELD_MANAGER = "volcano-guard-reconciler"
ATTEMPTS = 3  # lists and writes in one round before a run of 409s is a stall


@dataclass(frozen=True)
class NodeRange:
    """One ConfigMap's worth: the states of the node names in [start, end) ("" : unbounded)."""

    start: str
    end: str
    states: Mapping[str, str] = field(default_factory=dict)
    resource_version: str = ""  # "" : not created yet
    pending: bool = False  # refuses every name it holds
    name: str = ""  # the ConfigMap's, one of NAMES ("" : to be given one)
    labelled: bool = True  # False: stored without NODE_STATES_LABEL, unseen by the policy

    def holds(self, node: str) -> bool:
        return self.start <= node and (not self.end or node < self.end)

    def size(self) -> int:
        return sum(len(name) + len(state) for name, state in self.states.items())


def desired_states(labels: Mapping[str, Mapping[str, str]], config: Config) -> dict[str, str]:
    """Every known node's state under config."""
    node_name = settings(config)
    return {name: node_state(node_labels, node_name) for name, node_labels in labels.items()}


def plan(
    existing: list[NodeRange], states: Mapping[str, str], limit: int = RANGE_BYTES
) -> list[NodeRange]:
    """The ranges to write, in the order to write them, for the cluster to hold `states`:
    every range split until it fits `limit`, a split's upper half before the range it leaves.
    `existing` is read as a partition of all names (first start "", each end the next start,
    last end ""), whatever overlaps or gaps it has."""
    ranges = _partition(existing) or [NodeRange("", "")]
    names = sorted(states)
    wanted: list[NodeRange] = []
    for current in ranges:
        first = bisect.bisect_left(names, current.start)
        last = bisect.bisect_left(names, current.end) if current.end else len(names)
        held = {name: states[name] for name in names[first:last]}
        wanted += _split(replace(current, states=held), limit)
    by_start = {current.start: current for current in existing}
    changed = [r for r in wanted if _differs(r, by_start.get(r.start))]
    # Creates first: a split's upper half exists before the range it came from shrinks.
    writes = sorted(_named(changed, existing), key=lambda r: bool(r.resource_version))
    if not existing and len(writes) > 1:  # nothing stored yet: every name refused, until
        # the first range exists; it must go on refusing what the others do not hold yet
        head = next(r for r in writes if not r.start)
        writes.remove(head)
        writes = [NodeRange("", "", pending=True, name=head.name), *writes, head]
    return writes


def _named(ranges: list[NodeRange], existing: list[NodeRange]) -> list[NodeRange]:
    """ranges, each new one given the first of NAMES no range uses; ValueError when none is
    left."""
    used = {r.name for r in existing} | {r.name for r in ranges}
    free = (name for name in NAMES if name not in used)
    named = []
    for node_range in ranges:
        if not node_range.name:
            name = next(free, None)
            if name is None:
                raise ValueError(f"the node states need more than {len(NAMES)} ConfigMaps")
            node_range = replace(node_range, name=name)
        named.append(node_range)
    return named


def _partition(existing: list[NodeRange]) -> list[NodeRange]:
    """The ranges as a partition: each to the next's start, the last to "" (a range left over
    from an interrupted split shrinks to where the next begins), and a new first one from ""
    if that one is gone."""
    ordered = sorted({r.start: r for r in existing}.values(), key=lambda r: r.start)
    if ordered and ordered[0].start:
        ordered.insert(0, NodeRange("", ordered[0].start))
    return [
        replace(r, end=ordered[index + 1].start if index + 1 < len(ordered) else "")
        for index, r in enumerate(ordered)
    ]


def _split(whole: NodeRange, limit: int) -> list[NodeRange]:
    if whole.size() <= limit or len(whole.states) < 2:
        return [whole]
    names = sorted(whole.states)
    middle = names[len(names) // 2]
    lower = replace(whole, end=middle, states={n: whole.states[n] for n in names if n < middle})
    upper = NodeRange(middle, whole.end, {n: whole.states[n] for n in names if n >= middle})
    return _split(lower, limit) + _split(upper, limit)


def _differs(wanted: NodeRange, stored: NodeRange | None) -> bool:
    return (
        stored is None
        or not stored.labelled
        or (stored.start, stored.end, dict(stored.states), stored.pending)
        != (
            wanted.start,
            wanted.end,
            dict(wanted.states),
            wanted.pending,
        )
    )


def configmap(node_range: NodeRange, namespace: str) -> dict[str, Any]:
    """The ConfigMap that holds node_range."""
    key, value = NODE_STATES_LABEL
    annotations = {NODES_FROM: node_range.start, NODES_TO: node_range.end}
    if node_range.pending:
        annotations[NODES_PENDING] = "true"
    metadata: dict[str, Any] = {
        "name": node_range.name,
        "namespace": namespace,
        "labels": {key: value},
        "annotations": annotations,
    }
    if node_range.resource_version:
        metadata["resourceVersion"] = node_range.resource_version
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata,
        "data": dict(sorted(node_range.states.items())),
    }


def from_configmap(obj: Mapping[str, Any]) -> NodeRange:
    metadata = obj.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    data = obj.get("data") or {}
    key, value = NODE_STATES_LABEL
    return NodeRange(
        str(annotations.get(NODES_FROM, "")),
        str(annotations.get(NODES_TO, "")),
        {str(k): str(v) for k, v in data.items()},
        str(metadata.get("resourceVersion", "")),
        NODES_PENDING in annotations,
        str(metadata.get("name", "")),
        (metadata.get("labels") or {}).get(key) == value,
    )


def is_labelled(obj: Mapping[str, Any]) -> bool:
    key, value = NODE_STATES_LABEL
    return ((obj.get("metadata") or {}).get("labels") or {}).get(key) == value


def sort_listed(items: list[Mapping[str, Any]]) -> tuple[list[NodeRange], list[str]]:
    """(the ranges stored under NAMES, labelled or not: the publisher's own, whatever their
    content; the names of the other ConfigMaps carrying NODE_STATES_LABEL: not made by it,
    ignored by the policy, reported)."""
    own = [from_configmap(item) for item in items if _name(item) in NAMES]
    foreign = sorted(
        _name(item) for item in items if _name(item) not in NAMES and is_labelled(item)
    )
    return own, foreign


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


@dataclass
class PublisherEvents:
    """What the publisher reports, to the process's metrics (the reconciler's)."""

    foreign: Callable[[list[str]], None] = lambda names: None  # the labelled ones not its own
    repaired: Callable[[str], None] = lambda name: None  # one it wrote again: edited, gone
    stalled: Callable[[str], None] = lambda reason: None  # a round that wrote nothing it should


class Conflict(Exception):
    """A write refused with 409: the object changed since it was listed."""


class NodeStatesPublisher:
    """Keeps the node-state ConfigMaps in `namespace` equal to the node cache: every INTERVAL
    seconds, once the cache is synced, it lists the namespace's ConfigMaps and writes every
    range that differs from the states, is unlabelled or is gone. A name of NAMES is its own
    whoever wrote it last; a labelled ConfigMap of another name is not (reported, never read)."""

    def __init__(
        self,
        config: Config,
        cluster: Cluster,
        namespace: str,
        snapshot: Callable[[], Snapshot[Any] | None],
        interval: float = INTERVAL,
        limit: int = RANGE_BYTES,
        events: PublisherEvents | None = None,
    ) -> None:
        self._config, self._cluster, self._namespace = config, cluster, namespace
        self._snapshot, self._interval, self._limit = snapshot, interval, limit
        self._events = events or PublisherEvents()
        self._tokens = TokenSource(cluster)
        self._published: dict[str, str] | None = None
        self._states_of: tuple[Snapshot[Any], dict[str, str]] | None = None
        self._foreign: list[str] = []

    async def run(self) -> None:
        connector = aiohttp.TCPConnector(ssl=self._cluster.ssl_context())
        timeout = aiohttp.ClientTimeout(total=30)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            while True:
                try:
                    await self.publish_once(session)
                except (aiohttp.ClientError, TimeoutError, ValueError, Conflict) as exc:
                    self._stalled(f"{exc} (next try in {self._interval}s)")
                await asyncio.sleep(self._interval)

    def _stalled(self, reason: str) -> None:
        log.warning("node states in %s not published: %s", self._namespace, reason)
        self._events.stalled(reason)

    async def publish_once(self, session: aiohttp.ClientSession) -> bool:
        """List, then write what differs; False when the cache is not synced or all is in
        place. A write refused with 409 (someone changed the object since the list) is
        repaired from a new list, ATTEMPTS times before the round is given up (Conflict)."""
        snapshot = self._snapshot()
        if snapshot is None or not snapshot.synced:
            return False
        states = await self._states(snapshot)
        for _ in range(ATTEMPTS):
            try:
                return await self._publish(session, states)
            except Conflict:
                continue
        raise Conflict(f"{ATTEMPTS} writes in a row refused with 409 Conflict")

    async def _states(self, snapshot: Snapshot[Any]) -> dict[str, str]:
        if self._states_of is None or self._states_of[0] is not snapshot:
            # Off the event loop (100,000 nodes take about 0.1 s): the snapshot is immutable.
            states = await asyncio.to_thread(desired_states, snapshot.items, self._config)
            self._states_of = (snapshot, states)
        return self._states_of[1]

    async def _publish(self, session: aiohttp.ClientSession, states: dict[str, str]) -> bool:
        url = f"{self._cluster.url}/api/v1/namespaces/{self._namespace}/configmaps"
        headers = self._tokens.authorization()
        # Every ConfigMap, not only the labelled: one of NAMES whose label was taken off is
        # still this publisher's to repair (the policy no longer sees it).
        async with session.get(url, headers=headers) as response:
            response.raise_for_status()
            listed = await response.json()
        existing, foreign = sort_listed(list(listed.get("items") or ()))
        self._report_foreign(foreign)
        writes = await asyncio.to_thread(plan, existing, states, self._limit)
        if not writes:
            self._published = states
            return False
        written: dict[str, str] = {}  # name -> resourceVersion, of what this round wrote
        for node_range in writes:
            version = written.get(node_range.name, node_range.resource_version)
            body = configmap(replace(node_range, resource_version=version), self._namespace)
            written[node_range.name] = await self._write(session, url, body, headers)
            if states == self._published:  # the states did not change: someone else did
                log.warning("node states: %s repaired (edited or deleted)", node_range.name)
                self._events.repaired(node_range.name)
        self._published = states
        log.info("published the states of %d nodes to %s", len(states), self._namespace)
        return True

    async def _write(
        self, session: aiohttp.ClientSession, url: str, body: dict[str, Any], headers: Any
    ) -> str:
        """The resourceVersion body was stored with; Conflict on a 409."""
        name = body["metadata"]["name"]
        if body["metadata"].get("resourceVersion"):
            request = session.put(f"{url}/{name}", json=body, headers=headers)
        else:  # a create by server-side apply: RBAC can allow it by name (NAMES)
            request = session.patch(
                f"{url}/{name}",
                data=json.dumps(body),
                params={"fieldManager": FIELD_MANAGER},
                headers={**headers, "Content-Type": "application/apply-patch+yaml"},
            )
        async with request as response:
            if response.status == 409:
                raise Conflict(f"{name}: 409 Conflict")
            response.raise_for_status()
            stored = await response.json()
        return str(stored["metadata"]["resourceVersion"])

    def _report_foreign(self, foreign: list[str]) -> None:
        if foreign and foreign != self._foreign:
            log.warning(
                "ConfigMaps in %s carry the node-states label but were not made by the guard "
                "(ignored by its policies): %s",
                self._namespace,
                ", ".join(foreign),
            )
        self._foreign = foreign
        self._events.foreign(foreign)


def publishes(config: Config) -> bool:
    """Whether any in-server check or mutation the config can install reads published node
    states: the node-name checks, and the nodeName rewrite where MutatingAdmissionPolicies are
    on (published whether the cluster serves them or not: a state nothing reads is harmless,
    a rewrite with none to read rewrites nothing)."""
    readers: list[InServerCheck | InServerMutation] = []
    for policy in POLICIES:
        mode = policy.mode(config)
        if mode == "off":
            continue
        if config.validatingAdmissionPolicies:
            readers += policy.in_server(config)
        if config.mutatingAdmissionPolicies and mode == "enforce":
            readers += policy.mutate_in_server(config)
    return any(reader.params_label == NODE_STATES_LABEL for reader in readers)
