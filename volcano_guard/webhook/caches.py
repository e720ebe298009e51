"""The webhook's caches: what policies read about the cluster, kept current in the background
so that no admission decision waits on the network."""

from __future__ import annotations

import asyncio
import functools
import logging
import re
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any
from urllib.parse import quote

import aiohttp

from volcano_guard.base.apipaths import group_version_path
from volcano_guard.base.informer import Informer, Snapshot, static_snapshot
from volcano_guard.base.jsonbody import decode, object_at
from volcano_guard.base.kubeconfig import Cluster, TokenSource
from volcano_guard.webhook.config import Config
from volcano_guard.webhook.evaluation import enabled_policies, live_lookups, watched_data
from volcano_guard.webhook.metrics import LIVE_LOOKUPS
from volcano_guard.webhook.policies.base import LiveList, WatchedList

log = logging.getLogger("volcano_guard.webhook")
LOOKUP_TIMEOUT = 2.0  # seconds a rare-path lookup (LiveList) may hold its request
# Lookups at once, per process: past it a decision gets failClosed's answer at once rather than
# another LIST, so a flood of reviews cannot make the guard list large namespaces over and over.
MAX_CONCURRENT_LOOKUPS = 4
LOOKUP_PAGE = 500  # objects a page, as client-go's pager asks
# Metadata only (as kube-apiserver serves it to controllers' metadata informers), or objects.
METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"


def needs_cluster(config: Config) -> bool:
    return bool(watched_data(config) or live_lookups(config))


def without_cluster(config: Config) -> str:
    """Which enabled policies read the cluster, and the settings that would turn them off."""
    readers = [policy for policy in enabled_policies(config) if policy.watches or policy.lookups]
    names = ", ".join(policy.name for policy in readers)
    settings = ", ".join(dict.fromkeys(policy.off for policy in readers))
    return f"policies {names} read the cluster; to run without one, set {settings}"


class Caches:
    """The cluster data the enabled policies declare: an informer for each WatchedList, live
    lists for each LiveList; `ready` once every informer has applied its first list."""

    def __init__(
        self,
        informers: Mapping[WatchedList[Any], Informer[Any]] | None = None,
        fixed: Mapping[WatchedList[Any], Snapshot[Any]] | None = None,
        cluster: Cluster | None = None,
        lookup_timeout: float = LOOKUP_TIMEOUT,
        max_lookups: int = MAX_CONCURRENT_LOOKUPS,
    ) -> None:
        self._informers = dict(informers or {})
        self._lookups, self._max_lookups = 0, max_lookups
        self._fixed = MappingProxyType(dict(fixed or {}))
        self._cluster, self._lookup_timeout = cluster, lookup_timeout
        self._tokens = TokenSource(cluster) if cluster is not None else None
        self._session: aiohttp.ClientSession | None = None  # made on first use, on the loop

    @classmethod
    def fixed(cls, snapshots: Mapping[WatchedList[Any], Mapping[str, Any]]) -> Caches:
        """Caches that never change (the demo): these items, synced."""
        return cls(fixed={data: static_snapshot(items) for data, items in snapshots.items()})

    @classmethod
    def for_config(
        cls, config: Config, cluster: Cluster | None, lookup_timeout: float = LOOKUP_TIMEOUT
    ) -> Caches:
        """ValueError when an enabled policy needs the cluster and there is none."""
        if not needs_cluster(config):
            return cls()
        if cluster is None:
            raise ValueError(f"no cluster: {without_cluster(config)}")
        from volcano_guard.base.api_client import api_client

        kubernetes = api_client(cluster)
        informers = {
            data: Informer(data.resource, lister(kubernetes, data), data.keep)
            for data in watched_data(config)
        }
        return cls(informers, cluster=cluster, lookup_timeout=lookup_timeout)

    def start(self) -> None:
        for informer in self._informers.values():
            informer.start()

    def stop(self) -> None:
        for informer in self._informers.values():
            informer.stop()

    def snapshots(self) -> Mapping[WatchedList[Any], Snapshot[Any]]:
        """Every cache's current snapshot: what one decision reads, unchanging."""
        if not self._informers:
            return self._fixed
        return {data: informer.snapshot for data, informer in self._informers.items()}

    async def live_list(self, data: LiveList, namespace: str) -> tuple[dict[str, Any], ...] | None:
        """The metadata of data's objects in namespace, listed now on the event loop over one
        kept-alive connection, page by page; None when there is no cluster, no complete answer
        within the lookup timeout, or already max_lookups under way."""
        if self._cluster is None or self._tokens is None:
            return None
        if self._lookups >= self._max_lookups:
            LIVE_LOOKUPS.labels(data.resource, "refused").inc()
            return None
        self._lookups += 1
        try:
            async with asyncio.timeout(self._lookup_timeout):
                listed = await self._list_pages(data, namespace)
            LIVE_LOOKUPS.labels(data.resource, "listed").inc()
            return listed
        except Exception as exc:  # timeouts, API errors, bad bodies: the policy decides
            LIVE_LOOKUPS.labels(data.resource, "failed").inc()
            log.warning("listing %s in %s failed: %r", data.resource, namespace, exc)
            return None
        finally:
            self._lookups -= 1

    async def _list_pages(self, data: LiveList, namespace: str) -> tuple[dict[str, Any], ...]:
        assert self._cluster is not None and self._tokens is not None
        if self._session is None:
            connector = aiohttp.TCPConnector(ssl=self._cluster.ssl_context())
            self._session = aiohttp.ClientSession(connector=connector)
        headers = {"Accept": METADATA_ONLY, **self._tokens.authorization()}
        url = (
            f"{self._cluster.url}{group_version_path(data.group, data.version)}/namespaces/"
            f"{quote(namespace, safe='')}/{data.resource}"
        )
        params = {"limit": str(LOOKUP_PAGE)}
        if data.field_selector:
            params["fieldSelector"] = data.field_selector
        found: list[dict[str, Any]] = []
        while True:
            async with self._session.get(url, params=params, headers=headers) as response:
                response.raise_for_status()
                # Policies read fixed paths of these objects: the parser's depth limit will do.
                page = decode(await response.read(), max_depth=None)
            page = page if isinstance(page, dict) else {}
            items = page.get("items")
            if isinstance(items, list):
                found.extend(item for item in items if isinstance(item, dict))
            token = object_at(page, "metadata").get("continue")
            if not isinstance(token, str) or not token:
                return tuple(found)
            params["continue"] = token

    async def close(self) -> None:
        """Close the lister's connection (the informers stop with stop())."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    def ready(self) -> bool:
        return all(informer.snapshot.synced for informer in self._informers.values())

    def unready_reason(self) -> str | None:
        """Why decisions cannot trust the caches now (for /readyz), or None."""
        for informer in self._informers.values():
            if not informer.snapshot.synced:
                if informer.relists:
                    return (
                        f"the {informer.name} cache lost the API server; it is not synced "
                        "until a list succeeds"
                    )
                return f"the {informer.name} cache has not finished its first list"
        return None


def lister(api_client: Any, data: WatchedList[Any]) -> Callable[..., Any]:
    """The kubernetes client's list call for data, cluster-wide (what Informer lists and
    watches with)."""
    from kubernetes import client

    if not data.group:  # the client names core calls after the kind: list_pod_for_all_namespaces
        snake = re.sub(r"(?<!^)(?=[A-Z])", "_", data.kind).lower()
        suffix = "_for_all_namespaces" if data.namespaced else ""
        return getattr(client.CoreV1Api(api_client), f"list_{snake}{suffix}")  # type: ignore[no-any-return]
    custom = client.CustomObjectsApi(api_client)
    return functools.partial(
        custom.list_cluster_custom_object, data.group, data.version, data.resource
    )
