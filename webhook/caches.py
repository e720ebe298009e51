"""The webhook's caches: what policies read about the cluster, kept current in the background
so that no admission decision waits on the network."""

from __future__ import annotations

from collections.abc import Mapping

from volcano_guard.informer import Informer, Snapshot, node_labels, static_snapshot
from volcano_guard.kubeconfig import Cluster, kubernetes_configuration
from webhook.config import Config


def needs_nodes(config: Config) -> bool:
    node_name = config.policies.nodeName
    return node_name.mode != "off" or node_name.bindingGuard.mode != "off"


class Caches:
    """Informers the enabled policies need; `ready` once every one has applied its first list."""

    def __init__(self, nodes: Informer[Mapping[str, str]] | None = None,
                 fixed_nodes: Snapshot[Mapping[str, str]] | None = None) -> None:
        self._nodes, self._fixed_nodes = nodes, fixed_nodes

    @classmethod
    def fixed(cls, nodes: Mapping[str, Mapping[str, str]]) -> Caches:
        """Caches that never change (the demo): these nodes, synced."""
        return cls(fixed_nodes=static_snapshot(nodes))

    @classmethod
    def for_config(cls, config: Config, cluster: Cluster | None) -> Caches:
        """ValueError when an enabled policy needs the cluster and there is none."""
        if not needs_nodes(config):
            return cls()
        if cluster is None:
            raise ValueError("policies.nodeName needs the cluster's nodes: pass --kubeconfig, "
                             "run in a cluster, or set policies.nodeName.mode and "
                             "policies.nodeName.bindingGuard.mode to off")
        from kubernetes import client

        api = client.CoreV1Api(client.ApiClient(kubernetes_configuration(cluster)))
        return cls(Informer("nodes", api.list_node, node_labels))

    def start(self) -> None:
        if self._nodes is not None:
            self._nodes.start()

    def stop(self) -> None:
        if self._nodes is not None:
            self._nodes.stop()

    def nodes(self) -> Snapshot[Mapping[str, str]] | None:
        return self._nodes.snapshot if self._nodes is not None else self._fixed_nodes

    def ready(self) -> bool:
        return self._nodes is None or self._nodes.snapshot.synced
