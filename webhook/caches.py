"""The webhook's caches: what policies read about the cluster, kept current in the background
so that no admission decision waits on the network."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Mapping
from typing import Any

from volcano_guard.informer import Informer, Snapshot, node_labels, static_snapshot
from volcano_guard.kubeconfig import Cluster, kubernetes_configuration
from webhook.config import Config

log = logging.getLogger("volcano_guard.webhook")
LOOKUP_TIMEOUT = 2.0  # seconds a PodGroup delete may wait for its member list


def needs_nodes(config: Config) -> bool:
    node_name = config.policies.nodeName
    return node_name.mode != "off" or node_name.bindingGuard.mode != "off"


def needs_cluster(config: Config) -> bool:
    return needs_nodes(config) or config.policies.podGroups.deleteGuard.mode != "off"


class Caches:
    """Informers the enabled policies need; `ready` once every one has applied its first list."""

    def __init__(self, nodes: Informer[Mapping[str, str]] | None = None,
                 fixed_nodes: Snapshot[Mapping[str, str]] | None = None,
                 core: Any = None, lookup_timeout: float = LOOKUP_TIMEOUT) -> None:
        self._nodes, self._fixed_nodes = nodes, fixed_nodes
        self._core, self._lookup_timeout = core, lookup_timeout

    @classmethod
    def fixed(cls, nodes: Mapping[str, Mapping[str, str]]) -> Caches:
        """Caches that never change (the demo): these nodes, synced."""
        return cls(fixed_nodes=static_snapshot(nodes))

    @classmethod
    def for_config(cls, config: Config, cluster: Cluster | None,
                   lookup_timeout: float = LOOKUP_TIMEOUT) -> Caches:
        """ValueError when an enabled policy needs the cluster and there is none."""
        if not needs_cluster(config):
            return cls()
        if cluster is None:
            raise ValueError("policies.nodeName and policies.podGroups.deleteGuard need the "
                             "cluster: pass --kubeconfig, run in a cluster, or set their modes "
                             "(nodeName.mode, nodeName.bindingGuard.mode, "
                             "podGroups.deleteGuard.mode) to off")
        from kubernetes import client

        api = client.CoreV1Api(client.ApiClient(kubernetes_configuration(cluster)))
        nodes = Informer("nodes", api.list_node, node_labels) if needs_nodes(config) else None
        return cls(nodes, core=api, lookup_timeout=lookup_timeout)

    def start(self) -> None:
        if self._nodes is not None:
            self._nodes.start()

    def stop(self) -> None:
        if self._nodes is not None:
            self._nodes.stop()

    def nodes(self) -> Snapshot[Mapping[str, str]] | None:
        return self._nodes.snapshot if self._nodes is not None else self._fixed_nodes

    async def namespace_pods(self, namespace: str) -> tuple[dict[str, Any], ...] | None:
        """The namespace's pods that have not finished, listed live (a rare path: PodGroup
        deletes); None when there is no cluster or no answer within the lookup timeout."""
        if self._core is None:
            return None
        call = functools.partial(
            self._core.list_namespaced_pod, namespace, _preload_content=False,
            field_selector="status.phase!=Succeeded,status.phase!=Failed",
            _request_timeout=self._lookup_timeout)
        try:
            async with asyncio.timeout(self._lookup_timeout):
                response = await asyncio.to_thread(call)
            return tuple(json.loads(response.data).get("items") or ())
        except Exception as exc:  # timeouts, API errors, bad bodies: the policy decides
            log.warning("listing pods in %s for a PodGroup delete failed: %r", namespace, exc)
            return None

    def ready(self) -> bool:
        return self._nodes is None or self._nodes.snapshot.synced
