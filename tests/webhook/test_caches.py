"""The webhook's caches come from what the enabled policies declare: a policy that reads the
cluster names its data in its own module, and the caches start exactly that."""

import pytest

from tests.sandbox_fixtures import pod as sandbox_pod
from volcano_guard.base.informer import wait_synced
from volcano_guard.base.kubeconfig import Cluster
from volcano_guard.webhook import evaluation
from volcano_guard.webhook.caches import Caches, needs_cluster
from volcano_guard.webhook.config import config_from_dict
from volcano_guard.webhook.policies.base import LiveList, Policy, WatchedList
from volcano_guard.webhook.policies.node_name import NODES
from volcano_guard.webhook.policies.pod_groups import PODGROUPS, UNFINISHED_PODS
from volcano_guard.webhook.policies.queues import QUEUES
from volcano_guard_sandbox.apiserver.runner import SandboxThread

EVERYTHING_OFF = {
    "policies": {
        "nodeName": {"mode": "off", "bindingGuard": {"mode": "off"}},
        "podGroups": {"stampGenerationId": False, "deleteGuard": {"mode": "off"}},
        "queues": {"mode": "off"},
    }
}


def node(name):
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}


def test_the_shipped_policies_declare_nodes_podgroups_queues_and_a_live_pod_list():
    config = config_from_dict({})
    assert evaluation.watched_data(config) == (NODES, PODGROUPS, QUEUES)
    assert evaluation.live_lookups(config) == (UNFINISHED_PODS,)


def test_policies_that_are_off_need_no_cluster():
    config = config_from_dict(EVERYTHING_OFF)
    assert not needs_cluster(config)
    assert evaluation.watched_data(config) == () and evaluation.live_lookups(config) == ()


def test_the_binding_guard_alone_still_watches_nodes():
    config = config_from_dict(
        {
            "policies": {
                "nodeName": {"mode": "off", "bindingGuard": {"mode": "audit"}},
                "podGroups": {"stampGenerationId": False, "deleteGuard": {"mode": "off"}},
                "queues": {"mode": "off"},
            }
        }
    )
    assert evaluation.watched_data(config) == (NODES,)


def test_a_missing_cluster_names_the_policies_that_read_it():
    with pytest.raises(ValueError, match="nodeName, bindingGuard, deleteGuard"):
        Caches.for_config(config_from_dict({}), None)


def test_a_new_policy_gets_its_cache_and_lookup_from_its_declaration_alone(monkeypatch):
    """A policy reading core pods cluster-wide and namespaces: nothing outside its declaration
    names them, and the caches list, watch and look them up against the sandbox."""
    pods = WatchedList("pods", "Pod", lambda obj: obj["metadata"]["name"], namespaced=True)
    namespaces = WatchedList("namespaces", "Namespace", lambda obj: obj["metadata"]["name"])
    running = LiveList("pods", wanted=lambda request: True, field_selector="status.phase=Running")
    extra = Policy(
        name="extra", mode=lambda config: "audit", watches=(pods, namespaces), lookups=(running,)
    )
    monkeypatch.setattr(evaluation, "POLICIES", (extra,))
    with SandboxThread() as sandbox:
        sandbox.seed(
            [
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}},
                sandbox_pod("w0", "team-a"),
            ]
        )
        caches = Caches.for_config(config_from_dict(EVERYTHING_OFF), Cluster(sandbox.url))
        caches.start()
        try:
            assert all(wait_synced(informer, 10) for informer in caches._informers.values())
            snapshots = caches.snapshots()
            assert dict(snapshots[pods].items) == {"team-a/w0": "w0"}
            assert dict(snapshots[namespaces].items) == {"team-a": "team-a"}
            assert caches.ready()
        finally:
            caches.stop()


async def test_a_live_list_goes_to_the_declared_resource_namespace_and_selector():
    on_node = LiveList("pods", wanted=lambda request: True, field_selector="spec.nodeName=n1")
    with SandboxThread() as sandbox:
        bound, elsewhere = sandbox_pod("w0", "team-a"), sandbox_pod("w1", "team-a")
        bound["spec"]["nodeName"], elsewhere["spec"]["nodeName"] = "n1", "n2"
        other_namespace = sandbox_pod("x0", "team-b")
        other_namespace["spec"]["nodeName"] = "n1"
        sandbox.seed([bound, elsewhere, other_namespace])
        caches = Caches(cluster=Cluster(sandbox.url))
        try:
            listed = await caches.live_list(on_node, "team-a")
        finally:
            await caches.close()
    assert listed is not None and [p["metadata"]["name"] for p in listed] == ["w0"]
