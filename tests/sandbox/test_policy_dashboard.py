"""The dashboard's panels on the guard's in-server policies read kube-apiserver's own metrics:
every metric and label a query names is one k8s.io/apiserver's metrics.go declares (read below),
and every query, run by promtool over what the sandbox API server exported after real denials,
ignored errors, mutations and webhook calls, returns the guard's series: a misspelt name,
label or value returns nothing and fails here."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import REPO
from tests.promtool import run_rule_tests
from tests.sandbox.admission_chain import PODS, pod
from tests.sandbox.test_policy_metrics import (
    APISERVER,
    ERRORS,
    MAP_METRICS,
    VAP_METRICS,
    box_and_metrics_at,
    samples,
    scrape,
    upstream_families,
)
from tests.sandbox.test_sandbox_policies import binding, install, policy
from tests.upstream import upstream_file
from volcano_guard.webhook.admission_policies import PREFIX
from volcano_guard_sandbox.apiserver import policy_metrics
from volcano_guard_sandbox.apiserver.policy_metrics import WEBHOOK_REQUESTS

DASHBOARD = REPO / "deploy" / "monitoring" / "grafana-dashboard.json"
SELECTOR = re.compile(r"\b(apiserver_[a-z_]+)(\{[^}]*\})?")
HISTOGRAM_SERIES = re.compile(r"_(bucket|sum|count)$")


def apiserver_queries() -> dict[str, str]:
    """refId-qualified panel title -> query, for every query on an apiserver_ metric."""
    dashboard = json.loads(DASHBOARD.read_text())
    return {
        f"{panel['title']} [{target['refId']}]": target["expr"]
        for panel in dashboard["panels"]
        for target in panel["targets"]
        if "apiserver_" in target["expr"]
    }


def used(query: str) -> tuple[set[str], set[str]]:
    """The metric families a query selects and every label it matches or groups by."""
    names, labels = set(), set()
    for name, matchers in SELECTOR.findall(query):
        names.add(HISTOGRAM_SERIES.sub("", name) if name.endswith("_bucket") else name)
        labels.update(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", matchers))
    for grouping in re.findall(r"\bby \(([^)]*)\)", query):
        labels.update(label.strip() for label in grouping.split(","))
    return names, labels


def test_the_policy_panels_cover_checks_denials_errors_latency_validating_and_mutating():
    queries = apiserver_queries()
    for wanted in ("checks", "denials", "errors", "latency", "mutations", "webhook calls"):
        assert any(wanted in title.lower() for title in queries), wanted
    texts = " ".join(queries.values())
    for family in ("validating", "mutating"):
        assert f"apiserver_{family}_admission_policy_check_total" in texts
        assert f"apiserver_{family}_admission_policy_check_duration_seconds_bucket" in texts
    policy_queries = [q for q in queries.values() if "admission_policy" in q]
    assert all(f'policy=~"{PREFIX}.*"' in q for q in policy_queries)


def test_every_queried_metric_and_label_is_one_kube_apiserver_declares():
    declared = {
        **upstream_families(
            upstream_file(APISERVER, "v0.36.3", VAP_METRICS),
            "apiserver",
            "validating_admission_policy",
        ),
        **upstream_families(
            upstream_file(APISERVER, "v0.36.3", MAP_METRICS),
            "apiserver",
            "mutating_admission_policy",
        ),
        WEBHOOK_REQUESTS.name: WEBHOOK_REQUESTS,  # pinned by test_policy_metrics
    }
    at_1_30 = upstream_families(
        upstream_file(APISERVER, "v0.30.14", VAP_METRICS),
        "apiserver",
        "validating_admission_policy",
    )
    for title, query in apiserver_queries().items():
        names, labels = used(query)
        assert names <= set(declared), (title, names - set(declared))
        allowed = {"le"} | {label for name in names for label in declared[name].labels}
        assert labels <= allowed, (title, labels - allowed)
        if "error_type" not in labels and names <= set(at_1_30):  # the same query on 1.30
            allowed = {"le"} | {label for name in names for label in at_1_30[name].labels}
            assert labels <= allowed, (title, "1.30", labels - allowed)


async def exercise(box: Any, app_metrics: policy_metrics.PolicyMetrics) -> None:
    """Denials, an ignored error, a policy not the guard's, a webhook call and mutations."""
    await install(
        box,
        policy(f"{PREFIX}resource-requests"),
        binding(f"{PREFIX}resource-requests", f"{PREFIX}resource-requests"),
        policy(f"{PREFIX}erroring", failurePolicy="Ignore", validations=[ERRORS]),
        binding(f"{PREFIX}erroring", f"{PREFIX}erroring"),
        policy("pod-validation-policy"),  # Volcano's own: not on the guard's panels
        binding("pod-validation-policy", "pod-validation-policy"),
    )
    await box.register("validating", "volcano-guard", box.hook("validate.volcano-guard.io"))
    await box.call("POST", PODS, pod("p1", team="a"))
    await box.call("POST", PODS, pod("p2"))
    # The MutatingAdmissionPolicy plugin records through the same function (record_mutation).
    with policy_metrics.current(app_metrics):
        policy_metrics.record_mutation(f"{PREFIX}default-requests", "b", None, 0.0003)
        policy_metrics.record_mutation(f"{PREFIX}default-requests", "b", "no such key", 0.002)


def promtool_series(text: str) -> list[dict[str, str]]:
    """Each scraped sample as a series growing by its value a minute for 10 minutes."""
    series = []
    for (name, labels), value in samples(text).items():
        matchers = ",".join(f'{key}="{val}"' for key, val in sorted(labels))
        series.append({"series": f"{name}{{{matchers}}}", "values": f"0+{value:g}x10"})
    return series


async def test_each_panel_query_returns_the_guards_series_from_a_real_scrape(
    certs, scripted, tmp_path: Path
):
    async with box_and_metrics_at(36, certs, scripted, tmp_path) as (box, sandbox_metrics):
        await exercise(box, sandbox_metrics)
        _, text = await scrape(box)
    queries = apiserver_queries()
    tests = [
        {
            "expr": f"count({query}) > bool 0 or vector(0)",
            "eval_time": "10m",
            "exp_samples": [{"labels": "{}", "value": 1}],
        }
        for query in queries.values()
    ]
    [denials] = [q for title, q in queries.items() if title.startswith("In-server policies: den")]
    tests.append(  # only the guard's policy, not Volcano's
        {
            "expr": f"count by (policy) ({denials})",
            "eval_time": "10m",
            "exp_samples": [{"labels": f'{{policy="{PREFIX}resource-requests"}}', "value": 1}],
        }
    )
    unit = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {"interval": "1m", "input_series": promtool_series(text), "promql_expr_test": tests}
        ],
    }
    test_file = tmp_path / "panels_test.yaml"
    test_file.write_text(yaml.safe_dump(unit))
    result = run_rule_tests(test_file)
    assert result.returncode == 0, result.stdout + result.stderr
