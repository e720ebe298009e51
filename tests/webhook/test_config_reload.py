"""The webhook follows its config file with no restart and no refused request: a change takes
effect in every worker within a bounded time, a change that needs a cache the old config did not
read is provided for before it is swapped in, a bad change is refused with the last good config
kept, and reviews in flight while the file is rewritten are answered by one config or the other."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.error
import urllib.request

import aiohttp
import pytest

from tests.builders import container, pod, review
from tests.configmap_volume import ConfigMapVolume
from tests.conftest import HOSTNAME
from tests.processes import post_once, start_cli, wait_for_log
from volcano_guard.base.kubeconfig import Cluster, write_kubeconfig
from volcano_guard.base.listen import Listen
from volcano_guard.base.tls import client_context, server_context
from volcano_guard.webhook.caches import Caches
from volcano_guard.webhook.config import load_config
from volcano_guard.webhook.server import LiveConfig, config_reloader, running
from volcano_guard_sandbox.apiserver.runner import SandboxThread


# validatingAdmissionPolicies off: no node-state publisher (it moves to the reconciler).
def config_text(**policies: object) -> str:
    return json.dumps({"validatingAdmissionPolicies": False, "policies": policies}) + "\n"


TRAIN_NODES = {"managedNodeSelectors": ["volcano.sh/role:train"]}
EVERY_NODE_MANAGED = config_text()
ONLY_TRAIN_NODES = config_text(nodeName=TRAIN_NODES)
# The stream's two configs: neither reads PodGroups, and the first reads no cluster at all.
NO_POD_GROUPS = {"stampGenerationId": False, "deleteGuard": {"mode": "off"}}
NO_CLUSTER = config_text(
    nodeName={"mode": "off", "bindingGuard": {"mode": "off"}},
    podGroups=NO_POD_GROUPS,
    queues={"mode": "off"},
)
TRAIN_NODES_ONLY_NO_POD_GROUPS = config_text(nodeName=TRAIN_NODES, podGroups=NO_POD_GROUPS)


def node(name: str, **labels: str) -> dict:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


def pinned_to(node_name: str) -> bytes:
    body = pod(container(requests={"cpu": "1", "memory": "1Gi"}))
    body["spec"]["nodeName"] = node_name
    return json.dumps(review(body)).encode()


@pytest.fixture
def cluster():
    with SandboxThread() as sandbox:
        sandbox.seed([node("gpu-1", **{"volcano.sh/role": "train"}), node("web-1")])
        yield sandbox


def allowed(certs, port: int, body: bytes) -> bool:
    status, answer = post_once(certs.ca_file, port, "/validate", body)
    assert status == 200, answer
    return bool(answer["response"]["allowed"])


def metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return response.read().decode()


def ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as response:
            return response.status == 200
    except urllib.error.HTTPError:
        return False


def until(predicate, timeout: float) -> float:
    """Seconds until predicate() holds; AssertionError past timeout."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if predicate():
            return time.monotonic() - started
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout}s")


@pytest.mark.slow  # a webhook with two workers and its cluster: about 12 s
def test_every_worker_follows_a_managed_node_selectors_change_and_keeps_it_past_a_bad_one(
    cluster, certs, tmp_path
):
    volume = ConfigMapVolume(tmp_path / "config")
    volume.write(EVERY_NODE_MANAGED)
    kubeconfig = tmp_path / "kubeconfig"
    write_kubeconfig(kubeconfig, cluster.url)
    proc = start_cli(
        "webhook", "--workers", "2", "--config", str(volume.path), "--kubeconfig",
        str(kubeconfig), "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
        "--tls-cert", str(certs.cert_file), "--tls-key", str(certs.key_file),
    )  # fmt: skip
    try:
        port = int(wait_for_log(proc, r"https://[^:]+:(\d+), metrics", timeout=60)[1])
        parent = int(wait_for_log(proc, r"workers; merged metrics on http://[^:]+:(\d+)")[1])
        until(lambda: ready(parent), 20)
        unlabelled = pinned_to("web-1")
        assert not allowed(certs, port, unlabelled)  # every node managed: refused

        volume.write(ONLY_TRAIN_NODES)
        # Each review on a connection of its own: the kernel spreads them over both workers.
        took = until(lambda: all(allowed(certs, port, unlabelled) for _ in range(12)), 8)
        assert took < 5, f"took {took:.1f}s"
        assert not allowed(certs, port, pinned_to("gpu-1"))  # a managed node still is
        applied_by_both = 'volcano_guard_config_reloads_total{result="applied"} 2.0'
        until(lambda: applied_by_both in metrics(parent), 5)  # one a worker, summed

        volume.write("policies: {nodeName: {mode: sometimes}}\n")
        line = wait_for_log(proc, r"config file .* refused .*", timeout=10)[0]
        assert str(volume.path) in line and "policies.nodeName.mode" in line
        until(lambda: 'config_reloads_total{result="rejected"} 2.0' in metrics(parent), 10)
        assert all(allowed(certs, port, unlabelled) for _ in range(12))  # the last good one
    finally:
        proc.terminate()
        proc.wait(20)


@pytest.mark.slow  # a stress run
def test_a_reviews_stream_sees_no_error_or_denial_while_the_config_is_rewritten(
    cluster, certs, tmp_path
):
    """Both configs allow the stream's pod (pinned to a node the one does not manage, and the
    other does not look at nodes); the webhook starts with no cluster, so the first swap to the
    config that reads nodes connects and starts the nodes informer while reviews flow."""
    volume = ConfigMapVolume(tmp_path / "config")
    volume.write(NO_CLUSTER)
    config = load_config(volume.path)
    caches = Caches.for_config(config, None, connect=lambda: Cluster(cluster.url))
    live = LiveConfig(config)
    reloader = config_reloader(volume.path, live, caches, None, interval=0.01, sync_timeout=10)
    stop = threading.Event()

    def rewrite() -> None:
        for index in range(60):
            if stop.is_set():
                return
            volume.write(TRAIN_NODES_ONLY_NO_POD_GROUPS if index % 2 == 0 else NO_CLUSTER)
            time.sleep(0.03)

    answered = 0

    async def stream(session: aiohttp.ClientSession, url: str, body: bytes) -> list[str]:
        nonlocal answered
        problems = []
        while not stop.is_set():
            answered += 1
            async with session.post(url, data=body, server_hostname=HOSTNAME, headers={
                "Content-Type": "application/json"}) as response:  # fmt: skip
                answer = await response.json()
            if response.status != 200 or not answer["response"]["allowed"]:
                problems.append(f"{response.status} {answer}")
        return problems

    async def main() -> tuple[list[str], int]:
        tls = server_context(certs.cert_file, certs.key_file)
        body = pinned_to("web-1")  # unlabelled: not managed under ONLY_TRAIN_NODES
        async with running(
            config, Listen("127.0.0.1", 0), Listen("127.0.0.1", 0), tls, caches=caches, live=live
        ) as (port, _):
            caches.start()
            watcher = asyncio.create_task(reloader.watch())
            connector = aiohttp.TCPConnector(ssl=client_context(certs.ca_file))
            async with aiohttp.ClientSession(connector=connector) as session:
                url = f"https://127.0.0.1:{port}/validate"
                streams = [asyncio.create_task(stream(session, url, body)) for _ in range(4)]
                await asyncio.to_thread(rewrite)
                await asyncio.sleep(0.2)  # the last write applied
                stop.set()
                results = await asyncio.gather(*streams)
            watcher.cancel()
            caches.stop()
        return [problem for found in results for problem in found], reloader.applied

    problems, applied = asyncio.run(main())
    assert problems == []
    assert answered >= 200, f"only {answered} reviews: the test proved little"
    assert applied >= 10, f"only {applied} reloads applied: the test proved little"


def refusing_connect() -> Cluster:
    raise ValueError("no kubeconfig: set --kubeconfig")


@pytest.mark.parametrize(
    ("connect", "problem"),
    [
        (refusing_connect, "no kubeconfig"),
        (lambda: Cluster("http://127.0.0.1:9"), "cache it needs did not sync within 1s"),
    ],
    ids=["no cluster", "cache never syncs"],
)
async def test_a_config_whose_caches_cannot_be_had_is_refused_and_the_old_one_serves(
    tmp_path, caplog, connect, problem
):
    volume = ConfigMapVolume(tmp_path / "config")
    volume.write(NO_CLUSTER)
    config = load_config(volume.path)
    caches = Caches.for_config(config, None, connect=connect)
    caches.start()
    live = LiveConfig(config)
    reloader = config_reloader(volume.path, live, caches, None, sync_timeout=1)
    try:
        volume.write(TRAIN_NODES_ONLY_NO_POD_GROUPS)
        assert await reloader.check() is False
    finally:
        caches.stop()
    assert live.current.config == config
    assert caches.ready()  # readiness still counts only the caches of the config in force
    assert reloader.rejected == 1
    assert problem in caplog.records[-1].getMessage()
