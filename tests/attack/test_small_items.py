"""Attack runs on the smaller holes of issue 45 (case 9), against the sandbox API server."""

import copy
from typing import Any

import aiohttp
import pytest

from tests.webhook.test_pod_groups import PG
from volcano_guard.webhook.admission_policies import admission_policies
from volcano_guard.webhook.config import config_from_dict
from volcano_guard.webhook.policies.pod_groups import GENERATION_ID
from volcano_guard_sandbox.apiserver.runner import SandboxThread

pytestmark = pytest.mark.slow
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
PODGROUP_PATH = "/apis/scheduling.volcano.sh/v1beta1/namespaces/team-a/podgroups/pg"


async def _install_policies(session: aiohttp.ClientSession, url: str) -> None:
    """The guard's in-server checks, as `volcano-guard manifests` prints them (no webhook)."""
    for obj in admission_policies(config_from_dict({})):
        plural = (
            "validatingadmissionpolicies"
            if obj["kind"] == "ValidatingAdmissionPolicy"
            else "validatingadmissionpolicybindings"
        )
        async with session.post(f"{url}{ADMISSION}/{plural}", json=obj) as response:
            assert response.status == 201, await response.text()


async def test_a_podgroup_created_without_an_id_cannot_be_given_one_by_an_update():
    unstamped: dict[str, Any] = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "pg", "namespace": "team-a"},
        "spec": {"minMember": 1},
    }
    with SandboxThread() as sandbox:
        sandbox.seed([unstamped])  # made before the guard, or while its stamp was off
        current = sandbox.call(lambda sb: sb.store.get(PG, "team-a", "pg").object())
        async with aiohttp.ClientSession() as session:
            await _install_policies(session, sandbox.url)
            claimed = copy.deepcopy(current)
            claimed["metadata"]["annotations"] = {GENERATION_ID: "0190-another-incarnations-id"}
            async with session.put(f"{sandbox.url}{PODGROUP_PATH}", json=claimed) as response:
                status, body = response.status, await response.json()
    assert status == 403, body  # the validation's reason: Forbidden
    assert "podgroup-generation-id" in body["message"]
