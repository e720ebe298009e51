"""Attack 6 of issue 45: someone who can write ConfigMaps in the guard's namespace hides,
deletes or forges a node-state param to get a pod pinned to a managed node admitted while the
webhook is down, or to have pods on unmanaged nodes refused. Each case against the sandbox API
server: the publisher's round after the attack puts the states back (or ignores and reports the
forgery), and the in-server check, given the params the API server selects (by label), refuses
what the states refuse. Bounded: a few publisher rounds each, a few seconds in all."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest

from tests.webhook.test_admission_policies import config_of, in_server_verdict, pinned_pod
from volcano_guard.base.informer import static_snapshot
from volcano_guard.base.kubeconfig import Cluster
from volcano_guard.webhook import node_states
from volcano_guard.webhook.node_states import NodeStatesPublisher
from volcano_guard_sandbox.apiserver.runner import running

pytestmark = pytest.mark.slow

NAMESPACE = "volcano-guard"
PATH = f"/api/v1/namespaces/{NAMESPACE}/configmaps"
ADMIN = {"Authorization": "Bearer admin"}
LABELS = {"gpu-1": {"volcano.sh/role": "train"}, "web-1": {"role": "web"}}
LABEL = "volcano-guard.io/params"


@pytest.fixture
async def api_server():
    async with running() as sandbox, aiohttp.ClientSession() as session:
        sandbox.seed([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}])
        yield sandbox.url, session


class Reported:
    """What the publisher reported (PublisherEvents where the code has them)."""

    def __init__(self) -> None:
        self.foreign: list[str] = []
        self.repaired: list[str] = []

    def events(self) -> dict[str, Any]:
        make = getattr(node_states, "PublisherEvents", None)
        if make is None:
            return {}
        return {"events": make(foreign=self._foreign, repaired=self.repaired.append)}

    def _foreign(self, names: list[str]) -> None:
        self.foreign = names


def publisher(url: str, reported: Reported) -> NodeStatesPublisher:
    snapshot = static_snapshot(LABELS)
    return NodeStatesPublisher(
        config_of("selectors"),
        Cluster(url, token="admin"),
        NAMESPACE,
        lambda: snapshot,
        **reported.events(),
    )


async def selected_params(session: aiohttp.ClientSession, url: str) -> list[dict[str, Any]]:
    """The params the binding's selector gives the API server: every labelled ConfigMap."""
    params = {"labelSelector": f"{LABEL}=node-states"}
    async with session.get(url + PATH, params=params, headers=ADMIN) as response:
        assert response.status == 200
        return list((await response.json())["items"])


async def admitted(session: aiohttp.ClientSession, url: str, node: str) -> bool:
    params = await selected_params(session, url)
    return in_server_verdict(config_of("selectors"), pinned_pod(node), "mallory", (), params)[0]


async def send(
    session: aiohttp.ClientSession, method: str, url: str, content_type: str = "", **kwargs: Any
) -> None:
    headers = {**ADMIN, "Content-Type": content_type} if content_type else ADMIN
    async with session.request(method, url, headers=headers, **kwargs) as response:
        assert response.status < 300, await response.text()


async def published(session: aiohttp.ClientSession, url: str, reported: Reported) -> Any:
    states = publisher(url, reported)
    await states.publish_once(session)
    assert not await admitted(session, url, "gpu-1")
    assert await admitted(session, url, "web-1")
    return states


async def test_a_param_whose_label_is_taken_off_is_labelled_again_in_one_round(api_server):
    url, session = api_server
    reported = Reported()
    states = await published(session, url, reported)
    (param,) = await selected_params(session, url)
    name = param["metadata"]["name"]
    await _merge_patch(session, f"{url}{PATH}/{name}", {"metadata": {"labels": {LABEL: None}}})
    assert await admitted(session, url, "gpu-1")  # the bypass the attack opens
    await states.publish_once(session)
    assert not await admitted(session, url, "gpu-1")
    assert reported.repaired == [name] or not reported.events()


async def _merge_patch(session: aiohttp.ClientSession, url: str, patch: dict[str, Any]) -> None:
    headers = {**ADMIN, "Content-Type": "application/merge-patch+json"}
    async with session.patch(url, json=patch, headers=headers) as response:
        assert response.status == 200, await response.text()


async def test_a_deleted_param_is_created_again_in_one_round(api_server):
    url, session = api_server
    states = await published(session, url, Reported())
    (param,) = await selected_params(session, url)
    await send(session, "DELETE", f"{url}{PATH}/{param['metadata']['name']}")
    assert await admitted(session, url, "gpu-1")  # the bypass the attack opens
    await states.publish_once(session)
    assert not await admitted(session, url, "gpu-1")


async def test_a_forged_labelled_configmap_is_not_read_and_is_reported(api_server):
    url, session = api_server
    reported = Reported()
    states = await published(session, url, reported)
    forged = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "node-states-extra", "labels": {LABEL: "node-states"}},
        "data": {"web-1": "managed"},
    }
    await send(session, "POST", url + PATH, json=forged)
    await states.publish_once(session)
    assert await admitted(session, url, "web-1")  # an unmanaged node stays open
    assert not await admitted(session, url, "gpu-1")
    assert reported.foreign == ["node-states-extra"]


async def test_a_param_name_taken_before_the_guard_is_taken_back(api_server):
    """The first range's name created first by someone else, unlabelled: the guard's create
    meets a 409, which is not another replica's write but something to repair."""
    url, session = api_server
    squatter = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": node_states.NAMES[0], "namespace": NAMESPACE},
        "data": {"gpu-1": "unmanaged"},
    }
    await send(
        session,
        "PATCH",
        f"{url}{PATH}/{node_states.NAMES[0]}",
        data=json.dumps(squatter),
        params={"fieldManager": "mallory"},
        content_type="application/apply-patch+yaml",
    )
    states = publisher(url, Reported())
    for _ in range(3):  # a few rounds: not one more than a replica that lost a race needs
        await states.publish_once(session)
    assert not await admitted(session, url, "gpu-1")
    assert await admitted(session, url, "web-1")
