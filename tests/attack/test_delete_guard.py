"""Attack runs on the PodGroup delete guard (issue 45, case 8): a pod that reaches the webhook's
port forges DELETE reviews. It must learn nothing it could not see already, and its reviews must
not starve the API server's. Loopback sources tell them apart: the attacker 127.0.0.2, the API
server 127.0.0.1."""

import asyncio
import copy
import json
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest

from tests.conftest import HOSTNAME
from tests.webhook.test_pod_groups import PG, pg_review, synced
from volcano_guard.base.kubeconfig import Cluster
from volcano_guard.base.listen import Listen
from volcano_guard.base.tls import client_context, server_context
from volcano_guard.certs.generate import GeneratedCerts
from volcano_guard.webhook.caches import Caches
from volcano_guard.webhook.config import config_from_dict
from volcano_guard.webhook.server import running
from volcano_guard_sandbox.apiserver.faults import FaultRule
from volcano_guard_sandbox.apiserver.runner import SandboxThread

pytestmark = pytest.mark.slow
API_SERVER, ATTACKER = "127.0.0.1", "127.0.0.2"
CONFIG = config_from_dict(
    {"policies": {"nodeName": {"mode": "off", "bindingGuard": {"mode": "off"}}}}
)
Review = Callable[[str, dict[str, Any]], Coroutine[Any, Any, dict[str, Any]]]


def _pod(namespace: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": {"scheduling.k8s.io/group-name": "pg"},
        },
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }


def _podgroup(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "pg", "namespace": namespace},
        "spec": {"minMember": 1},
    }


def _delete(namespace: str, old: dict[str, Any]) -> dict[str, Any]:
    review = pg_review("DELETE", None, old, user="someone")
    review["request"]["namespace"] = namespace
    return review


@asynccontextmanager
async def _webhook(url: str, certs: GeneratedCerts) -> AsyncIterator[Callable[[str], Review]]:
    """The webhook over HTTPS on 127.0.0.1, its caches from the sandbox; yields
    client(source) -> review(path, body), whose connections come from source."""
    caches = Caches.for_config(CONFIG, Cluster(url), lookup_timeout=1.5)
    sessions: list[aiohttp.ClientSession] = []
    if True:
        try:
            await synced(caches)
            tls = server_context(certs.cert_file, certs.key_file)
            async with running(
                CONFIG, Listen(API_SERVER, 0), Listen(API_SERVER, 0), tls, caches=caches
            ) as (port, _):

                def client(source: str) -> Review:
                    connector = aiohttp.TCPConnector(
                        ssl=client_context(certs.ca_file), local_addr=(source, 0), limit=0
                    )
                    session = aiohttp.ClientSession(connector=connector)
                    sessions.append(session)

                    async def review(path: str, body: dict[str, Any]) -> dict[str, Any]:
                        async with session.post(
                            f"https://{API_SERVER}:{port}{path}",
                            json=body,
                            server_hostname=HOSTNAME,
                        ) as response:
                            return (await response.json())["response"]  # type: ignore[no-any-return]

                    return review

                yield client
        finally:
            for session in sessions:
                await session.close()
            caches.stop()
            await caches.close()


async def test_a_forged_delete_cannot_tell_an_existing_podgroup_from_none(certs):
    with SandboxThread() as sandbox:
        sandbox.seed([_pod("victim", "secret-pod"), _podgroup("victim")])
        real = sandbox.call(lambda sb: sb.store.get(PG, "victim", "pg").object())
        async with _webhook(sandbox.url, certs) as client:
            attacker = client(ATTACKER)
            guessed = copy.deepcopy(real)
            guessed["metadata"]["uid"] = "00000000-0000-0000-0000-000000000000"
            guessed["metadata"].pop("creationTimestamp", None)
            existing = await attacker("/validate", _delete("victim", guessed))
            absent = await attacker("/validate", _delete("nobody-here", guessed))
    for answer in (existing, absent):
        answer.pop("uid", None)
    assert json.dumps(existing) == json.dumps(absent).replace(
        "nobody-here", "victim"
    )  # one answer: no existence oracle
    told = json.dumps(existing)
    for secret in ("secret-pod", real["metadata"]["uid"], real["metadata"]["creationTimestamp"]):
        assert secret not in told


async def test_forged_deletes_from_one_pod_do_not_starve_a_real_one(certs):
    with SandboxThread() as sandbox:
        sandbox.seed([_pod("victim", "w0"), _podgroup("victim")])
        sandbox.seed([_pod("attacker", "mine"), _podgroup("attacker")])
        victim = sandbox.call(lambda sb: sb.store.get(PG, "victim", "pg").object())
        # The attacker's own PodGroup: its uid is no secret to it, so its reviews get judged.
        own = sandbox.call(lambda sb: sb.store.get(PG, "attacker", "pg").object())
        async with _webhook(sandbox.url, certs) as client:
            attacker, api_server = client(ATTACKER), client(API_SERVER)
            # Every member list takes 0.3 s: each forged review holds a lookup that long.
            sandbox.set_faults(
                FaultRule(verbs=frozenset({"list"}), resources=frozenset({"pods"}), latency=0.3)
            )
            flood = [
                asyncio.create_task(attacker("/validate", _delete("attacker", own)))
                for _ in range(40)
            ]
            await asyncio.sleep(0.1)  # the flood holds what it can
            answer = await asyncio.wait_for(api_server("/validate", _delete("victim", victim)), 10)
            await asyncio.gather(*flood)
    assert answer["allowed"] is False
    message = answer["status"]["message"]
    assert "live" in message and "could not be listed" not in message
