"""The webhook's caches: what policies read about the cluster, kept current in the background
so that no admission decision waits on the network."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import aiohttp

from volcano_guard.base.informer import Informer, Snapshot, node_labels, static_snapshot
from volcano_guard.base.jsonbody import decode
from volcano_guard.base.kubeconfig import Cluster, TokenSource, kubernetes_configuration
from volcano_guard.webhook.config import Config
from volcano_guard.webhook.policies.pod_groups import podgroup_generation

log = logging.getLogger("volcano_guard.webhook")
_UNFINISHED = {"fieldSelector": "status.phase!=Succeeded,status.phase!=Failed"}
LOOKUP_TIMEOUT = 2.0  # seconds a PodGroup delete may wait for its member list


def needs_nodes(config: Config) -> bool:
    node_name = config.policies.nodeName
    return node_name.mode != "off" or node_name.bindingGuard.mode != "off"


def needs_podgroups(config: Config) -> bool:
    return config.policies.podGroups.stampGenerationId


def needs_cluster(config: Config) -> bool:
    return (needs_nodes(config) or needs_podgroups(config)
            or config.policies.podGroups.deleteGuard.mode != "off")


class Caches:
    """Informers the enabled policies need; `ready` once every one has applied its first list."""

    def __init__(self, nodes: Informer[Mapping[str, str]] | None = None,
                 fixed_nodes: Snapshot[Mapping[str, str]] | None = None,
                 cluster: Cluster | None = None, lookup_timeout: float = LOOKUP_TIMEOUT,
                 podgroups: Informer[str] | None = None) -> None:
        self._nodes, self._fixed_nodes = nodes, fixed_nodes
        self._cluster, self._lookup_timeout = cluster, lookup_timeout
        self._tokens = TokenSource(cluster) if cluster is not None else None
        self._session: aiohttp.ClientSession | None = None  # made on first use, on the loop
        self._podgroups = podgroups

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

        api_client = client.ApiClient(kubernetes_configuration(cluster))
        api = client.CoreV1Api(api_client)
        nodes = Informer("nodes", api.list_node, node_labels) if needs_nodes(config) else None
        podgroups = None
        if needs_podgroups(config):
            custom = client.CustomObjectsApi(api_client)
            list_podgroups = functools.partial(custom.list_cluster_custom_object,
                                               "scheduling.volcano.sh", "v1beta1", "podgroups")
            podgroups = Informer("podgroups", list_podgroups, podgroup_generation)
        return cls(nodes, cluster=cluster, lookup_timeout=lookup_timeout, podgroups=podgroups)

    def _informers(self) -> list[Informer[Any]]:
        return [i for i in (self._nodes, self._podgroups) if i is not None]

    def start(self) -> None:
        for informer in self._informers():
            informer.start()

    def stop(self) -> None:
        for informer in self._informers():
            informer.stop()

    def podgroups(self) -> Snapshot[str] | None:
        return self._podgroups.snapshot if self._podgroups is not None else None

    def nodes(self) -> Snapshot[Mapping[str, str]] | None:
        return self._nodes.snapshot if self._nodes is not None else self._fixed_nodes

    async def namespace_pods(self, namespace: str) -> tuple[dict[str, Any], ...] | None:
        """The namespace's pods that have not finished, listed live (a rare path: PodGroup
        deletes) on the event loop over one kept-alive connection; None when there is no
        cluster or no answer within the lookup timeout."""
        if self._cluster is None or self._tokens is None:
            return None
        if self._session is None:
            connector = aiohttp.TCPConnector(ssl=self._cluster.ssl_context())
            self._session = aiohttp.ClientSession(connector=connector)
        headers = {"Accept": "application/json", **self._tokens.authorization()}
        url = f"{self._cluster.url}/api/v1/namespaces/{quote(namespace, safe='')}/pods"
        try:
            async with asyncio.timeout(self._lookup_timeout):
                async with self._session.get(url, params=_UNFINISHED, headers=headers) as response:
                    response.raise_for_status()
                    # Policies read fixed paths of these pods: the parser's depth limit will do.
                    listed = decode(await response.read(), max_depth=None)
            items = listed.get("items") if isinstance(listed, dict) else None
            return tuple(i for i in items if isinstance(i, dict)) if isinstance(items, list) else ()
        except Exception as exc:  # timeouts, API errors, bad bodies: the policy decides
            log.warning("listing pods in %s for a PodGroup delete failed: %r", namespace, exc)
            return None

    async def close(self) -> None:
        """Close the lister's connection (the informers stop with stop())."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    def ready(self) -> bool:
        return all(informer.snapshot.synced for informer in self._informers())
