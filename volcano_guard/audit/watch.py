"""`volcano-guard audit --watch`: informers on nodes, pods, PodGroups, Queues and the Volcano
workload kinds feed the LiveAudit event by event; its view is published for the metrics page.

One owner: the informers' threads hand every change to the event loop (call_soon_threadsafe),
which alone touches the LiveAudit, then publishes an immutable View; the metrics collector
reads only the published view. Readiness: every informer has listed and the first view is
published. Orphans age into findings without an event, so they are re-checked every few
seconds. Every replica keeps the audit current (a standby takes over hot); the one holding the
Lease exports the audit's gauges and writes the PolicyReports.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import functools
import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from volcano_guard.audit.findings import WORKLOADS
from volcano_guard.audit.live import LiveAudit, View, trim
from volcano_guard.audit.metrics import LEADING, REPORT_WRITE_ERRORS, AuditCollector
from volcano_guard.audit.reports import ReportWriter
from volcano_guard.base.config_reload import ConfigReloader
from volcano_guard.base.connections import release_free_memory
from volcano_guard.base.informer import Informer
from volcano_guard.base.lease import LeaseElector, LeaseSettings
from volcano_guard.base.listen import Listen
from volcano_guard.base.metrics import REGISTRY, metrics_app, start_metrics
from volcano_guard.webhook.caches import lister
from volcano_guard.webhook.config import Config, config_from_bytes
from volcano_guard.webhook.policies.base import WatchedList

log = logging.getLogger("volcano_guard.audit")
PUBLISH_INTERVAL = 0.1  # seconds: a pod event reaches the metrics within this (plus a scrape)
ORPHAN_RECHECK = 5.0  # seconds between re-checks of pods that name a missing PodGroup
QUEUED_CHANGES = 1000
RELOAD_SYNC_TIMEOUT = 300.0  # seconds a reloaded config's audit may take to list the cluster


@dataclass(frozen=True)
class Watched:
    data: WatchedList[Any]
    apply: Callable[[LiveAudit, str, dict[str, Any] | None], None]


def _split(key: str) -> tuple[str, str]:
    namespace, _, name = key.rpartition("/")
    return namespace, name


def watched_kinds(config: Config) -> list[Watched]:
    """What --watch lists and watches, and how each change reaches the LiveAudit."""
    kinds = [
        Watched(
            WatchedList("nodes", "Node", functools.partial(trim, "Node")),
            lambda live, key, obj: live.node(obj, key),
        ),
        Watched(
            WatchedList(
                "pods",
                "Pod",
                functools.partial(trim, "Pod", images=config.audit.component_images),
                namespaced=True,
            ),
            lambda live, key, obj: live.pod(obj, _split(key)),
        ),
        Watched(
            WatchedList(
                "daemonsets",
                "DaemonSet",
                functools.partial(trim, "DaemonSet"),
                "apps",
                namespaced=True,
            ),
            lambda live, key, obj: live.daemonset(obj, _split(key)),
        ),
        Watched(
            WatchedList(
                "podgroups",
                "PodGroup",
                functools.partial(trim, "PodGroup"),
                "scheduling.volcano.sh",
                "v1beta1",
                namespaced=True,
            ),
            lambda live, key, obj: live.podgroup(obj, _split(key)),
        ),
        Watched(
            WatchedList(
                "queues",
                "Queue",
                functools.partial(trim, "Queue"),
                "scheduling.volcano.sh",
                "v1beta1",
            ),
            lambda live, key, obj: live.queue(obj, key),
        ),
    ]
    for (group, version, kind), plural in WORKLOADS.items():
        kinds.append(
            Watched(
                WatchedList(
                    plural, kind, functools.partial(trim, kind), group, version, namespaced=True
                ),
                functools.partial(_workload_changed, kind),
            )
        )
    return kinds


def _workload_changed(kind: str, live: LiveAudit, key: str, obj: dict[str, Any] | None) -> None:
    live.workload(obj, kind, _split(key))


class AuditWatch:
    """The running --watch: informers, the LiveAudit and its published view."""

    def __init__(self, api_client: Any, config: Config) -> None:
        self._api_client, self.live = api_client, LiveAudit(config)
        self._informers: list[Informer[Any]] = []
        self._published: tuple[View, float] | None = None
        self._dirty = asyncio.Event()
        # Changes handed to the loop and not yet applied: a first list would otherwise queue
        # every object's projection at once (the informers list far faster than they apply).
        self._room = threading.BoundedSemaphore(QUEUED_CHANGES)

    def published(self) -> tuple[View, float] | None:
        return self._published

    def ready(self) -> bool:
        return self._published is not None and all(
            informer.snapshot.synced for informer in self._informers
        )

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        for watched in watched_kinds(self.live.config):
            if not self._served(watched.data):
                log.info(
                    "%s are not served by this cluster (no CRD): none to audit",
                    watched.data.resource,
                )
                continue

            def changed(key: str, obj: Any, apply: Any = watched.apply) -> None:
                self._room.acquire()  # the loop is behind: wait rather than queue everything
                loop.call_soon_threadsafe(self._apply, apply, key, obj)

            informer = Informer(
                watched.data.resource,
                lister(self._api_client, watched.data),
                watched.data.keep,
                on_change=changed,
                snapshots=False,
            )
            self._informers.append(informer)
            informer.start()

    def stop(self) -> None:
        """The process is exiting: signal every informer, wait for none (daemon threads that
        may sit in a blocking read until the next event)."""
        for informer in self._informers:
            informer.stop(timeout=0)

    async def publish_forever(self) -> None:
        """Publish a new view whenever events arrived (at most every PUBLISH_INTERVAL)."""
        next_orphan_check = time.monotonic() + ORPHAN_RECHECK
        while True:
            with contextlib.suppress(TimeoutError):  # nothing happened: still re-check orphans
                await asyncio.wait_for(self._dirty.wait(), timeout=ORPHAN_RECHECK)
            if time.monotonic() >= next_orphan_check:
                self.live.recheck_orphans()
                next_orphan_check = time.monotonic() + ORPHAN_RECHECK
            self._dirty.clear()
            if all(informer.snapshot.synced for informer in self._informers):
                self._publish()
            await asyncio.sleep(PUBLISH_INTERVAL)

    def _publish(self) -> None:
        first = self._published is None
        try:
            self._published = (self.live.view(), time.time())
        except Exception:  # a cluster state the audit cannot judge must not stop it for good
            log.exception("could not judge the cluster; the last view stays until the next change")
            return  # its evaluation timestamp ages: the stale-audit alert fires
        if first:  # the first lists' decoded pages are garbage now: give them back
            release_free_memory()

    def _apply(self, apply: Callable[..., None], key: str, obj: Any) -> None:
        try:
            apply(self.live, key, obj)
        except Exception:  # an object of a shape the audit cannot read must not stop it
            log.exception("could not audit %s", key)
        finally:
            self._room.release()
        self._dirty.set()

    def _served(self, data: WatchedList[Any]) -> bool:
        if not data.group:
            return True
        from kubernetes.client.exceptions import ApiException

        try:
            lister(self._api_client, data)(limit=1, _preload_content=False)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True


class Running:
    """The audit in force and its report writer; a reloaded config replaces both once the new
    audit has published its first view, so the metrics and reports never go blank."""

    def __init__(self, api_client: Any, config: Config) -> None:
        self._api_client = api_client
        self.audit = AuditWatch(api_client, config)
        limit = config.audit.maxResultsPerReport
        self.writer = ReportWriter(api_client, limit, REPORT_WRITE_ERRORS)
        self._publishing: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.audit.start()
        self._publishing = asyncio.create_task(self.audit.publish_forever())

    def stop(self) -> None:
        if self._publishing is not None:
            self._publishing.cancel()
        self.audit.stop()

    async def replace(self, config: Config, timeout: float = RELOAD_SYNC_TIMEOUT) -> None:
        """Audit with config from now on: its informers list while the old audit serves;
        ValueError (the old one kept) when they cannot within timeout."""
        audit = AuditWatch(self._api_client, config)
        try:
            audit.start()
        except Exception as exc:  # an API error finding which kinds are served
            audit.stop()
            raise ValueError(f"cannot start watching the cluster: {exc}") from None
        publishing = asyncio.create_task(audit.publish_forever())
        deadline = time.monotonic() + timeout
        while audit.published() is None:
            if time.monotonic() >= deadline:
                publishing.cancel()
                audit.stop()
                raise ValueError(f"its audit did not list the cluster within {timeout:.0f}s")
            await asyncio.sleep(PUBLISH_INTERVAL)
        limit = config.audit.maxResultsPerReport
        if limit != self.audit.live.config.audit.maxResultsPerReport:
            self.writer = ReportWriter(self._api_client, limit, REPORT_WRITE_ERRORS)
        self.stop()
        self.audit, self._publishing = audit, publishing


async def lead_and_report(running: Running, elector: LeaseElector) -> None:
    """Hold the lease while alive; while leading, write the reports that changed."""
    while True:
        leading = await asyncio.to_thread(elector.try_lead)
        LEADING.set(1 if leading else 0)
        published = running.audit.published()
        if leading and published is not None:
            view, at = published
            when = datetime.datetime.fromtimestamp(at, datetime.UTC)
            await asyncio.to_thread(running.writer.sync, list(view.findings), when)
        await asyncio.sleep(elector.next_try_in())


async def watch(
    api_client: Any,
    config: Config,
    metrics_listen: Listen,
    lease: LeaseSettings,
    identity: str,
    config_file: str | None = None,
    config_hash: str | None = None,
) -> int:
    """Serve the metrics and keep the audit current until SIGTERM/SIGINT; the replica holding
    the lease exports the audit's gauges and writes its reports, another stands by hot. A
    config_file that changes is re-read (ConfigReloader; config_hash: of the bytes config was
    read from) and its audit replaces the running one."""
    running = Running(api_client, config)
    elector = LeaseElector(api_client, identity, lease)
    collector = AuditCollector(lambda: running.audit.published() if elector.leading else None)
    REGISTRY.register(collector)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    runner: web.AppRunner | None = None
    try:
        app = metrics_app(lambda: running.audit.ready(), lambda: elector.problem)
        runner, port = await start_metrics(app, metrics_listen)
        log.info("audit watching the cluster; metrics on http://%s:%s", metrics_listen.host, port)
        running.start()
        tasks = [asyncio.create_task(lead_and_report(running, elector))]
        if config_file is not None:
            reloader = ConfigReloader(
                config_file,
                lambda data: config_from_bytes(data, config_file),
                running.replace,
                loaded=config_hash,
            )
            tasks.append(asyncio.create_task(reloader.watch()))
        await stop.wait()
        for task in tasks:
            task.cancel()
        await asyncio.to_thread(elector.release)  # the standby takes over at its next try
        LEADING.set(0)
    finally:
        running.stop()
        if runner is not None:
            await runner.cleanup()
        REGISTRY.unregister(collector)
    return 0
