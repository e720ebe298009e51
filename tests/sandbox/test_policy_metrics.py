"""The sandbox API server's `/metrics` exports kube-apiserver's admission-policy and webhook
metrics as the version it plays does: the names, HELP, labels, buckets and stability of
k8s.io/apiserver's metrics.go (read below), and the observations its dispatchers make (a
denial, a warning, an ignored error counted; a clean admit not), scraped over HTTP with the
token the sandbox's other API paths need, parsed by prometheus_client and linted by promtool."""

from __future__ import annotations

import base64
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import NAMESPACE, SERVICE
from tests.promtool import check_metrics
from tests.sandbox.admission_chain import PODS, Box, ScriptedWebhook, pod
from tests.sandbox.test_sandbox_mutating_policies import binding as mutating_binding
from tests.sandbox.test_sandbox_mutating_policies import install as install_mutating
from tests.sandbox.test_sandbox_mutating_policies import policy as mutating_policy
from tests.sandbox.test_sandbox_policies import binding, install, policy
from tests.upstream import upstream_file
from volcano_guard_sandbox.apiserver import policy_metrics
from volcano_guard_sandbox.apiserver.authn import load_token_file
from volcano_guard_sandbox.apiserver.endpoints import ServiceEndpoints
from volcano_guard_sandbox.apiserver.policy_metrics import (
    MUTATING,
    VALIDATING,
    VALIDATING_1_30,
    WEBHOOK_REQUESTS,
    Family,
    PolicyMetrics,
)
from volcano_guard_sandbox.apiserver.runner import running
from volcano_guard_sandbox.apiserver.server import SandboxSettings
from volcano_guard_sandbox.apiserver.versions import KubernetesVersion

APISERVER = "kubernetes-apiserver"
VAP_METRICS = "pkg/admission/plugin/policy/validating/metrics/metrics.go"
MAP_METRICS = "pkg/admission/plugin/policy/mutating/metrics/metrics.go"
VAP = "apiserver_validating_admission_policy"
MUTATING_NAME = "add-team"  # the mutating tests' policy and binding
ERRORS = {"expression": "int(object.metadata.name) > 0", "message": "never"}  # a runtime error


def upstream_families(source: str, namespace: str, subsystem: str) -> dict[str, Family]:
    """Each metrics.NewCounterVec / NewHistogramVec of a component-base metrics.go."""
    families = {}
    for match in re.finditer(r"metrics\.New(Counter|Histogram)Vec\((.*?)\n\t\)", source, re.S):
        body = match[2]
        name = re.search(r'Name:\s+"([^"]+)"', body)
        help_text = re.search(r'Help:\s+"([^"]+)"', body)
        level = re.search(r"StabilityLevel:\s+metrics\.(\w+)", body)
        labels = re.search(r"\[\]string\{([^}]*)\}", body)
        buckets = re.search(r"Buckets:\s+\[\]float64\{([^}]*)\}", body)
        assert name and help_text and level and labels, body
        full = f"{namespace}_{subsystem}_{name[1]}"
        families[full] = Family(
            full,
            match[1].lower(),
            help_text[1],
            level[1],
            tuple(re.findall(r'"([^"]+)"', labels[1])),
            tuple(float(b) for b in buckets[1].split(",")) if buckets else (),
        )
    return families


def test_the_policy_metrics_are_upstreams_at_each_version():
    for revision, ours in (("v0.36.3", VALIDATING), ("v0.32.9", VALIDATING)):
        source = upstream_file(APISERVER, revision, VAP_METRICS)
        upstream = upstream_families(source, "apiserver", "validating_admission_policy")
        assert {f.name: f for f in ours} == upstream, revision
    source = upstream_file(APISERVER, "v0.30.14", VAP_METRICS)
    upstream = upstream_families(source, "apiserver", "validating_admission_policy")
    assert set(upstream) == {f.name for f in VALIDATING_1_30} | {f"{VAP}_definition_total"}
    assert "ObserveDefinition" not in upstream_file(
        APISERVER, "v0.30.14", "pkg/admission/plugin/policy/validating/dispatcher.go"
    ), "1.30 counts definitions: the sandbox should too"
    for family in VALIDATING_1_30:
        assert upstream[family.name] == family
    source = upstream_file(APISERVER, "v0.36.3", MAP_METRICS)
    upstream = upstream_families(source, "apiserver", "mutating_admission_policy")
    assert {f.name: f for f in MUTATING} == upstream


def test_the_webhook_request_counter_is_the_one_the_webhook_dispatchers_observe():
    """metrics.go of pkg/admission/metrics is not among the frozen sources: its labels are
    pinned by the calls the dispatchers make (name, type, operation, code, rejected)."""
    for kind, step in (("mutating", "admit"), ("validating", "validating")):
        dispatcher = upstream_file(
            APISERVER, "v0.36.3", f"pkg/admission/plugin/webhook/{kind}/dispatcher.go"
        )
        assert (
            f"ObserveWebhook(ctx, hook.Name, time.Since(t), rejected, versionedAttr.Attributes, "
            f'"{step}", 200)'
        ) in dispatcher
        assert 'apierrors.NewServiceUnavailable("error calling webhook")' in dispatcher
    assert WEBHOOK_REQUESTS.labels == ("name", "type", "operation", "code", "rejected")


@asynccontextmanager
async def box_at(
    minor: int, certs: Any, scripted: ScriptedWebhook, tmp_path: Any
) -> AsyncIterator[Box]:
    async with box_and_metrics_at(minor, certs, scripted, tmp_path) as (box, _):
        yield box


@asynccontextmanager
async def box_and_metrics_at(
    minor: int, certs: Any, scripted: ScriptedWebhook, tmp_path: Any
) -> AsyncIterator[tuple[Box, PolicyMetrics]]:
    """A sandbox playing 1.<minor> (webhook calls to scripted) and its PolicyMetrics."""
    tokens = tmp_path / "tokens.csv"
    tokens.write_text('admin,kubernetes-admin,0,"system:masters"\n')
    settings = SandboxSettings(
        services=ServiceEndpoints({(NAMESPACE, SERVICE, 443): [("127.0.0.1", scripted.port)]}),
        tokens=load_token_file(tokens),
        kubernetes_version=KubernetesVersion(minor),
    )
    async with (
        running(settings=settings) as sandbox,
        aiohttp.ClientSession(headers={"Authorization": "Bearer admin"}) as session,
    ):
        sandbox.seed([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}])
        ca_bundle = base64.b64encode(certs.ca_file.read_bytes()).decode()
        yield Box(sandbox.url, session, ca_bundle), sandbox.app[policy_metrics.METRICS_KEY]


async def scrape(box: Box, token: str | None = "admin") -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {"Authorization": ""}
    async with box.session.get(f"{box.url}/metrics", headers=headers) as response:
        return response.status, await response.text()


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def exercise(box: Box) -> None:
    """A Deny binding, a Warn binding and an Ignore policy whose expression errors, on two
    pods: one every policy passes but the erroring one, one without a team label."""
    await install(
        box,
        policy("volcano-guard-team"),
        binding("volcano-guard-team", "volcano-guard-team", ("Deny", "Audit")),
        policy("warn-team"),
        binding("warn-team", "warn-team", ("Warn",)),
        policy("ignored", failurePolicy="Ignore", validations=[ERRORS]),
        binding("ignored", "ignored"),
    )
    assert (await box.call("POST", PODS, pod("p1", team="a")))[0] == 201
    assert (await box.call("POST", PODS, pod("p2")))[0] == 422


async def test_1_36_counts_denials_warnings_and_ignored_errors_by_error_type(
    certs, scripted, tmp_path
):
    async with box_at(36, certs, scripted, tmp_path) as box:
        await exercise(box)
        status, text = await scrape(box)
    assert status == 200
    counts = {
        tuple(dict(labels)[k] for k in ("policy", "error_type", "enforcement_action")): value
        for (name, labels), value in samples(text).items()
        if name == f"{VAP}_check_total"
    }
    assert counts == {
        ("volcano-guard-team", "no_error", "deny"): 1,  # p2 only: a clean admit is not counted
        ("volcano-guard-team", "no_error", "audit"): 1,
        ("warn-team", "no_error", "warn"): 1,
        ("ignored", "invalid_error", "allow"): 2,
    }
    latency = samples(text)
    deny = frozenset(
        {
            ("policy", "volcano-guard-team"),
            ("policy_binding", "volcano-guard-team"),
            ("error_type", "no_error"),
            ("enforcement_action", "deny"),
        }
    )
    assert latency[(f"{VAP}_check_duration_seconds_count", deny)] == 1
    assert latency[(f"{VAP}_check_duration_seconds_bucket", deny | {("le", "+Inf")})] == 1
    assert {le for (name, labels), _ in latency.items() for key, le in labels if key == "le"} == {
        "5e-07",
        "0.001",
        "0.01",
        "0.1",
        "1",
        "+Inf",
    }
    lint = check_metrics(text)
    assert lint.returncode == 0, lint.stdout + lint.stderr


async def test_1_30_labels_the_check_by_state_without_an_error_type(certs, scripted, tmp_path):
    async with box_at(30, certs, scripted, tmp_path) as box:
        await exercise(box)
        _, text = await scrape(box)
    labels = {labels for name, labels in samples(text) if name == f"{VAP}_check_total"}
    assert {key for pairs in labels for key, _ in pairs} == {
        "policy",
        "policy_binding",
        "enforcement_action",
        "state",
    }
    assert "# HELP apiserver_validating_admission_policy_check_total [ALPHA] " in text


async def test_metrics_need_a_token_as_the_api_paths_do(certs, scripted, tmp_path):
    async with box_at(36, certs, scripted, tmp_path) as box:
        assert (await scrape(box, token=None))[0] == 401
        assert (await scrape(box, token="nobody"))[0] == 401
        assert await scrape(box) == (200, "")  # nothing observed yet: no series, as Go writes


async def test_webhook_calls_are_counted_by_name_type_code_and_rejection(certs, scripted, tmp_path):
    scripted.answer = lambda request: (
        {"allowed": True}
        if request["object"]["metadata"]["labels"]
        else {"allowed": False, "status": {"code": 403, "message": "no"}}
    )
    async with box_at(36, certs, scripted, tmp_path) as box:
        await box.register("validating", "guard", box.hook("validate.guard.example"))
        await box.register("mutating", "guard-m", box.hook("mutate.guard.example", "/mutate"))
        assert (await box.call("POST", PODS, pod("p1", team="a")))[0] == 201
        assert (await box.call("POST", PODS, pod("p2")))[0] == 403
        _, text = await scrape(box)
    counts = {
        tuple(dict(labels)[k] for k in WEBHOOK_REQUESTS.labels): value
        for (name, labels), value in samples(text).items()
        if name == WEBHOOK_REQUESTS.name
    }
    assert counts == {
        ("mutate.guard.example", "admit", "CREATE", "200", "false"): 1,
        ("mutate.guard.example", "admit", "CREATE", "403", "true"): 1,
        ("validate.guard.example", "validating", "CREATE", "200", "false"): 1,
    }


def test_a_mutation_is_recorded_by_policy_binding_and_error_type():
    metrics = PolicyMetrics(KubernetesVersion(36))
    with policy_metrics.current(metrics):
        policy_metrics.record_mutation("volcano-guard-default-requests", "b", None, 0.0002)
        policy_metrics.record_mutation(
            "volcano-guard-default-requests",
            "b",
            "validation failed due to running out of cost budget, no further ...",
            0.5,
        )
    policy_metrics.record_mutation("outside", "b", None, 0.1)  # no current metrics: ignored
    found = samples(metrics.exposition())
    name = "apiserver_mutating_admission_policy_check_total"
    assert {
        dict(labels)["error_type"]: value for (n, labels), value in found.items() if n == name
    } == {"no_error": 1, "out_of_budget": 1}
    assert "outside" not in metrics.exposition()


async def test_the_mutating_plugin_records_each_mutation_it_applies(certs, scripted, tmp_path):
    async with box_at(36, certs, scripted, tmp_path) as box:
        await install_mutating(box, mutating_policy(), mutating_binding())
        for name in ("p1", "p2"):
            assert (await box.call("POST", PODS, pod(name)))[0] == 201
        _, text = await scrape(box)
    counts = {
        tuple(dict(labels)[k] for k in ("policy", "policy_binding", "error_type")): value
        for (name, labels), value in samples(text).items()
        if name == "apiserver_mutating_admission_policy_check_total"
    }
    assert counts == {(MUTATING_NAME, MUTATING_NAME, "no_error"): 2}
