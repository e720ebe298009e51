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
        if obj["kind"].startswith("Mutating"):  # the mutations: not what this file attacks
            continue
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


RECONCILER = "system:serviceaccount:volcano-guard:volcano-guard-reconciler"
SECRETS = "/api/v1/namespaces/volcano-guard/secrets"


def _secret(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "data": {}}


def _webhooks(client_config: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "volcano-guard"},
        "webhooks": [
            {
                "name": "validate.volcano-guard.io",
                "clientConfig": client_config,
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
            }
        ],
    }


async def test_the_reconciler_writes_only_its_secrets_and_webhooks_to_the_guard(tmp_path):
    import yaml

    from tests.deploy.test_deploy import REPO
    from volcano_guard_sandbox.apiserver.authn import load_token_file
    from volcano_guard_sandbox.apiserver.server import SandboxSettings

    tokens = tmp_path / "tokens.csv"
    tokens.write_text(
        f'admin,kubernetes-admin,0,"system:masters"\nrec,{RECONCILER},1,"system:serviceaccounts"\n'
    )
    limits = [
        d
        for d in yaml.safe_load_all((REPO / "deploy/base/reconciler-limits.yaml").read_text())
        if d
    ]
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "volcano-guard"}}
    settings = SandboxSettings(tokens=load_token_file(tokens))
    with SandboxThread(settings=settings) as sandbox:
        sandbox.seed([namespace])
        admin = {"Authorization": "Bearer admin"}
        async with aiohttp.ClientSession(headers=admin) as session:
            for obj in limits:
                plural = obj["kind"].lower().replace("policy", "policie") + "s"
                plural = plural.replace("policiebinding", "policybinding")
                async with session.post(f"{sandbox.url}{ADMISSION}/{plural}", json=obj) as r:
                    assert r.status == 201, await r.text()

        async def as_reconciler(path: str, body: dict[str, Any]) -> int:
            headers = {"Authorization": "Bearer rec"}
            async with (
                aiohttp.ClientSession(headers=headers) as session,
                session.post(f"{sandbox.url}{path}", json=body) as response,
            ):
                return response.status

        service = {"service": {"namespace": "volcano-guard", "name": "volcano-guard"}}
        webhooks = f"{ADMISSION}/validatingwebhookconfigurations"
        assert await as_reconciler(SECRETS, _secret("volcano-guard-tls")) == 201
        assert await as_reconciler(SECRETS, _secret("someone-elses")) == 403
        assert await as_reconciler(webhooks, _webhooks({"url": "https://evil.example/"})) == 403
        elsewhere = {"service": {"namespace": "other", "name": "volcano-guard"}}
        assert await as_reconciler(webhooks, _webhooks(elsewhere)) == 403
        assert await as_reconciler(webhooks, _webhooks(service)) == 201
