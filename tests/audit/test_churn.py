"""Node churn as a number: which node changes reach Volcano's scheduler cache (pinned to its
source), the counts by field and annotation key, the per-node rates and their top k."""

from __future__ import annotations

import datetime
import re
from typing import Any

from tests.upstream import go_function, volcano_file
from volcano_guard.audit.churn import (
    ANNOTATION_KEYS,
    FIELDS,
    OTHER,
    TOP_NODES,
    NodeChurn,
    changed_fields,
)
from volcano_guard.audit.live import LiveAudit
from volcano_guard.webhook.config import config_from_dict

NOW = datetime.datetime(2026, 11, 24, 12, 0, tzinfo=datetime.UTC)


def test_every_node_update_reaches_set_node_whatever_changed():
    """UpdateNode queues the node before and apart from any comparison of old and new;
    the queue's worker syncs it into AddOrUpdateNode, whose SetNode runs setNode and so
    setNodeOthersResource, which rewrites IgnoredDevicesList."""
    handlers = volcano_file("pkg/scheduler/cache/event_handlers.go")
    update = go_function(handlers, "UpdateNode")  # the type checks, then the queue, at once
    assert re.search(
        r"newNode, ok := newObj\.\(\*v1\.Node\)\n\tif !ok \{[^}]*\}\n"
        r"\tsc\.nodeQueue\.Add\(",
        update,
    )
    assert "sc.AddOrUpdateNode(nodeCopy)" in go_function(handlers, "SyncNode")
    assert ".SetNode(node)" in go_function(handlers, "AddOrUpdateNode")
    worker = go_function(volcano_file("pkg/scheduler/cache/cache.go"), "processSyncNode")
    assert "sc.SyncNode(nodeWrapper.Object)" in worker
    node_info = volcano_file("pkg/scheduler/api/node_info.go")
    assert "ni.setNode(node)" in go_function(node_info, "SetNode")
    assert "ni.setNodeOthersResource(node)" in go_function(node_info, "setNode")
    assert re.search(
        r"IgnoredDevicesList\.AppendList\(", go_function(node_info, "setNodeOthersResource")
    )


def node(
    version: str,
    annotations: dict[str, str] | None = None,
    cpu: str = "4",
    ready_at: str = "t0",
    **labels: str,
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "n1",
            "resourceVersion": version,
            "labels": labels,
            "annotations": annotations or {},
        },
        "status": {
            "allocatable": {"cpu": cpu},
            "capacity": {"cpu": "4"},
            "conditions": [{"type": "Ready", "lastHeartbeatTime": ready_at}],
        },
    }


def test_changed_fields_and_annotation_keys():
    before = node("1", {"a": "1", "b": "1"})
    assert changed_fields(before, node("2", {"a": "2", "c": "1"})) == (
        ["annotations"],
        ["a", "b", "c"],
    )
    assert changed_fields(
        before, node("2", {"a": "1", "b": "1"}, cpu="3", ready_at="t1", pool="x")
    ) == (["labels", "allocatable", "conditions"], [])
    assert changed_fields(before, before) == ([], [])


def test_counts_by_field_an_update_changing_none_of_them_is_other():
    churn = NodeChurn()
    churn.updated("n1", node("1"), node("2", {"k": "v"}), 0.0)
    churn.updated("n1", node("2"), node("3"), 1.0)  # e.g. status.images only
    assert churn.updates == {**dict.fromkeys(FIELDS, 0), "annotations": 1, OTHER: 1}
    assert churn.annotation_updates == {"k": 1}


def test_annotation_keys_past_the_bound_are_counted_as_other():
    churn = NodeChurn()
    for n in range(ANNOTATION_KEYS + 5):
        churn.updated("n1", node("1"), node("2", {f"key-{n}": "v"}), float(n))
    assert len(churn.annotation_updates) == ANNOTATION_KEYS + 1
    assert churn.annotation_updates[OTHER] == 5


def test_rates_average_over_a_minute_and_only_the_busiest_are_kept():
    churn = NodeChurn()
    for second in range(0, 600, 5):  # n-busy: every 5 s for 10 minutes: 12 a minute
        churn.updated("n-busy", node("1"), node("2"), float(second))
    for n in range(TOP_NODES + 5):
        churn.updated(f"n-{n:02}", node("1"), node("2"), 595.0)
    view = churn.view(600.0, per_minute_limit=6, device_sharing=True)
    assert view.busiest[0][0] == "n-busy" and 11 < view.busiest[0][1] < 13
    assert len(view.busiest) == TOP_NODES
    assert view.churning == 1 and view.device_sharing
    later = churn.view(600.0 + 600, per_minute_limit=6, device_sharing=True)
    assert later.churning == 0 and later.busiest == ()  # ten quiet minutes: faded
    churn.forget("n-busy")
    assert "n-busy" not in dict(churn.view(600.0, 6, True).busiest)


def test_the_live_audit_counts_managed_nodes_and_not_a_relists_replay():
    config = config_from_dict(
        {"policies": {"nodeName": {"managedNodeSelectors": ["pool:volcano"]}}}
    )
    live = LiveAudit(config, clock=lambda: NOW)
    live.node(node("1", pool="volcano"), "n1")
    live.node(node("1", pool="volcano"), "n1")  # a re-list hands the same version again
    live.node(node("2", {"k": "1"}, pool="volcano"), "n1")
    live.node(node("3", {"k": "1"}, pool="web"), "n1")  # no longer managed: not counted
    live.node(node("4", {"k": "2"}, pool="web"), "n1")
    churn = live.view().churn
    assert churn is not None
    assert churn.updates["annotations"] == 1 and sum(churn.updates.values()) == 1
    assert churn.busiest == ()  # forgotten once unmanaged
