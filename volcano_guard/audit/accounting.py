"""Volcano's accounting of a node: what its scheduler subtracts from the node's allocatable for
each pod bound there, read from volcano-sh/volcano pkg/scheduler:

- api/pod_info.go `GetPodResourceRequest`: the regular containers' requests summed; each init
  container's requests plus those of the restartable (native sidecar, `restartPolicy: Always`)
  init containers before it, the largest of these taken resource by resource; the restartable
  ones also added to the sum; then the larger of the two, resource by resource; `pods: 1`;
  pod-level `spec.resources.requests` for cpu and memory in place of the containers' (the
  PodLevelResources gate); `spec.overhead` added.
- api/resource_info.go `NewResource`: cpu, memory, pods, ephemeral-storage and the scalar
  resources (extended such as nvidia.com/gpu, hugepages-*, prefixed native ones, attachable
  volumes) count; anything else (and count/ quotas) is ignored (base/volcano_units.py).
- api/job_info.go `NewTaskInfo`: a task's Resreq is that request; cache/event_handlers.go
  `addTask`: every pod with a nodeName, whatever its scheduler, is added to its node unless it
  has Succeeded or Failed; api/node_info.go `AddTask`: Used += Resreq, Idle -= Resreq.

A node whose Used passes its allocatable on any resource has a negative Idle: the precondition
of the scheduler's negative-resource panic.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from volcano_guard.base.quantity import QuantityError, parse_quantity
from volcano_guard.base.volcano_units import volcano_scale

Resources = dict[str, Decimal]  # resource name -> amount in its base unit (cpu in cores)
TERMINAL_PHASES = ("Succeeded", "Failed")
_POD_LEVEL = ("cpu", "memory")


def requests_of(resources: Any) -> Resources:
    """A ResourceList (requests, limits, overhead) as Resources; what cannot be parsed or is
    not counted is left out (the webhook refuses such pods; the audit reports them apart)."""
    out: Resources = {}
    if not isinstance(resources, Mapping):
        return out
    for name, value in resources.items():
        if not isinstance(name, str) or volcano_scale(name) is None:
            continue
        try:
            out[name] = parse_quantity(value)
        except QuantityError:
            continue
    return out


def _container_requests(container: Any) -> Resources:
    return requests_of(_mapping(_mapping(container).get("resources")).get("requests"))


def _add(total: Resources, more: Mapping[str, Decimal]) -> Resources:
    if not more:  # most pods: no overhead, no init containers
        return total
    return {
        name: total.get(name, Decimal(0)) + more.get(name, Decimal(0))
        for name in total.keys() | more.keys()
    }


def _largest(one: Resources, other: Mapping[str, Decimal]) -> Resources:
    if not other:
        return one
    return {
        name: max(one.get(name, Decimal(0)), other.get(name, Decimal(0)))
        for name in one.keys() | other.keys()
    }


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def pod_request(pod: Mapping[str, Any]) -> Resources:
    """What Volcano's scheduler accounts for this pod on its node (GetPodResourceRequest)."""
    spec = _mapping(pod.get("spec"))
    regular: Resources = {}
    for container in _list(spec.get("containers")):
        regular = _add(regular, _container_requests(container))
    restartable: Resources = {}
    init_peak: Resources = {}
    for container in _list(spec.get("initContainers")):
        requests = _container_requests(container)
        if isinstance(container, Mapping) and container.get("restartPolicy") == "Always":
            regular = _add(regular, requests)
            restartable = _add(restartable, requests)
            running = dict(restartable)
        else:
            running = _add(requests, restartable)
        init_peak = _largest(init_peak, running)
    result = _add(_largest(regular, init_peak), {"pods": Decimal(1)})
    for name, value in requests_of(_mapping(spec.get("resources")).get("requests")).items():
        if name in _POD_LEVEL:
            result[name] = value
    return _add(result, requests_of(spec.get("overhead")))


def is_accounted(pod: Mapping[str, Any]) -> bool:
    """A pod Volcano's scheduler adds to its node: bound, and neither Succeeded nor Failed."""
    node = _mapping(pod.get("spec")).get("nodeName")
    phase = _mapping(pod.get("status")).get("phase")
    return isinstance(node, str) and node != "" and phase not in TERMINAL_PHASES


@dataclass(frozen=True)
class NodeAccount:
    """One node: its allocatable, what its accounted pods request, and where that passes."""

    node: str
    allocatable: Resources
    requested: Resources

    def ratio(self, resource: str) -> float:
        """requested / allocatable (inf when something is requested of nothing)."""
        have = self.allocatable.get(resource, Decimal(0))
        want = self.requested.get(resource, Decimal(0))
        if have == 0:
            return float("inf") if want > 0 else 0.0
        return float(want / have)

    def resources(self) -> list[str]:
        return sorted(self.allocatable.keys() | self.requested.keys())

    def overcommitted(self) -> list[str]:
        """The resources whose Idle Volcano would hold negative."""
        return [
            name
            for name in self.resources()
            if self.requested.get(name, Decimal(0)) > self.allocatable.get(name, Decimal(0))
        ]


def node_account(node: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> NodeAccount:
    """The node's account over the pods bound to it (pods on other nodes are ignored)."""
    name = str(_mapping(node.get("metadata")).get("name", ""))
    requested: Resources = {}
    for pod in pods:
        if is_accounted(pod) and _mapping(pod.get("spec")).get("nodeName") == name:
            requested = _add(requested, pod_request(pod))
    allocatable = requests_of(_mapping(node.get("status")).get("allocatable"))
    return NodeAccount(name, allocatable, requested)
