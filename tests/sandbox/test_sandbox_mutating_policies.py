"""The sandbox runs MutatingAdmissionPolicies as kube-apiserver 1.36 does: served at v1 (404
before 1.36 unless --runtime-config turns a pre-release version on), refused when written with
what 1.36 refuses or the sandbox does not model, and run first among the mutating plugins
(kube-apiserver plugins.go AllOrderedPlugins: MutatingAdmissionPolicy, then
MutatingAdmissionWebhook), with reinvocation, failurePolicy, matchConditions and params."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from kubernetes import client

from tests.conftest import NAMESPACE, SERVICE
from tests.sandbox.admission_chain import PODS, Box, pod
from volcano_guard_sandbox.apiserver.endpoints import ServiceEndpoints
from volcano_guard_sandbox.apiserver.runner import SandboxThread, running
from volcano_guard_sandbox.apiserver.server import SandboxSettings
from volcano_guard_sandbox.apiserver.versions import KubernetesVersion

GROUP = "/apis/admissionregistration.k8s.io/v1"
POLICIES, BINDINGS = (
    f"{GROUP}/mutatingadmissionpolicies",
    f"{GROUP}/mutatingadmissionpolicybindings",
)
POD_RULES = {
    "resourceRules": [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
    ]
}
# Counts its runs in a label: x, then x+, x++...
COUNT = (
    '[JSONPatch{op: "add", path: "/metadata/labels/runs", value: '
    "has(object.metadata.labels.runs) ? object.metadata.labels.runs + '+' : 'x'}]"
)
ADD_TEAM = '[JSONPatch{op: "add", path: "/metadata/labels/team", value: "from-policy"}]'


def policy(name: str = "add-team", expression: str = ADD_TEAM, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "matchConstraints": POD_RULES,
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": expression}}],
            **spec,
        },
    }


def binding(name: str = "add-team", policy_name: str = "", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": policy_name or name, **spec},
    }


async def install(box: Box, *objects: dict[str, Any]) -> None:
    for obj in objects:
        path = POLICIES if obj["kind"] == "MutatingAdmissionPolicy" else BINDINGS
        status, body, _ = await box.call("POST", path, obj)
        assert status == 201, body


@pytest.fixture
async def box136(certs, scripted) -> AsyncIterator[Box]:
    settings = SandboxSettings(
        services=ServiceEndpoints({(NAMESPACE, SERVICE, 443): [("127.0.0.1", scripted.port)]}),
        kubernetes_version=KubernetesVersion(36),
    )
    async with running(settings=settings) as sandbox, aiohttp.ClientSession() as session:
        sandbox.seed(
            [
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": "team-a", "labels": {"tier": "gold"}},
                }
            ]
        )
        yield Box(sandbox.url, session, base64.b64encode(certs.ca_file.read_bytes()).decode())


def _labels(body: dict[str, Any]) -> dict[str, str]:
    return body["metadata"].get("labels") or {}


async def test_a_pod_create_comes_back_mutated_by_a_bound_policy(box136):
    await install(box136, policy(), binding())
    status, created, _ = await box136.call("POST", PODS, pod("p1"))
    assert status == 201, created
    assert _labels(created) == {"team": "from-policy"}
    status, stored, _ = await box136.call("GET", f"{PODS}/p1")
    assert _labels(stored) == {"team": "from-policy"}


async def test_an_unbound_policy_mutates_nothing(box136):
    await install(box136, policy())
    assert _labels((await box136.call("POST", PODS, pod("p1")))[1]) == {}


async def test_params_and_match_conditions_decide_what_is_written(box136):
    configmap = {"metadata": {"name": "team"}, "data": {"team": "blue"}}
    assert (await box136.call("POST", "/api/v1/namespaces/team-a/configmaps", configmap))[0] == 201
    await install(
        box136,
        policy(
            expression=ADD_TEAM.replace('"from-policy"', "params.data.team"),
            paramKind={"apiVersion": "v1", "kind": "ConfigMap"},
            matchConditions=[
                {"name": "not-skipped", "expression": "object.metadata.name != 'skip'"}
            ],
        ),
        binding(paramRef={"name": "team", "parameterNotFoundAction": "Deny"}),
    )
    assert _labels((await box136.call("POST", PODS, pod("p1")))[1]) == {"team": "blue"}
    assert _labels((await box136.call("POST", PODS, pod("skip")))[1]) == {}


@pytest.mark.parametrize(("failure_policy", "status"), [("Fail", 403), ("Ignore", 201)])
async def test_a_mutation_that_fails_follows_the_failure_policy(box136, failure_policy, status):
    await install(
        box136,
        policy(
            expression='[JSONPatch{op: "replace", path: "/spec/nothing/here", value: 1}]',
            failurePolicy=failure_policy,
        ),
        binding(),
    )
    answer, body, _ = await box136.call("POST", PODS, pod("p1"))
    assert answer == status, body
    if status == 403:
        assert body["reason"] == "Invalid"
        assert body["message"] == (
            "policy 'add-team' with binding 'add-team' denied request: JSON Patch: replace "
            "operation does not apply: doc is missing path: /spec/nothing/here: missing value"
        )


async def test_a_patch_that_leaves_no_object_is_an_internal_error_even_under_ignore(box136):
    await install(
        box136,
        policy(
            expression='[JSONPatch{op: "replace", path: "/metadata", value: "flat"}]',
            failurePolicy="Ignore",
        ),
        binding(),
    )
    status, body, _ = await box136.call("POST", PODS, pod("p1"))
    assert (status, body["reason"]) == (500, "InternalError"), body


def _webhook_patch(label: str, value: str) -> dict[str, Any]:
    patch = [{"op": "add", "path": f"/metadata/labels/{label}", "value": value}]
    return {
        "allowed": True,
        "patchType": "JSONPatch",
        "patch": base64.b64encode(json.dumps(patch).encode()).decode(),
    }


def _hooking(seen: list[dict[str, str]]) -> Any:
    """A webhook's answer: note the labels it is sent, add `hooked: yes` unless there."""

    def answer(request: dict[str, Any]) -> dict[str, Any]:
        labels = request["object"]["metadata"].get("labels") or {}
        seen.append(dict(labels))
        return {"allowed": True} if "hooked" in labels else _webhook_patch("hooked", "yes")

    return answer


async def test_policies_run_before_mutating_webhooks_and_again_when_needed(box136, scripted):
    seen: list[dict[str, str]] = []
    scripted.answer = _hooking(seen)
    await box136.register("mutating", "labeller", box136.hook("m.example.com", path="/mutate"))
    await install(
        box136,
        policy("counter", COUNT, reinvocationPolicy="IfNeeded"),
        binding("counter"),
    )
    status, created, _ = await box136.call("POST", PODS, pod("p1"))
    assert status == 201, created
    # The policy ran first (the webhook saw its label), then again after the webhook's change.
    assert seen[0] == {"runs": "x"}
    assert _labels(created) == {"runs": "x+", "hooked": "yes"}


async def test_an_ifneeded_webhook_runs_again_after_a_reinvoked_policy_changes_the_object(
    box136, scripted
):
    seen: list[dict[str, str]] = []
    scripted.answer = _hooking(seen)
    hook = box136.hook("m.example.com", path="/mutate", reinvocationPolicy="IfNeeded")
    await box136.register("mutating", "labeller", hook)
    await install(
        box136, policy("counter", COUNT, reinvocationPolicy="IfNeeded"), binding("counter")
    )
    assert _labels((await box136.call("POST", PODS, pod("p1")))[1]) == {
        "runs": "x+",
        "hooked": "yes",
    }
    # Second pass: the policy changed the object after the webhook's first call, so the
    # webhook's context (the object differs from what it last left) calls it again.
    assert seen == [{"runs": "x"}, {"runs": "x+", "hooked": "yes"}]


async def test_a_never_policy_is_not_run_again(box136, scripted):
    scripted.answer = _hooking([])
    await box136.register("mutating", "labeller", box136.hook("m.example.com", path="/mutate"))
    await install(box136, policy("counter", COUNT), binding("counter"))
    assert _labels((await box136.call("POST", PODS, pod("p1")))[1]) == {
        "runs": "x",
        "hooked": "yes",
    }


@pytest.mark.parametrize(
    ("obj", "said"),
    [
        (
            policy(expression="object.metadata"),
            "must evaluate to list(JSONPatch) but got dyn",
        ),
        (
            policy(
                mutations=[
                    {
                        "patchType": "ApplyConfiguration",
                        "applyConfiguration": {"expression": "Object{}"},
                    }
                ]
            ),
            "the sandbox does not model ApplyConfiguration mutations",
        ),
        (policy(mutations=[]), "spec.mutations: Required value"),
        (
            policy(reinvocationPolicy="Sometimes"),
            'spec.reinvocationPolicy: Unsupported value: "Sometimes"',
        ),
        (
            binding(policy_name="-", paramRef={"name": "x"}),
            "parameterNotFoundAction: Required value",
        ),
    ],
)
async def test_what_1_36_refuses_or_the_sandbox_does_not_model_is_refused_on_write(
    box136, obj, said
):
    path = POLICIES if obj["kind"] == "MutatingAdmissionPolicy" else BINDINGS
    status, body, _ = await box136.call("POST", path, obj)
    assert (status, body["reason"]) == (422, "Invalid")
    assert said in body["message"]


async def test_a_field_of_the_wrong_json_type_is_a_bad_request(box136):
    status, body, _ = await box136.call("POST", POLICIES, policy(matchConditions="yes"))
    assert (status, body["reason"]) == (400, "BadRequest")
    assert (
        "cannot unmarshal string into field spec.matchConditions of type array" in (body["message"])
    )


@pytest.mark.parametrize("minor", [30, 35])
async def test_before_1_36_the_kind_is_not_served(minor):
    async with (
        running(kubernetes_version=KubernetesVersion(minor)) as sandbox,
        aiohttp.ClientSession() as session,
        session.post(sandbox.url + POLICIES, json=policy()) as answer,
    ):
        assert answer.status == 404


async def test_at_1_35_the_beta_runs_when_runtime_config_turns_it_on():
    beta = KubernetesVersion(35, frozenset({"admissionregistration.k8s.io/v1beta1"}))
    group = "/apis/admissionregistration.k8s.io/v1beta1"
    async with running(kubernetes_version=beta) as sandbox, aiohttp.ClientSession() as session:
        sandbox.seed([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}])
        for path, obj in (
            (f"{group}/mutatingadmissionpolicies", policy()),
            (f"{group}/mutatingadmissionpolicybindings", binding()),
        ):
            obj = {**obj, "apiVersion": "admissionregistration.k8s.io/v1beta1"}
            async with session.post(sandbox.url + path, json=obj) as answer:
                assert answer.status == 201, await answer.text()
        async with session.post(sandbox.url + PODS, json=pod("p1")) as answer:
            assert _labels(await answer.json()) == {"team": "from-policy"}


def test_kubernetes_client_writes_a_policy_and_a_pod_comes_back_mutated():
    with (
        SandboxThread(kubernetes_version=KubernetesVersion(36)) as sandbox,
        client.ApiClient(client.Configuration(host=sandbox.url)) as api,
    ):
        sandbox.seed([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}])
        custom = client.CustomObjectsApi(api)
        group = "admissionregistration.k8s.io"
        custom.create_cluster_custom_object(group, "v1", "mutatingadmissionpolicies", policy())
        custom.create_cluster_custom_object(
            group, "v1", "mutatingadmissionpolicybindings", binding()
        )
        created = client.CoreV1Api(api).create_namespaced_pod("team-a", pod("p1"))
        assert created.metadata.labels == {"team": "from-policy"}
