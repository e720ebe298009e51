"""The node states the in-server node-name checks read: split by name into ConfigMaps under the
API server's 1 MiB, written so that no moment between two writes admits a pod either set of
states refuses, and kept current by the publisher against a real API server (the sandbox)."""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import Any

import aiohttp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.webhook.test_admission_policies import (
    config_of,
    in_server_verdict,
    pinned_pod,
    webhook_verdict_for,
)
from volcano_guard.base.informer import static_snapshot
from volcano_guard.base.kubeconfig import Cluster
from volcano_guard.webhook.config import config_from_dict
from volcano_guard.webhook.node_states import NAMES as POOL
from volcano_guard.webhook.node_states import (
    RANGE_BYTES,
    NodeRange,
    NodeStatesPublisher,
    PublisherEvents,
    configmap,
    from_configmap,
    plan,
    publishes,
)
from volcano_guard.webhook.policies.node_name.in_server import MANAGED, UNMANAGED
from volcano_guard_sandbox.apiserver.runner import running

MIB = 1024 * 1024


def covering(ranges: list[NodeRange], node: str) -> list[NodeRange]:
    return [r for r in ranges if r.holds(node)]


def test_100000_nodes_fit_in_configmaps_the_api_server_accepts():
    states = {
        f"ip-10-{i // 65536}-{i // 256 % 256}-{i % 256}.eu-west-1.compute.internal": MANAGED
        if i % 10
        else UNMANAGED
        for i in range(100_000)
    }
    writes = plan([], states)
    assert writes[0] == NodeRange("", "", pending=True, name=writes[-1].name)  # refuses all
    assert writes[-1].start == "" and not writes[-1].pending  # ... until the rest exist
    ranges = sorted({r.start: r for r in writes}.values(), key=lambda r: r.start)
    assert ranges[0].start == "" and ranges[-1].end == "" and not ranges[0].pending
    assert all(a.end == b.start for a, b in itertools.pairwise(ranges))
    for r in ranges:
        data = configmap(r, "volcano-guard")["data"]
        assert sum(len(k) + len(v) for k, v in data.items()) <= RANGE_BYTES < MIB
    assert {n: s for r in ranges for n, s in r.states.items()} == states
    assert 6 <= len(ranges) <= 12, len(ranges)  # 5.5 MB of names and states
    assert len({r.name for r in ranges}) == len(ranges) and {r.name for r in ranges} <= set(
        POOL
    )  # names the reconciler's Role lists


def test_nothing_is_written_when_the_states_are_what_is_stored():
    states = {"a": MANAGED, "b": UNMANAGED, "c": MANAGED}
    stored = [stored_copy(r) for r in plan([], states, limit=10)]
    assert plan(stored, states, limit=10) == []


def stored_copy(node_range: NodeRange, version: int = 1) -> NodeRange:
    """node_range as the API server hands it back: from its ConfigMap, with a resourceVersion."""
    obj = configmap(node_range, "volcano-guard")
    obj["metadata"]["resourceVersion"] = str(version)
    return from_configmap(json.loads(json.dumps(obj)))


def test_left_overs_of_an_interrupted_split_are_read_as_a_partition():
    # A split that created its upper half and stopped before shrinking the whole range.
    whole = stored_copy(
        NodeRange("", "", {"a": MANAGED, "m": UNMANAGED, "z": MANAGED}, name=POOL[0])
    )
    upper = stored_copy(NodeRange("m", "", {"m": UNMANAGED, "z": MANAGED}, name=POOL[1]))
    writes = plan([whole, upper], {"a": MANAGED, "m": UNMANAGED, "z": MANAGED}, limit=100)
    assert [(r.start, r.end, dict(r.states)) for r in writes] == [("", "m", {"a": MANAGED})]


def test_a_first_range_deleted_by_hand_is_created_again():
    upper = stored_copy(NodeRange("m", "", {"m": UNMANAGED, "z": MANAGED}, name=POOL[0]))
    writes = plan([upper], {"a": MANAGED, "m": UNMANAGED, "z": MANAGED}, limit=100)
    assert [(r.start, r.end, dict(r.states), r.resource_version, r.name) for r in writes] == [
        ("", "m", {"a": MANAGED}, "", POOL[1])  # the first name no range uses
    ]


def test_past_the_names_the_role_lists_no_range_is_written():
    states = {f"node-{i:03}": MANAGED for i in range(len(POOL) + 1)}
    with pytest.raises(ValueError, match=f"more than {len(POOL)} ConfigMaps"):
        plan([], states, limit=1)


NAMES = st.sampled_from(["a", "b", "cc", "d", "ee", "f", "gg", "h"])
STATES = st.dictionaries(NAMES, st.sampled_from([MANAGED, UNMANAGED]), max_size=8)


@pytest.mark.slow  # a race searched for: 15 histories through the real policy, ~0.3 s each
@settings(max_examples=15, deadline=None)
@given(history=st.lists(STATES, min_size=1, max_size=4))
def test_no_moment_between_writes_admits_what_both_states_refuse(history):
    """Each write applied alone, as the API server sees them one at a time: a pinned pod is
    admitted only if the states before or after the writes admit it; once they are all done,
    exactly as the states say (the real policy, in the sandbox's CEL, judging)."""
    config = config_of("selectors")
    stored: dict[str, NodeRange] = {}
    before: dict[str, str] = {}
    for version, states in enumerate(history, start=1):
        for written in plan(list(stored.values()), states, limit=12):
            stored[written.start] = stored_copy(written, version)  # the name follows the start
            for node in set(before) | set(states) | {"zz"}:
                if admitted(config, stored, node):
                    assert UNMANAGED in (before.get(node), states.get(node)), (node, stored)
        for node in set(before) | set(states) | {"zz"}:
            assert admitted(config, stored, node) == (states.get(node) == UNMANAGED)
        before = states


def admitted(config: Any, stored: dict[str, NodeRange], node: str) -> bool:
    params = [configmap(r, "volcano-guard") for r in stored.values()]
    return in_server_verdict(config, pinned_pod(node), "alice", (), params)[0]


# -- the publisher against an API server --------------------------------------------------------

LABELS = {"gpu-1": {"volcano.sh/role": "train"}, "web-1": {"role": "web"}}
STATES_PATH = "/api/v1/namespaces/volcano-guard/configmaps"


async def listed(session: aiohttp.ClientSession, url: str) -> list[dict[str, Any]]:
    async with session.get(
        url + STATES_PATH,
        params={"labelSelector": "volcano-guard.io/params=node-states"},
        headers={"Authorization": "Bearer admin"},
    ) as response:
        return list((await response.json())["items"])


@pytest.fixture
async def api_server():
    async with running() as sandbox, aiohttp.ClientSession() as session:
        sandbox.seed(
            [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "volcano-guard"}}]
        )
        yield sandbox.url, session


async def test_the_publisher_writes_the_states_and_then_only_what_changes(api_server):
    url, session = api_server
    labels = dict(LABELS)
    snapshot = static_snapshot(labels)
    publisher = NodeStatesPublisher(
        config_of("selectors"),
        Cluster(url, token="admin"),
        "volcano-guard",
        lambda: snapshot,
        limit=30,
    )
    assert await publisher.publish_once(session)
    stored = await listed(session, url)
    assert {n: s for c in stored for n, s in c["data"].items()} == {
        "gpu-1": MANAGED,
        "web-1": UNMANAGED,
    }
    assert not await publisher.publish_once(session)  # nothing changed: nothing read or written
    labels["web-2"] = {"role": "web"}
    snapshot = static_snapshot(labels)
    assert await publisher.publish_once(session)
    params = await listed(session, url)
    assert len(stored) == 1 and len(params) == 2  # 40 bytes of states: the range split
    verdicts = {
        node: in_server_verdict(config_of("selectors"), pinned_pod(node), "alice", (), params)[0]
        for node in ("gpu-1", "web-1", "web-2", "x")
    }
    assert verdicts == {"gpu-1": False, "web-1": True, "web-2": True, "x": False}
    assert all(
        webhook_verdict_for(config_of("selectors"), pinned_pod(node), labels) == allowed
        for node, allowed in verdicts.items()
    )


async def test_the_publisher_waits_for_a_synced_cache(api_server):
    url, session = api_server
    unsynced = static_snapshot(LABELS).__class__(static_snapshot(LABELS).items, synced=False)
    publisher = NodeStatesPublisher(
        config_of("selectors"), Cluster(url, token="admin"), "volcano-guard", lambda: unsynced
    )
    assert not await publisher.publish_once(session)
    assert await listed(session, url) == []


class RacingSession:
    """A session in which another replica updates each object just before this one does."""

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self.session = session
        self.get, self.post = session.get, session.post

    def put(self, url: str, json: dict[str, Any], headers: dict[str, str]) -> Any:
        other = {**json, "data": {"zz": MANAGED}}
        return _RacedPut(self.session, url, other, json, headers)


class _RacedPut:
    def __init__(
        self,
        session: aiohttp.ClientSession,
        url: str,
        other: dict[str, Any],
        mine: dict[str, Any],
        headers: dict[str, str],
    ) -> None:
        self.args = session, url, other, mine, headers

    async def __aenter__(self) -> aiohttp.ClientResponse:
        session, url, other, mine, headers = self.args
        async with session.put(url, json=other, headers=headers) as response:
            assert response.status == 200
        self.response = await session.put(url, json=mine, headers=headers)
        return self.response

    async def __aexit__(self, *exc: object) -> None:
        self.response.release()


async def test_a_write_refused_with_409_is_repaired_from_a_new_list(api_server):
    url, session = api_server
    cluster, config = Cluster(url, token="admin"), config_of("selectors")
    snapshot = static_snapshot(LABELS)
    publisher = NodeStatesPublisher(config, cluster, "volcano-guard", lambda: snapshot)
    assert await publisher.publish_once(session)
    snapshot = static_snapshot({**LABELS, "gpu-2": {"volcano.sh/role": "train"}})
    assert await publisher.publish_once(RacingSession(session))  # type: ignore[arg-type]
    stored = {n: s for c in await listed(session, url) for n, s in c["data"].items()}
    assert stored == {"gpu-1": MANAGED, "gpu-2": MANAGED, "web-1": UNMANAGED}


def test_a_labelled_configmap_of_a_name_not_the_guards_is_never_read_as_a_range():
    forged = configmap(NodeRange("", "", {"web-1": MANAGED}, name="forged"), "volcano-guard")
    own = configmap(NodeRange("", "", {"web-1": MANAGED}, name=POOL[0]), "volcano-guard")
    config = config_of("selectors")
    assert in_server_verdict(config, pinned_pod("web-1"), "alice", (), [forged])[0]
    assert not in_server_verdict(config, pinned_pod("web-1"), "alice", (), [own])[0]


async def test_a_round_that_cannot_reach_the_api_server_is_reported_as_a_stall():
    stalls: list[str] = []
    snapshot = static_snapshot(LABELS)
    publisher = NodeStatesPublisher(
        config_of("selectors"),
        Cluster("http://127.0.0.1:9", token="admin"),  # the discard port: refused
        "volcano-guard",
        lambda: snapshot,
        interval=0.01,
        events=PublisherEvents(stalled=stalls.append),
    )
    task = asyncio.create_task(publisher.run())
    async with asyncio.timeout(5):
        while not stalls:
            await asyncio.sleep(0.01)
    task.cancel()
    assert "next try in 0.01s" in stalls[0]


@pytest.mark.parametrize(
    ("keys", "published"),
    [
        ({}, True),  # the node-name checks read them
        ({"validatingAdmissionPolicies": False}, False),
        # The rewrite, a MutatingAdmissionPolicy, reads them though no check is installed.
        ({"validatingAdmissionPolicies": False, "action": "rewrite"}, True),
        (
            {"validatingAdmissionPolicies": False, "mutatingAdmissionPolicies": False},
            False,
        ),
        ({"managedNodeSelectors": []}, False),  # every node managed: no state to read
    ],
)
def test_states_are_published_when_an_installed_check_or_mutation_reads_them(keys, published):
    keys = {"managedNodeSelectors": ["volcano.sh/role:train"], "action": "deny", **keys}
    top = {key: keys.pop(key) for key in list(keys) if key.endswith("AdmissionPolicies")}
    config = config_from_dict({**top, "policies": {"nodeName": keys}})
    assert publishes(config) is published
