"""The cluster data the nodeName policy reads: every node's labels, kept by the node cache; and
whether a pod may go to a node by them."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from volcano_guard.base.node_selectors import is_managed
from volcano_guard.webhook.policies.base import PolicyContext, WatchedList
from volcano_guard.webhook.policies.node_name.settings import settings


def node_labels(node: dict[str, Any]) -> Mapping[str, str]:
    """What the policy keeps of a node: its labels (a few hundred bytes)."""
    metadata = node.get("metadata")
    labels = metadata.get("labels") if isinstance(metadata, dict) else None
    return MappingProxyType(
        {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}
    )


NODES = WatchedList("nodes", "Node", node_labels)


def node_decision(node: str, context: PolicyContext) -> str | None:
    """Why the pod may not go to node ('managed', 'unknown', 'not synced'), or None."""
    config = settings(context.config)
    nodes = context.snapshot(NODES)
    if nodes is None or not nodes.synced:
        return "not synced" if context.config.failClosed else None
    labels = nodes.items.get(node)
    if labels is None:
        return "unknown" if config.unknownNodes == "deny" else None
    return "managed" if is_managed(labels, config.managed_selectors) else None
