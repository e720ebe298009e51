"""A policy's in-server mutations (Policy.mutate_in_server) as MutatingAdmissionPolicies: what
`manifests` prints at each Kubernetes version (v1 from 1.36, v1beta1 in 1.34 and 1.35 only with
mutatingAdmissionPolicyBeta), valid against that version's schema (kubernetes-validate) and
stored by kubectl in the sandbox playing it; the registrations send the webhook nothing they
cover; and with the shipped config a Volcano pod create calls no webhook.

The policy units' own mutations land on other branches (issue 47): a toy policy that labels
pods stands for them here, under an owned name."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import kubernetes_validate
import msgspec
import pytest
import yaml

from tests.admission_model import called
from tests.webhook.test_registrations import GROUP_NAME, create_pod, pod, shipped
from volcano_guard.cli import main
from volcano_guard.webhook import admission_policies as rendering
from volcano_guard.webhook import registrations
from volcano_guard.webhook.admission_policies import PolicyApis, apis_at
from volcano_guard.webhook.cel import all_of, kind_is, operation_is
from volcano_guard.webhook.config import Config, config_from_dict
from volcano_guard.webhook.evaluation import POLICIES
from volcano_guard.webhook.manifests import MUTATING_BINDING, MUTATING_POLICY, admission_objects
from volcano_guard.webhook.policies.base import (
    INJECT,
    MUTATE,
    VALIDATE,
    InServerCheck,
    InServerMutation,
    Policy,
    Scope,
    pods_rule,
)
from volcano_guard.webhook.workloads import POD
from volcano_guard_sandbox.apiserver.runner import SandboxThread
from volcano_guard_sandbox.apiserver.versions import KubernetesVersion

LABELLED = "volcano-guard.io/toy"
CONDITION = all_of(kind_is(*POD), operation_is("CREATE"), "object.metadata.name == 'toy'")
PATCH = (
    "has(object.metadata.labels) ? [] : "
    "[JSONPatch{op: 'add', path: '/metadata/labels', value: {'toy': 'labelled'}}]"
)
RULES = (pods_rule("CREATE"),)
BETA = "admissionregistration.k8s.io/v1beta1"


def toy(
    webhook: str = MUTATE,
    params: tuple[str, str] | None = None,
    checks: bool = True,
    name: str = "default-requests",
) -> Policy:
    """A policy labelling pods named toy, and refusing them unlabelled, in the webhook and in the
    API server."""
    mutation = InServerMutation(
        name, RULES, CONDITION, PATCH, params_label=params, fails_open=webhook == INJECT
    )
    check = InServerCheck(
        "resource-requests", RULES, CONDITION, (("has(object.metadata.labels)", "'unlabelled'"),)
    )
    return Policy(
        name="toy",
        mode=lambda config: "enforce",
        scopes=lambda config: (Scope(webhook, RULES, CONDITION), Scope(VALIDATE, RULES, CONDITION)),
        in_server=lambda config: (check,) if checks else (),
        in_server_mutations=lambda config: (mutation,),
    )


@pytest.fixture
def with_policy(monkeypatch) -> Iterator[Any]:
    """Adds a policy (the toy's kinds) to those the registrations and the renderer read."""

    def add(policy: Policy) -> None:
        for module in (rendering, registrations):
            monkeypatch.setattr(module, "POLICIES", (*POLICIES, policy))

    yield add


# Every real policy off: the toy's objects alone.
NO_OTHERS = {
    "policies": {
        "resourceRequests": {"mode": "off"},
        "nodeName": {"mode": "off", "bindingGuard": {"mode": "off"}},
        "podGroups": {"stampGenerationId": False, "deleteGuard": {"mode": "off"}},
        "queues": {"mode": "off"},
        "sidecarInjection": {"mode": "off"},
    }
}


def no_others() -> Config:
    return config_from_dict(NO_OTHERS)


# -- rendering ------------------------------------------------------------------------------------


def test_a_mutation_becomes_a_policy_and_binding_that_reinvoke_and_fail_as_its_registration(
    with_policy,
):
    with_policy(toy())
    objects = rendering.mutating_policies(no_others(), "guard-ns")
    policy, binding = objects
    assert policy["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert policy["kind"] == "MutatingAdmissionPolicy"
    assert policy["metadata"]["name"] == "volcano-guard-default-requests"
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"  # defaults must not be skipped, as on `mutate`
    assert spec["reinvocationPolicy"] == "IfNeeded"
    assert spec["mutations"] == [{"patchType": "JSONPatch", "jsonPatch": {"expression": PATCH}}]
    assert spec["matchConditions"] == [{"name": "guarded", "expression": CONDITION}]
    excluded = spec["matchConstraints"]["namespaceSelector"]["matchExpressions"][0]["values"]
    assert excluded == ["guard-ns", "kube-system"]
    assert spec["matchConstraints"]["resourceRules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
    ]
    assert "paramKind" not in spec
    assert binding == {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": "volcano-guard-default-requests"},
        "spec": {"policyName": "volcano-guard-default-requests"},
    }


def test_an_injection_fails_open_and_params_are_read_as_the_validating_policies_read_them(
    with_policy,
):
    with_policy(toy(INJECT, params=("volcano-guard.io/params", "node-states")))
    policy, binding = rendering.mutating_policies(no_others())
    assert policy["spec"]["failurePolicy"] == "Ignore"
    assert policy["spec"]["paramKind"] == {"apiVersion": "v1", "kind": "ConfigMap"}
    assert binding["spec"]["paramRef"] == {
        "namespace": "volcano-guard",
        "selector": {"matchLabels": {"volcano-guard.io/params": "node-states"}},
        "parameterNotFoundAction": "Allow",
    }


def test_a_policy_that_only_warns_or_the_key_turned_off_makes_no_mutating_policy(with_policy):
    warning = dataclasses.replace(toy(), mode=lambda config: "warn")
    with_policy(warning)
    assert rendering.mutating_policies(no_others()) == []
    with_policy(toy())
    off = msgspec.structs.replace(no_others(), mutatingAdmissionPolicies=False)
    assert rendering.admission_policies(off) == [
        o
        for o in rendering.admission_policies(no_others())
        if o["kind"] not in (MUTATING_POLICY, MUTATING_BINDING)
    ]


# -- per Kubernetes version -----------------------------------------------------------------------

V1, V1BETA1 = "admissionregistration.k8s.io/v1", BETA
WEBHOOKS = {"MutatingWebhookConfiguration": V1, "ValidatingWebhookConfiguration": V1}
VALIDATING = {"ValidatingAdmissionPolicy": V1, "ValidatingAdmissionPolicyBinding": V1}


@pytest.mark.parametrize(
    ("version", "beta", "expected"),
    [
        ("1.29", True, WEBHOOKS),
        ("1.30", True, {**WEBHOOKS, **VALIDATING}),
        ("1.33", True, {**WEBHOOKS, **VALIDATING}),
        ("1.34", False, {**WEBHOOKS, **VALIDATING}),
        (
            "1.34",
            True,
            {**WEBHOOKS, **VALIDATING, MUTATING_POLICY: V1BETA1, MUTATING_BINDING: V1BETA1},
        ),
        (
            "1.35",
            True,
            {**WEBHOOKS, **VALIDATING, MUTATING_POLICY: V1BETA1, MUTATING_BINDING: V1BETA1},
        ),
        ("1.36", False, {**WEBHOOKS, **VALIDATING, MUTATING_POLICY: V1, MUTATING_BINDING: V1}),
        ("1.37", True, {**WEBHOOKS, **VALIDATING, MUTATING_POLICY: V1, MUTATING_BINDING: V1}),
    ],
)
def test_manifests_prints_each_kind_from_the_version_that_serves_it(
    with_policy, tmp_path, capsys, version, beta, expected
):
    with_policy(toy())
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"mutatingAdmissionPolicyBeta": beta}))
    assert main(["manifests", "--config", str(config), "--kubernetes-version", version]) == 0
    printed = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]
    assert {d["kind"]: d["apiVersion"] for d in printed} == expected


def test_without_a_version_manifests_prints_what_every_cluster_from_1_30_serves(
    with_policy, capsys
):
    with_policy(toy())
    assert main(["manifests"]) == 0
    kinds = {d["kind"] for d in yaml.safe_load_all(capsys.readouterr().out) if d}
    assert "ValidatingAdmissionPolicy" in kinds and MUTATING_POLICY not in kinds


def test_apis_at_each_version():
    assert apis_at((1, 29)) == PolicyApis(None, None)
    assert apis_at((1, 30)) == apis_at((1, 33)) == PolicyApis("v1", None)
    assert apis_at((1, 34)) == apis_at((1, 35)) == PolicyApis("v1", "v1beta1")
    assert apis_at((1, 36)) == apis_at((2, 0)) == PolicyApis("v1", "v1")


@pytest.mark.parametrize(("minor", "served"), [(34, "v1beta1"), (35, "v1beta1"), (36, "v1")])
def test_every_object_validates_against_the_schema_of_the_version_that_serves_it(
    with_policy, minor, served
):
    with_policy(toy(params=("volcano-guard.io/params", "node-states")))
    config = msgspec.structs.replace(config_from_dict({}), mutatingAdmissionPolicyBeta=True)
    objects = admission_objects(config, served=apis_at((1, minor))).values()
    assert {o["apiVersion"] for o in objects if o["kind"].startswith("MutatingAdmission")} == {
        f"admissionregistration.k8s.io/{served}"
    }
    for obj in objects:
        kubernetes_validate.validate(obj, f"1.{minor}.0", strict=True)


@pytest.mark.parametrize(
    ("version", "served"),
    [
        (KubernetesVersion(34, frozenset({BETA})), "v1beta1"),
        (KubernetesVersion(36), "v1"),
    ],
    ids=["1.34 with the beta", "1.36"],
)
def test_kubectl_applies_them_to_the_sandbox_playing_the_version(with_policy, version, served):
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed (.ci/run installs it)")
    with_policy(toy(params=("volcano-guard.io/params", "node-states")))
    config = msgspec.structs.replace(config_from_dict({}), mutatingAdmissionPolicyBeta=True)
    objects = admission_objects(config, served=apis_at((1, version.minor))).values()
    mutating = [o for o in objects if o["kind"].startswith("MutatingAdmission")]
    with SandboxThread(kubernetes_version=version) as cluster:

        def kubectl(*args: str, stdin: str | None = None) -> str:
            run = subprocess.run(
                ["kubectl", "--server", cluster.url, *args],
                input=stdin,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert run.returncode == 0, run.stderr
            return run.stdout

        kubectl("apply", "--validate=strict", "-f", "-", stdin=yaml.safe_dump_all(mutating))
        got = yaml.safe_load(kubectl("get", "mutatingadmissionpolicies", "-o", "yaml"))
    # The guard's own policies and the toy, each written (the sandbox compiles them on write).
    stored = {item["metadata"]["name"]: item for item in got["items"]}
    policies = {o["metadata"]["name"]: o for o in mutating if o["kind"].endswith("Policy")}
    assert set(stored) == set(policies) and len(stored) > 1
    for name, item in stored.items():
        assert item["apiVersion"] == f"admissionregistration.k8s.io/{served}"
        assert item["spec"]["mutations"] == policies[name]["spec"]["mutations"]


# -- what the registrations still send ------------------------------------------------------------


def webhooks_for(config: Config, request: Any, served: PolicyApis) -> list[str]:
    objects = admission_objects(config, served=served).values()
    return [w["name"] for w in called(objects, request)]


TOY_POD = create_pod(pod("toy"))


def test_where_mutating_policies_are_installed_what_they_cover_reaches_no_webhook(with_policy):
    with_policy(toy())
    assert webhooks_for(no_others(), TOY_POD, apis_at((1, 36))) == []
    # Before 1.36 the webhook patches it, failing open: a policy in the API server refuses it
    # unpatched.
    assert webhooks_for(no_others(), TOY_POD, apis_at((1, 30))) == ["mutate-open.volcano-guard.io"]
    assert webhooks_for(no_others(), TOY_POD, apis_at((1, 29))) == [
        "mutate.volcano-guard.io",
        "validate.volcano-guard.io",
    ]


def test_a_mutation_without_a_deny_in_the_server_keeps_failing_closed_until_it_is_installed(
    with_policy,
):
    with_policy(toy(checks=False))
    assert webhooks_for(no_others(), TOY_POD, apis_at((1, 36))) == ["validate.volcano-guard.io"]
    assert webhooks_for(no_others(), TOY_POD, apis_at((1, 30)))[0] == "mutate.volcano-guard.io"


def test_what_the_server_decides_only_from_published_params_stays_on_the_webhook_failing_open(
    with_policy,
):
    """While no node states are published the API server skips such a policy
    (parameterNotFoundAction Allow), so the webhook still judges, failing open."""
    with_policy(toy(params=("volcano-guard.io/params", "node-states")))
    assert webhooks_for(no_others(), TOY_POD, apis_at((1, 36))) == ["mutate-open.volcano-guard.io"]


VOLCANO_POD_CREATES = {
    "a Volcano pod": create_pod(pod(scheduler="volcano")),
    "a Volcano pod without requests": create_pod(pod(scheduler="volcano", requests=False)),
    "a Volcano Job's pod": create_pod(pod(scheduler="volcano", annotations={GROUP_NAME: "mnist"})),
}


@pytest.mark.parametrize("what", list(VOLCANO_POD_CREATES))
def test_with_the_shipped_config_on_1_36_a_volcano_pod_create_calls_no_webhook(what):
    assert called(shipped((1, 36)), VOLCANO_POD_CREATES[what]) == []


@pytest.mark.parametrize("what", list(VOLCANO_POD_CREATES))
def test_with_the_shipped_config_on_1_30_a_volcano_pod_create_calls_no_validating_webhook(what):
    validating = [o for o in shipped((1, 30)) if o["kind"] == "ValidatingWebhookConfiguration"]
    assert called(validating, VOLCANO_POD_CREATES[what]) == []


def test_the_pods_podgroup_generation_alone_sends_a_volcano_jobs_pod_to_the_webhook():
    config = config_from_dict({"policies": {"podGroups": {"annotatePodGeneration": True}}})
    request = VOLCANO_POD_CREATES["a Volcano Job's pod"]
    assert webhooks_for(config, request, apis_at((1, 36))) == ["mutate-open.volcano-guard.io"]
