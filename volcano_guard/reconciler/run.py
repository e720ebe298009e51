"""The reconciler process: one replica leads (a Lease) and reconciles every few seconds; every
replica serves /metrics, /healthz and /readyz. The leader also publishes the node states the
in-server nodeName checks read, from a node informer of its own, so a config change reaches
them with the webhook stopped."""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from typing import Any

from aiohttp import web

from volcano_guard.base.informer import Informer, Snapshot
from volcano_guard.base.kubeconfig import Cluster
from volcano_guard.base.lease import LeaseElector, LeaseSettings
from volcano_guard.base.listen import Listen
from volcano_guard.base.metrics import metrics_app, start_metrics
from volcano_guard.reconciler import metrics
from volcano_guard.reconciler.reconcile import INTERVAL, Reconciler, Settings
from volcano_guard.webhook.caches import lister
from volcano_guard.webhook.config import Config
from volcano_guard.webhook.node_states import NodeStatesPublisher, PublisherEvents, publishes
from volcano_guard.webhook.policies.node_name import NODES

log = logging.getLogger("volcano_guard.reconciler")


EVENTS = PublisherEvents(
    foreign=lambda names: metrics.NODE_STATES_FOREIGN.set(len(names)),
    repaired=lambda name: metrics.NODE_STATES_REPAIRS.inc(),
    stalled=lambda reason: metrics.NODE_STATES_STALLS.inc(),
)


class NodeStates:
    """The node-state publisher for the current config (restarted when it changes), fed by one
    node informer started the first time a config needs it."""

    def __init__(self, api_client: Any, cluster: Cluster, namespace: str) -> None:
        self._api, self._cluster, self._namespace = api_client, cluster, namespace
        self._informer: Informer[Any] | None = None
        self._task: asyncio.Task[None] | None = None

    def follow(self, config: Config | None) -> None:
        self.stop()
        if config is None or not publishes(config):
            return
        if self._informer is None:
            self._informer = Informer(NODES.resource, lister(self._api, NODES), NODES.keep)
            self._informer.start()
        publisher = NodeStatesPublisher(
            config, self._cluster, self._namespace, self._snapshot, events=EVENTS
        )
        self._task = asyncio.create_task(publisher.run())

    def _snapshot(self) -> Snapshot[Any] | None:
        return self._informer.snapshot if self._informer else None

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    def close(self) -> None:
        self.stop()
        if self._informer is not None:
            self._informer.stop()


async def lead_and_reconcile(
    reconciler: Reconciler, elector: LeaseElector, node_states: NodeStates
) -> None:
    """Hold the Lease while alive; while leading, reconcile every INTERVAL and publish node
    states for the config in force."""
    changed = threading.Event()  # set by a pass that accepted a new config
    reconciler.on_config = lambda config: changed.set()
    following: Config | None = None
    while True:
        leading = await asyncio.to_thread(elector.try_lead)
        metrics.LEADING.set(1 if leading else 0)
        if not leading:
            node_states.stop()
            following = None
            await asyncio.sleep(elector.next_try_in())
            continue
        try:
            await asyncio.to_thread(reconciler.reconcile_once)
        except Exception as exc:  # the API server away or refusing: try again next pass
            metrics.ERRORS.labels("objects").inc()
            log.error("reconcile pass failed: %s", exc)
        if changed.is_set() or reconciler.config is not following:
            changed.clear()
            following = reconciler.config
            node_states.follow(following)
        await asyncio.sleep(min(INTERVAL, elector.next_try_in()))


async def reconcile(
    api_client: Any,
    cluster: Cluster,
    settings: Settings,
    metrics_listen: Listen,
    lease: LeaseSettings,
    identity: str,
) -> int:
    """Run until SIGTERM/SIGINT."""
    reconciler = Reconciler(api_client, settings)
    elector = LeaseElector(api_client, identity, lease)
    node_states = NodeStates(api_client, cluster, settings.namespace)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    runner: web.AppRunner | None = None
    try:
        app = metrics_app(lambda: True, lambda: elector.problem)
        runner, port = await start_metrics(app, metrics_listen)
        log.info(
            "reconciling %s/%s; metrics on http://%s:%s",
            settings.namespace,
            settings.config_map,
            metrics_listen.host,
            port,
        )
        task = asyncio.create_task(lead_and_reconcile(reconciler, elector, node_states))
        await stop.wait()
        task.cancel()
        await asyncio.to_thread(elector.release)  # the standby takes over at its next try
        metrics.LEADING.set(0)
    finally:
        node_states.close()
        if runner is not None:
            await runner.cleanup()
    return 0
