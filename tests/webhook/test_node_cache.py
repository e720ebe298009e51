"""The node cache against the sandbox, with real list/watch traffic through the kubernetes
client: sync, changes within 2 s, deletes, re-list after 410, readiness, and decisions made on
consistent snapshots while nodes change a thousand times a second."""

import asyncio
import threading
import time

import aiohttp
import pytest
from kubernetes import client

from tests.builders import container, pod, review
from tests.conftest import HOSTNAME
from tests.sandbox_fixtures import pod as sandbox_pod
from volcano_guard.base.informer import Informer, wait_synced
from volcano_guard.base.kubeconfig import Cluster
from volcano_guard.base.listen import Listen
from volcano_guard.base.tls import client_context, server_context
from volcano_guard.webhook.caches import Caches
from volcano_guard.webhook.config import config_from_dict
from volcano_guard.webhook.evaluation import evaluate
from volcano_guard.webhook.policies.base import PolicyContext
from volcano_guard.webhook.policies.node_name import NODES as NODE_CACHE
from volcano_guard.webhook.policies.node_name import node_labels
from volcano_guard.webhook.review import from_document
from volcano_guard.webhook.server import running
from volcano_guard_sandbox.apiserver.resources import find
from volcano_guard_sandbox.apiserver.runner import SandboxThread
from volcano_guard_sandbox.apiserver.store import MERGE_PATCH

NODES = find("", "v1", "nodes")


def node(name, **labels):
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


def wait_until(predicate, timeout=2.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


@pytest.fixture
def cluster():
    with SandboxThread(event_window=50) as sandbox:
        sandbox.seed([node("gpu-1", **{"volcano.sh/role": "train"}), node("web-1", role="web")])
        yield sandbox


@pytest.fixture
def informer(cluster):
    api = client.CoreV1Api(client.ApiClient(client.Configuration(host=cluster.url)))
    informer = Informer("nodes", api.list_node, node_labels)
    informer.start()
    assert wait_synced(informer, 10)
    yield informer
    informer.stop()


def patch_labels(sandbox, name, labels):
    sandbox.call(
        lambda sb: sb.store.patch(NODES, "", name, MERGE_PATCH, {"metadata": {"labels": labels}})
    )


def test_first_list_fills_the_snapshot(informer):
    snapshot = informer.snapshot
    assert snapshot.synced
    assert dict(snapshot.items["gpu-1"]) == {"volcano.sh/role": "train"}
    assert set(snapshot.items) == {"gpu-1", "web-1"}


def test_label_change_add_and_delete_reach_the_snapshot_within_2s(informer, cluster):
    patch_labels(cluster, "web-1", {"volcano.sh/role": "train"})
    assert wait_until(lambda: informer.snapshot.items["web-1"].get("volcano.sh/role") == "train")
    cluster.seed([node("new-1")])
    assert wait_until(lambda: "new-1" in informer.snapshot.items)
    cluster.call(lambda sb: sb.store.delete(NODES, "", "gpu-1"))
    assert wait_until(lambda: "gpu-1" not in informer.snapshot.items)


def test_a_change_the_projection_does_not_keep_publishes_no_new_snapshot(informer, cluster):
    """Volcano rewrites each Queue's status over and over: each event copied the whole cache
    (2.2 ms at 100,000 Queues) and made the Queue policy rebuild its index."""
    patch_labels(cluster, "web-1", {"step": "1"})
    assert wait_until(lambda: informer.snapshot.items["web-1"].get("step") == "1")
    before = informer.snapshot
    for i in range(5):  # annotations: not in the projection (node_labels)
        cluster.call(
            lambda sb, i=i: sb.store.patch(
                NODES, "", "web-1", MERGE_PATCH, {"metadata": {"annotations": {"n": str(i)}}}
            )
        )
    time.sleep(0.5)
    assert informer.snapshot is before
    patch_labels(cluster, "web-1", {"step": "2"})
    assert wait_until(lambda: informer.snapshot.items["web-1"].get("step") == "2")


def test_a_410_on_rewatch_makes_it_list_again(informer, cluster):
    assert informer.relists == 1
    # Other objects' events push the node events out of the sandbox's 50-event window.
    cluster.seed([sandbox_pod(f"p{i}") for i in range(60)])
    cluster.call(lambda sb: sb.store.close_all_watches())  # the informer must watch again
    assert wait_until(lambda: informer.relists == 2, timeout=5)
    patch_labels(cluster, "web-1", {"after": "relist"})
    assert wait_until(lambda: informer.snapshot.items["web-1"].get("after") == "relist")


@pytest.mark.slow  # a stress run
def test_decisions_see_consistent_snapshots_under_a_thousand_node_events_a_second(
    informer, cluster
):
    config = config_from_dict({"policies": {"nodeName": {"managedNodeSelectors": ["pool:a"]}}})
    stop = threading.Event()
    written = []

    async def churn(sandbox):
        # On the sandbox's own loop: a batch of label flips every millisecond or so.
        n = 0
        while not stop.is_set():
            for _ in range(20):
                value = "a" if n % 2 else "b"
                sandbox.store.patch(
                    NODES,
                    "",
                    "web-1",
                    MERGE_PATCH,
                    {"metadata": {"labels": {"pool": value, "twin": value}}},
                )  # both labels change in one event
                written.append(value)
                n += 1
            await asyncio.sleep(0.001)

    cluster.call(lambda sb: asyncio.ensure_future(churn(sb)))
    decisions = 0
    body = pod(container(requests={"cpu": "1", "memory": "1Gi"}))
    body["spec"]["nodeName"] = "web-1"
    request = from_document(review(body))
    started = time.monotonic()
    try:
        while time.monotonic() - started < 2.0:
            snapshot = informer.snapshot
            labels = snapshot.items["web-1"]
            assert labels.get("pool") == labels.get("twin", labels.get("pool"))  # no torn view
            result = evaluate("validate", request, PolicyContext(config, {NODE_CACHE: snapshot}))
            assert result.decision.allowed is (labels.get("pool") != "a")
            decisions += 1
            time.sleep(0)  # let the other threads have the GIL between decisions
    finally:
        stop.set()
    rate = len(written) / (time.monotonic() - started)
    assert rate >= 1000, f"only {rate:.0f} node events/s were generated"
    assert decisions > 1000
    assert informer.relists == 1  # no errors, no re-list: every event applied in order


async def test_webhook_is_ready_only_after_the_first_list_and_denies_from_the_cache(certs):
    with SandboxThread() as sandbox:
        sandbox.seed([node("gpu-1")])
        config = config_from_dict({})
        caches = Caches.for_config(config, Cluster(sandbox.url))
        tls = server_context(certs.cert_file, certs.key_file)
        async with running(
            config, Listen("127.0.0.1", 0), Listen("127.0.0.1", 0), tls, caches=caches
        ) as (port, metrics_port):
            connector = aiohttp.TCPConnector(ssl=client_context(certs.ca_file))
            async with aiohttp.ClientSession(connector=connector) as session:
                base = f"https://127.0.0.1:{port}"
                async with session.get(base + "/readyz", server_hostname=HOSTNAME) as response:
                    assert response.status == 503
                    assert "cache has not finished its first list" in await response.text()
                async with session.get(f"http://127.0.0.1:{metrics_port}/readyz") as response:
                    assert response.status == 503
                caches.start()
                try:
                    for _ in range(200):
                        async with session.get(
                            base + "/readyz", server_hostname=HOSTNAME
                        ) as response:
                            if response.status == 200:
                                break
                        await asyncio.sleep(0.02)
                    assert response.status == 200
                    body = pod(container(requests={"cpu": "1", "memory": "1Gi"}))
                    body["spec"]["nodeName"] = "gpu-1"
                    async with session.post(
                        base + "/validate", json=review(body), server_hostname=HOSTNAME
                    ) as response:
                        answer = (await response.json())["response"]
                    assert answer["allowed"] is False
                    assert 'sets spec.nodeName "gpu-1"' in answer["status"]["message"]
                finally:
                    caches.stop()


@pytest.mark.slow
def test_an_unavailable_api_server_is_retried_with_backoff_until_it_answers(cluster):
    from volcano_guard_sandbox.apiserver.faults import FaultRule

    cluster.set_faults(FaultRule(verbs=frozenset({"list"}), error_rate=1.0, error_code=503))
    api = client.CoreV1Api(client.ApiClient(client.Configuration(host=cluster.url)))
    informer = Informer("nodes", api.list_node, node_labels)
    informer.start()
    try:
        time.sleep(1.0)
        assert not informer.snapshot.synced
        failed_lists = cluster.stats()["injected"]["503"]
        assert 2 <= failed_lists <= 6  # backed off, not hammering
        cluster.set_faults()
        assert wait_synced(informer, 10)
        assert set(informer.snapshot.items) == {"gpu-1", "web-1"}
    finally:
        informer.stop()


def test_on_change_sees_every_change_and_a_relist_reports_what_went_missing(cluster):
    api = client.CoreV1Api(client.ApiClient(client.Configuration(host=cluster.url)))
    seen: dict[str, object] = {}
    informer = Informer(
        "nodes",
        api.list_node,
        node_labels,
        snapshots=False,
        on_change=lambda key, labels: seen.__setitem__(key, labels),
    )
    informer.start()
    try:
        assert wait_synced(informer, 10)
        assert set(seen) == {"gpu-1", "web-1"} and informer.snapshot.items == {}
        patch_labels(cluster, "web-1", {"role": "train"})
        assert wait_until(lambda: dict(seen["web-1"] or {}) == {"role": "train"})
        # A delete the informer misses (its watch is down, the event leaves the window)
        # is reported by the re-list as a delete.
        cluster.call(lambda sb: sb.store.close_all_watches())
        cluster.call(lambda sb: sb.store.delete(NODES, "", "gpu-1"))
        cluster.seed([sandbox_pod(f"p{i}") for i in range(60)])
        cluster.call(lambda sb: sb.store.close_all_watches())
        assert wait_until(lambda: seen.get("gpu-1", "kept") is None, timeout=5)
    finally:
        informer.stop()


def test_a_refused_list_is_one_log_line_saying_what_the_api_server_said(cluster, caplog):
    """A webhook upgraded before its RBAC (the ClusterRole without queues) logs why it is not
    ready: the status and the API server's message, on one line, not the client's dump."""
    from volcano_guard_sandbox.apiserver.faults import FaultRule

    cluster.set_faults(FaultRule(verbs=frozenset({"list"}), error_rate=1.0, error_code=403))
    api = client.CoreV1Api(client.ApiClient(client.Configuration(host=cluster.url)))
    informer = Informer("nodes", api.list_node, node_labels)
    with caplog.at_level("WARNING", logger="volcano_guard.base.informer"):
        informer.start()
        try:
            assert wait_until(lambda: caplog.records, timeout=5)
        finally:
            informer.stop()
    said = caplog.records[0].getMessage()
    assert said.startswith("nodes: list/watch failed (403 Forbidden: injected fault: 403); ")
    assert "\n" not in said
