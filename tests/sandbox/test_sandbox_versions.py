"""The sandbox plays one Kubernetes version, 1.30 to 1.36: its /version, the group versions and
kinds its discovery lists and serves (held to k8s.io/api's own packages of that release), and the
CEL environment versions its admission expressions compile and run in."""

from __future__ import annotations

import json
import re
import subprocess

import aiohttp
import pytest

from tests.processes import run_here
from tests.sandbox_fixtures import KUBECTL
from tests.upstream import upstream_file
from volcano_guard_sandbox.apiserver import cel_check, matching, policy_validation, versions
from volcano_guard_sandbox.apiserver.resources import ADMISSION, COORDINATION, CORE
from volcano_guard_sandbox.apiserver.runner import SandboxThread, running
from volcano_guard_sandbox.apiserver.versions import DEFAULT, KubernetesVersion
from volcano_guard_sandbox.commands import sandbox_parser

# k8s.io/api's tag of each release whose source is kept; the others are read from the newest
# (a kind k8s.io/api marks `introduced=1.N` is served from 1.N on).
API_TAGS = {30: "v0.30.14", 32: "v0.32.9", 36: "v0.36.3"}
NEWEST_TAG = API_TAGS[36]
ADMISSION_V1 = f"/apis/{ADMISSION}/v1"


def upstream_kinds(tag: str, package: str, minor: int) -> set[str]:
    """The API kinds (+genclient types) of a k8s.io/api package at tag that release 1.<minor>
    serves when their group version is on: introduced by then (or untagged) and, for an alpha
    or beta package, not yet removed (prerelease-lifecycle-gen: the `removed` tag, else
    `deprecated` plus three minors, else `introduced` plus six)."""
    kinds = set()
    block: list[str] = []
    for line in upstream_file("kubernetes-api", tag, f"{package}/types.go").splitlines():
        if line.startswith("//") or not line.strip():
            block.append(line)
            continue
        declared = re.match(r"type (\w+) struct", line)
        if declared and any(comment.strip() == "// +genclient" for comment in block):
            tags = dict(re.findall(r"prerelease-lifecycle-gen:(\w+)=1\.(\d+)", "\n".join(block)))
            since = int(tags.get("introduced", 0))
            removed = int(tags.get("removed", 0)) or (
                int(tags["deprecated"]) + 3 if "deprecated" in tags else since + 6
            )
            prerelease = re.search(r"v\d+(alpha|beta)\d+$", package) is not None
            if since <= minor and not (prerelease and removed <= minor):
                kinds.add(declared[1])
        block = []
    return kinds


async def get(sandbox, path: str) -> tuple[int, dict]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{sandbox.url}{path}") as answer,
    ):
        return answer.status, await answer.json(content_type=None)


def test_a_version_is_1_30_to_1_36_and_anything_else_is_refused_in_one_line():
    assert KubernetesVersion.parse("1.30") == KubernetesVersion(30)
    assert KubernetesVersion.parse("v1.36").git_version == "v1.36.0"
    for text, words in (
        ("1.29", "plays Kubernetes 1.30 to 1.36, not 1.29"),
        ("1.37", "not 1.37"),
        ("2.30", "'2.30' is not a Kubernetes version"),
        ("1.3x", "'1.3x' is not a Kubernetes version"),
        ("", "'' is not a Kubernetes version"),
    ):
        with pytest.raises(ValueError, match=re.escape(words)) as raised:
            KubernetesVersion.parse(text)
        assert "\n" not in str(raised.value)


def test_the_flag_defaults_to_the_version_the_sandbox_plays_by_default():
    assert sandbox_parser().parse_args([]).kubernetes_version == DEFAULT
    assert sandbox_parser().parse_args(["--kubernetes-version", "1.36"]).kubernetes_version == (
        KubernetesVersion(36)
    )


def test_the_sandbox_refuses_a_version_it_does_not_play_with_exit_2():
    done = run_here("sandbox", "--kubernetes-version", "1.29")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "volcano-guard sandbox: argument --kubernetes-version: the sandbox plays Kubernetes "
        "1.30 to 1.36, not 1.29 (see volcano-guard sandbox --help)"
    ]


@pytest.mark.parametrize("minor", range(30, 37))
async def test_admission_kinds_served_are_those_of_the_release(minor):
    tag = API_TAGS.get(minor, NEWEST_TAG)
    async with running(kubernetes_version=KubernetesVersion(minor)) as sandbox:
        status, version = await get(sandbox, "/version")
        assert (status, version["major"], version["minor"]) == (200, "1", str(minor))
        _, groups = await get(sandbox, "/apis")
        [admission] = [g for g in groups["groups"] if g["name"] == ADMISSION]
        # v1beta1 and v1alpha1 are served only when --runtime-config asks: never by default.
        assert [v["version"] for v in admission["versions"]] == ["v1"]
        _, listed = await get(sandbox, ADMISSION_V1)
        kinds = {r["kind"] for r in listed["resources"]}
        assert kinds == upstream_kinds(tag, "admissionregistration/v1", minor)
        for off in ("v1beta1", "v1alpha1"):
            status, answer = await get(sandbox, f"/apis/{ADMISSION}/{off}")
            assert (status, answer["reason"]) == (404, "NotFound")


@pytest.mark.parametrize("minor", sorted(API_TAGS))
async def test_every_core_and_coordination_kind_served_is_one_the_release_has(minor):
    tag = API_TAGS[minor]
    played = KubernetesVersion(minor)
    served = {(r.group, r.kind) for r in played.resources if r.group in (CORE, COORDINATION)}
    assert {kind for group, kind in served if group == CORE} <= upstream_kinds(
        tag, "core/v1", minor
    ) | {"Binding"}  # core/v1 Binding is a verb of pods, not a +genclient type
    assert {kind for group, kind in served if group == COORDINATION} <= upstream_kinds(
        tag, "coordination/v1", minor
    )


@pytest.mark.parametrize(("minor", "status"), [(30, 404), (35, 404), (36, 200)])
async def test_a_kind_the_version_does_not_serve_answers_404_as_the_api_server(minor, status):
    async with running(kubernetes_version=KubernetesVersion(minor)) as sandbox:
        answer_status, answer = await get(sandbox, f"{ADMISSION_V1}/mutatingadmissionpolicies")
        assert answer_status == status
        if status == 404:
            assert answer["message"] == "the server could not find the requested resource"
        else:
            assert answer["kind"] == "MutatingAdmissionPolicyList"
        _, index = await get(sandbox, "/openapi/v3")
        _, document = await get(
            sandbox, index["paths"][f"apis/{ADMISSION}/v1"]["serverRelativeURL"]
        )
        policies = [path for path in document["paths"] if "mutatingadmissionpolicies" in path]
        assert bool(policies) == (status == 200)


def kubectl(url: str, cache: str, *args: str) -> str:
    if KUBECTL is None:
        pytest.skip("kubectl is not installed (.ci/run installs it; install it to run these)")
    done = subprocess.run(
        [KUBECTL, "--server", url, "--cache-dir", cache, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout


@pytest.mark.parametrize(("minor", "mutating_policies"), [(30, False), (36, True)])
def test_kubectl_reads_the_versions_discovery(tmp_path, minor, mutating_policies):
    with SandboxThread(kubernetes_version=KubernetesVersion(minor)) as sandbox:
        cache = str(tmp_path / "cache")
        assert f"Server Version: v1.{minor}.0" in kubectl(sandbox.url, cache, "version")
        api_versions = kubectl(sandbox.url, cache, "api-versions").split()
        assert f"{ADMISSION}/v1" in api_versions
        assert not {f"{ADMISSION}/v1beta1", f"{ADMISSION}/v1alpha1"} & set(api_versions)
        names = kubectl(sandbox.url, cache, "api-resources", "--api-group", ADMISSION, "-o", "name")
        assert "validatingadmissionpolicies.admissionregistration.k8s.io" in names.split()
        assert ("mutatingadmissionpolicies.admissionregistration.k8s.io" in names.split()) == (
            mutating_policies
        )


CREATE_CONFIGMAPS = dict(
    apiGroups=[""], apiVersions=["v1"], operations=["CREATE"], resources=["configmaps"]
)
POLICY = {
    "apiVersion": f"{ADMISSION}/v1",
    "kind": "ValidatingAdmissionPolicy",
    "metadata": {"name": "small"},
    "spec": {
        "matchConstraints": {"resourceRules": [CREATE_CONFIGMAPS]},
        "validations": [{"expression": "size(object.data) < 3"}],
    },
}
BINDING = {
    "apiVersion": f"{ADMISSION}/v1",
    "kind": "ValidatingAdmissionPolicyBinding",
    "metadata": {"name": "small"},
    "spec": {"policyName": "small", "validationActions": ["Deny"]},
}


@pytest.fixture
def cel_versions(monkeypatch):
    """The CEL environment version of every environment the sandbox makes, in order."""
    made: list[tuple[int, int]] = []
    make = versions.cel_environment

    def spy(variables, cel_version, **pool):
        made.append(cel_version)
        return make(variables, cel_version, **pool)

    caches = (
        cel_check._environment,
        cel_check.check,
        policy_validation._environment,
        policy_validation.program,
        matching._environment,
    )
    for cache in caches:
        cache.cache_clear()
    monkeypatch.setattr(versions, "cel_environment", spy)
    yield made
    for cache in caches:
        cache.cache_clear()


async def test_a_policy_compiles_in_the_previous_versions_cel_and_runs_in_its_own(cel_versions):
    async with (
        running(kubernetes_version=KubernetesVersion(36)) as sandbox,
        aiohttp.ClientSession() as session,
    ):
        for path, body in (
            (f"{ADMISSION_V1}/validatingadmissionpolicies", POLICY),
            (f"{ADMISSION_V1}/validatingadmissionpolicybindings", BINDING),
        ):
            async with session.post(f"{sandbox.url}{path}", json=body) as answer:
                assert answer.status == 201, await answer.text()
        assert set(cel_versions) == {(1, 35)}  # written: kube-apiserver's compatibility version
        written = len(cel_versions)
        configmap = {"metadata": {"name": "big"}, "data": {"a": "", "b": "", "c": ""}}
        url = f"{sandbox.url}/api/v1/namespaces/default/configmaps"
        sandbox.seed([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}])
        async with session.post(url, json=configmap) as answer:
            assert answer.status == 422
            assert (
                "failed expression: size(object.data) < 3"
                in json.loads(await answer.text())["message"]
            )
        assert cel_versions[written:] == [(1, 36)]  # stored: the version's own environment


async def test_match_conditions_compile_in_the_previous_versions_cel_and_run_in_its_own(
    cel_versions,
):
    hook = {
        "name": "never.example.com",
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "clientConfig": {"url": "https://127.0.0.1:1/never"},
        "rules": [CREATE_CONFIGMAPS],
        "matchConditions": [{"name": "never", "expression": "object.metadata.name == 'x'"}],
    }
    configuration = {
        "apiVersion": f"{ADMISSION}/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "never"},
        "webhooks": [hook],
    }
    async with (
        running(kubernetes_version=KubernetesVersion(31)) as sandbox,
        aiohttp.ClientSession() as session,
    ):
        path = f"{sandbox.url}{ADMISSION_V1}/validatingwebhookconfigurations"
        async with session.post(path, json=configuration) as answer:
            assert answer.status == 201, await answer.text()
        assert set(cel_versions) == {(1, 30)}
        written = len(cel_versions)
        sandbox.seed([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}])
        url = f"{sandbox.url}/api/v1/namespaces/default/configmaps"
        async with session.post(url, json={"metadata": {"name": "y"}}) as answer:
            assert answer.status == 201  # the condition is false: the webhook is not called
        assert cel_versions[written:] == [(1, 31)]


@pytest.mark.parametrize("minor", range(30, 37))
@pytest.mark.parametrize("prerelease", ["v1alpha1", "v1beta1"])
async def test_runtime_config_serves_an_alpha_or_beta_version_as_the_release_would(
    minor, prerelease
):
    tag = API_TAGS.get(minor, NEWEST_TAG)
    expected = upstream_kinds(tag, f"admissionregistration/{prerelease}", minor)
    also_at_v1 = expected & upstream_kinds(tag, "admissionregistration/v1", minor)
    turned_on = frozenset({f"{ADMISSION}/{prerelease}"})
    if not expected or also_at_v1:
        words = "is not a group version" if not expected else "would be served at v1 and"
        with pytest.raises(ValueError, match=words):
            KubernetesVersion(minor, turned_on)
        return
    async with running(kubernetes_version=KubernetesVersion(minor, turned_on)) as sandbox:
        _, groups = await get(sandbox, "/apis")
        [admission] = [g for g in groups["groups"] if g["name"] == ADMISSION]
        assert [v["version"] for v in admission["versions"]] == ["v1", prerelease]
        assert admission["preferredVersion"]["version"] == "v1"
        _, listed = await get(sandbox, f"/apis/{ADMISSION}/{prerelease}")
        assert {r["kind"] for r in listed["resources"]} == expected
        status, _ = await get(sandbox, f"/apis/{ADMISSION}/{prerelease}/mutatingadmissionpolicies")
        assert status == 200


def test_runtime_config_takes_kube_apiservers_syntax_for_alpha_and_beta_versions_only():
    parse = versions.parse_runtime_config
    assert parse(f"{ADMISSION}/v1beta1=true, {ADMISSION}/v1alpha1=false") == {
        f"{ADMISSION}/v1beta1"
    }
    assert parse(f"{ADMISSION}/v1alpha1") == {f"{ADMISSION}/v1alpha1"}
    for text in ("api/all=true", f"{ADMISSION}/v1=true", f"{ADMISSION}/v1beta1=yes"):
        with pytest.raises(ValueError, match=re.escape(f"{text!r} is not GROUP/VERSION=true")):
            parse(text)


def test_the_sandbox_refuses_a_runtime_config_its_version_does_not_offer_with_exit_2():
    done = run_here(
        "sandbox", "--kubernetes-version", "1.36", "--runtime-config", f"{ADMISSION}/v1beta1=true"
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "volcano-guard sandbox: --runtime-config: MutatingAdmissionPolicy would be served at v1 "
        "and v1beta1; the sandbox serves each kind at one version"
    ]
