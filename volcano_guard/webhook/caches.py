"""The webhook's caches: what policies read about the cluster, kept current in the background
so that no admission decision waits on the network."""

from __future__ import annotations

import asyncio
import functools
import logging
import re
from collections.abc import Callable, Iterable, Mapping
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
from volcano_guard.webhook.lookup_slots import LookupSlots
from volcano_guard.webhook.metrics import LIVE_LOOKUPS
from volcano_guard.webhook.policies.base import LiveList, WatchedList

log = logging.getLogger("volcano_guard.webhook")
LOOKUP_TIMEOUT = 2.0  # seconds a rare-path lookup (LiveList) may hold its request
# Lookups at once, per process, shared fairly between source addresses (LookupSlots): a request
# past them waits its turn within the lookup timeout, then gets failClosed's answer, so a flood
# of reviews can neither make the guard list namespaces over and over nor starve a real delete.
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
    lists for each LiveList; `ready` once every informer the config in force needs has applied
    its first list. A reloaded config that needs more is provided for before it is put in force
    (provide, then serve_for); informers a config no longer needs keep running until exit, so a
    decision under way never loses its data and a change back costs no new list."""

    def __init__(
        self,
        informers: Mapping[WatchedList[Any], Informer[Any]] | None = None,
        fixed: Mapping[WatchedList[Any], Snapshot[Any]] | None = None,
        cluster: Cluster | None = None,
        lookup_timeout: float = LOOKUP_TIMEOUT,
        max_lookups: int = MAX_CONCURRENT_LOOKUPS,
        connect: Callable[[], Cluster] | None = None,
    ) -> None:
        self._informers = dict(informers or {})
        self._needed = frozenset(self._informers)  # what the config in force reads
        self._slots = LookupSlots(max_lookups)
        self._fixed = MappingProxyType(dict(fixed or {}))
        self._lookup_timeout = lookup_timeout
        self._cluster: Cluster | None = None
        self._tokens: TokenSource | None = None
        self._kubernetes: Any = None  # the kubernetes client the informers list with
        self._connect = connect
        self._started = False
        if cluster is not None:
            self._use(cluster)
        self._session: aiohttp.ClientSession | None = None  # made on first use, on the loop

    def _use(self, cluster: Cluster) -> None:
        self._cluster, self._tokens = cluster, TokenSource(cluster)

    @classmethod
    def fixed(cls, snapshots: Mapping[WatchedList[Any], Mapping[str, Any]]) -> Caches:
        """Caches that never change (the demo): these items, synced."""
        return cls(fixed={data: static_snapshot(items) for data, items in snapshots.items()})

    @classmethod
    def for_config(
        cls,
        config: Config,
        cluster: Cluster | None,
        lookup_timeout: float = LOOKUP_TIMEOUT,
        connect: Callable[[], Cluster] | None = None,
    ) -> Caches:
        """ValueError when an enabled policy needs the cluster and there is none. connect gives
        the cluster when a reloaded config first needs one."""
        if not needs_cluster(config):
            return cls(connect=connect)
        if cluster is None:
            raise ValueError(f"no cluster: {without_cluster(config)}")
        caches = cls(cluster=cluster, lookup_timeout=lookup_timeout, connect=connect)
        caches._add(watched_data(config))
        caches._needed = frozenset(watched_data(config))
        return caches

    def _add(self, wanted: Iterable[WatchedList[Any]]) -> list[Informer[Any]]:
        """Informers for the wanted data not watched yet (started when the caches are)."""
        assert self._cluster is not None
        if self._kubernetes is None:
            from volcano_guard.base.api_client import api_client

            self._kubernetes = api_client(self._cluster)
        added = []
        for data in wanted:
            if data not in self._informers:
                informer = Informer(data.resource, lister(self._kubernetes, data), data.keep)
                self._informers[data] = informer
                added.append(informer)
                if self._started:
                    informer.start()
        return added

    async def provide(self, config: Config, timeout: float) -> None:
        """Watch what config reads and wait up to timeout for those caches' first lists, before
        config is put in force (serve_for). ValueError when there is no cluster or a cache does
        not sync in time (its informer goes on trying)."""
        if not needs_cluster(config):
            return
        if self._cluster is None:
            if self._connect is None:
                raise ValueError(f"no cluster: {without_cluster(config)}")
            self._use(self._connect())  # ValueError naming why not
        self._add(watched_data(config))
        deadline = asyncio.get_running_loop().time() + timeout
        for data in watched_data(config):
            informer = self._informers[data]
            while not informer.snapshot.synced:
                if asyncio.get_running_loop().time() >= deadline:
                    raise ValueError(
                        f"the {informer.name} cache it needs did not sync within {timeout:.0f}s"
                    )
                await asyncio.sleep(0.05)

    def serve_for(self, config: Config) -> None:
        """config is in force now: readiness counts the caches it reads."""
        self._needed = frozenset(watched_data(config))

    def start(self) -> None:
        self._started = True
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

    async def live_list(
        self, data: LiveList, namespace: str, source: str = ""
    ) -> tuple[dict[str, Any], ...] | None:
        """The metadata of data's objects in namespace, listed now on the event loop over one
        kept-alive connection, page by page; None when there is no cluster, or no slot (source's
        fair share of max_lookups) and complete answer within the lookup timeout."""
        if self._cluster is None or self._tokens is None:
            return None
        deadline = asyncio.get_running_loop().time() + self._lookup_timeout
        if not await self._slots.acquire(source, self._lookup_timeout):
            LIVE_LOOKUPS.labels(data.resource, "refused").inc()
            return None
        try:
            async with asyncio.timeout_at(deadline):
                listed = await self._list_pages(data, namespace)
            LIVE_LOOKUPS.labels(data.resource, "listed").inc()
            return listed
        except Exception as exc:  # timeouts, API errors, bad bodies: the policy decides
            LIVE_LOOKUPS.labels(data.resource, "failed").inc()
            log.warning("listing %s in %s failed: %r", data.resource, namespace, exc)
            return None
        finally:
            self._slots.release(source)

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

    def _in_force(self) -> list[Informer[Any]]:
        return [informer for data, informer in self._informers.items() if data in self._needed]

    def ready(self) -> bool:
        return all(informer.snapshot.synced for informer in self._in_force())

    def unready_reason(self) -> str | None:
        """Why decisions cannot trust the caches now (for /readyz), or None."""
        for informer in self._in_force():
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
