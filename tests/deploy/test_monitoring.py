"""deploy/monitoring proven with Prometheus's own promtool: every alert fires on the series the
webhook and the sidecar really export and stays quiet when they are healthy; the rules and the
dashboard's queries parse; the names they use are in the real exposition; the PodMonitor finds
the port and label the injection writes."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO
from tests.promtool import check_rules, run_rule_tests
from volcano_guard.base.metrics import metrics_app
from volcano_guard.webhook.policies.sidecar_injection import (
    CONTAINER_NAME,
    INJECT_LABEL,
    SidecarInjectionConfig,
    sidecar_container,
)

MONITORING = REPO / "deploy" / "monitoring"
MIB = 1024 * 1024
WEBHOOK = 'job="volcano-guard", namespace="volcano-guard", service="volcano-guard"'
SIDECAR = (
    'job="volcano-guard/volcano-guard-sidecars", namespace="volcano-system", '
    f'pod="volcano-controllers-7c9f", container="{CONTAINER_NAME}"'
)
# The webhook's admission histogram buckets, as its exposition writes `le`.
BUCKETS = (
    "0.0005",
    "0.001",
    "0.0025",
    "0.005",
    "0.01",
    "0.025",
    "0.05",
    "0.1",
    "0.25",
    "0.5",
    "1.0",
    "+Inf",
)


def rule_groups() -> dict[str, Any]:
    rule = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    return {"groups": rule["spec"]["groups"]}


def alerts() -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for g in rule_groups()["groups"] for r in g["rules"] if "alert" in r}


def histogram(labels: str, slow_from: str) -> list[dict[str, str]]:
    """Buckets of requests at 10 a minute, every one slower than bucket `slow_from`."""
    slow = BUCKETS.index(slow_from)
    return [
        {
            "series": f'volcano_guard_admission_duration_seconds_bucket{{{labels}, le="{le}"}}',
            "values": "0+10x40" if i > slow else "0x40",
        }
        for i, le in enumerate(BUCKETS)
    ]


AUDIT_POD = 'job="volcano-guard/volcano-guard-audit", pod="audit-7f9c"'
# The PodMonitor honours the audit's own labels: `namespace` is the finding's where it has one,
# the pod's where it has none.
AUDIT = f'{AUDIT_POD}, namespace="volcano-guard"'
RECONCILER = (
    'job="volcano-guard/volcano-guard-reconciler", pod="reconciler-5d8b", namespace="volcano-guard"'
)
LAST_PASS = f"volcano_guard_reconciler_last_success_timestamp_seconds{{{RECONCILER}}}"
DRIFTED = f'{RECONCILER}, kind="ValidatingAdmissionPolicyBinding", name="volcano-guard-node-name"'


# alert -> (series when it must fire, series when healthy, minutes to evaluate at)
CASES: dict[str, tuple[list[dict[str, str]], list[dict[str, str]], int]] = {
    "VolcanoGuardWebhookDown": (
        [
            {"series": f'up{{{WEBHOOK}, pod="a"}}', "values": "0x10"},
            {"series": f'up{{{WEBHOOK}, pod="b"}}', "values": "0x10"},
        ],
        [
            {"series": f'up{{{WEBHOOK}, pod="a"}}', "values": "0x10"},
            {"series": f'up{{{WEBHOOK}, pod="b"}}', "values": "1x10"},
        ],
        5,
    ),
    "VolcanoGuardWebhookNotReady": (
        [
            {
                "series": 'kube_deployment_status_replicas_available{namespace="volcano-guard", '
                'deployment="volcano-guard"}',
                "values": "0x10",
            }
        ],
        [
            {
                "series": 'kube_deployment_status_replicas_available{namespace="volcano-guard", '
                'deployment="volcano-guard"}',
                "values": "1x10",
            }
        ],
        5,
    ),
    "VolcanoGuardAdmissionErrors": (
        [
            {
                "series": f'volcano_guard_admission_errors_total{{{WEBHOOK}, reason="bad_json"}}',
                "values": "0+60x40",
            }
        ],
        [
            {
                "series": f'volcano_guard_admission_errors_total{{{WEBHOOK}, reason="bad_json"}}',
                "values": "3x40",
            }
        ],
        20,
    ),
    "VolcanoGuardSlowAdmission": (histogram(WEBHOOK, "0.1"), histogram(WEBHOOK, "0.001"), 20),
    "VolcanoGuardCertExpiresSoon": (
        [
            {
                "series": f"volcano_guard_cert_expiry_timestamp_seconds{{{WEBHOOK}}}",
                "values": f"{7 * 86400}x200",
            }
        ],
        [
            {
                "series": f"volcano_guard_cert_expiry_timestamp_seconds{{{WEBHOOK}}}",
                "values": f"{60 * 86400}x200",
            }
        ],
        120,
    ),
    "VolcanoGuardSidecarBacklog": (
        [{"series": f"volcano_guard_sidecar_pending_objects{{{SIDECAR}}}", "values": "2000x30"}],
        [{"series": f"volcano_guard_sidecar_pending_objects{{{SIDECAR}}}", "values": "12x30"}],
        20,
    ),
    "VolcanoGuardSidecarConflicts": (
        [{"series": f"volcano_guard_sidecar_conflicts_total{{{SIDECAR}}}", "values": "0+1x60"}],
        [{"series": f"volcano_guard_sidecar_conflicts_total{{{SIDECAR}}}", "values": "0x60"}],
        40,
    ),
    "VolcanoGuardSidecarMemoryHigh": (
        [{"series": f"process_resident_memory_bytes{{{SIDECAR}}}", "values": f"{300 * MIB}x30"}],
        [{"series": f"process_resident_memory_bytes{{{SIDECAR}}}", "values": f"{60 * MIB}x30"}],
        20,
    ),
    # The audit's series as its collector writes them (audit/metrics.py).
    "VolcanoGuardOvercommittedNode": (
        [
            {
                "series": f'volcano_guard_overcommitted_nodes{{{AUDIT}, resource="cpu"}}',
                "values": "1x20",
            }
        ],
        [
            {
                "series": f'volcano_guard_overcommitted_nodes{{{AUDIT}, resource="cpu"}}',
                "values": "0x20",
            }
        ],
        10,
    ),
    "VolcanoGuardOrphanedPods": (
        [
            {
                "series": f'volcano_guard_orphaned_pods{{{AUDIT_POD}, namespace="team-a"}}',
                "values": "3x30",
            }
        ],
        [
            {
                "series": f'volcano_guard_audit_violations{{{AUDIT_POD}, policy="orphanedPods", '
                'namespace="team-a"}',
                "values": "0x30",
            }
        ],
        20,
    ),
    "VolcanoGuardSchedulerWillPanic": (
        [
            {
                "series": f'volcano_guard_audit_violations{{{AUDIT_POD}, policy="schedulerPanics", '
                'namespace="volcano-system"}',
                "values": "1x10",
            }
        ],
        [
            {
                "series": f'volcano_guard_audit_warnings{{{AUDIT_POD}, policy="schedulerPanics", '
                'namespace="volcano-system"}',
                "values": "1x10",
            }
        ],
        5,
    ),
    "VolcanoGuardControlPlaneRestarts": (
        [
            {
                "series": f"volcano_guard_audit_violations{{{AUDIT_POD}, "
                'policy="controlPlaneRestarts", namespace="volcano-system"}',
                "values": "1x10",
            }
        ],
        [
            {
                "series": f'volcano_guard_audit_violations{{{AUDIT_POD}, policy="orphanedPods", '
                'namespace="volcano-system"}',
                "values": "1x10",
            }
        ],
        5,
    ),
    "VolcanoGuardPodsOnMissingNodes": (
        [
            {
                "series": f"volcano_guard_audit_violations{{{AUDIT_POD}, "
                'policy="podsOnMissingNodes", namespace="team-a"}',
                "values": "2x20",
            }
        ],
        [
            {
                "series": f"volcano_guard_audit_violations{{{AUDIT_POD}, "
                'policy="podsOnMissingNodes", namespace="team-a"}',
                "values": "0x20",
            }
        ],
        10,
    ),
    "VolcanoGuardNodeChurn": (
        [
            {"series": f"volcano_guard_audit_churning_nodes{{{AUDIT}}}", "values": "3x30"},
            {
                "series": f"volcano_guard_audit_scheduler_device_sharing{{{AUDIT}}}",
                "values": "1x30",
            },
        ],
        [
            {"series": f"volcano_guard_audit_churning_nodes{{{AUDIT}}}", "values": "3x30"},
            {
                "series": f"volcano_guard_audit_scheduler_device_sharing{{{AUDIT}}}",
                "values": "0x30",
            },
        ],
        20,
    ),
    "VolcanoGuardReconcilerConfigRejected": (
        [{"series": f"volcano_guard_reconciler_config_valid{{{RECONCILER}}}", "values": "0x20"}],
        [{"series": f"volcano_guard_reconciler_config_valid{{{RECONCILER}}}", "values": "1x20"}],
        10,
    ),
    "VolcanoGuardReconcilerDrift": (
        [{"series": f"volcano_guard_reconciler_drift_total{{{DRIFTED}}}", "values": "0+1x20"}],
        [{"series": f"volcano_guard_reconciler_drift_total{{{DRIFTED}}}", "values": "0x10 1x10"}],
        20,
    ),
    "VolcanoGuardReconcilerStalled": (
        [
            {
                "series": LAST_PASS,
                "values": "60x40",
            },
            {"series": f"volcano_guard_reconciler_paused{{{RECONCILER}}}", "values": "0x40"},
        ],
        [
            {
                "series": LAST_PASS,
                "values": "60x40",
            },
            {"series": f"volcano_guard_reconciler_paused{{{RECONCILER}}}", "values": "1x40"},
        ],
        30,
    ),
    "VolcanoGuardNodeStatesStalled": (
        [
            {
                "series": f"volcano_guard_reconciler_node_states_stalls_total{{{RECONCILER}}}",
                "values": "0+30x20",
            }
        ],
        [
            {
                "series": f"volcano_guard_reconciler_node_states_stalls_total{{{RECONCILER}}}",
                "values": "0x10 5x10",
            }
        ],
        20,
    ),
    "VolcanoGuardNodeStatesForeign": (
        [
            {
                "series": f"volcano_guard_reconciler_node_states_foreign{{{RECONCILER}}}",
                "values": "1x20",
            }
        ],
        [
            {
                "series": f"volcano_guard_reconciler_node_states_foreign{{{RECONCILER}}}",
                "values": "0x20",
            }
        ],
        20,
    ),
    "VolcanoGuardForeignCA": (
        [
            {
                "series": f"volcano_guard_reconciler_ca_refusals_total{{{RECONCILER}}}",
                "values": "0x10 1x10",
            }
        ],
        [
            {
                "series": f"volcano_guard_reconciler_ca_refusals_total{{{RECONCILER}}}",
                "values": "0x20",
            }
        ],
        20,
    ),
    "VolcanoGuardAuditStale": (
        [
            {
                "series": f"volcano_guard_audit_last_evaluation_timestamp_seconds{{{AUDIT}}}",
                "values": "60x200",
            }
        ],
        [
            {
                "series": f"volcano_guard_audit_last_evaluation_timestamp_seconds{{{AUDIT}}}",
                "values": "60+60x200",
            }
        ],
        120,
    ),
}


# The labels an alert keeps from its series (its `by` clause, or none for a plain comparison).
ON_SIDECAR = {"namespace": "volcano-system", "pod": "volcano-controllers-7c9f"}
ALERT_LABELS = {
    "VolcanoGuardCertExpiresSoon": {
        "job": "volcano-guard",
        "namespace": "volcano-guard",
        "service": "volcano-guard",
    },
    "VolcanoGuardSidecarBacklog": ON_SIDECAR,
    "VolcanoGuardSidecarConflicts": ON_SIDECAR,
    "VolcanoGuardSidecarMemoryHigh": ON_SIDECAR,
    "VolcanoGuardOvercommittedNode": {"resource": "cpu"},
    "VolcanoGuardOrphanedPods": {"namespace": "team-a"},
    "VolcanoGuardSchedulerWillPanic": {"namespace": "volcano-system"},
    "VolcanoGuardControlPlaneRestarts": {"namespace": "volcano-system"},
    "VolcanoGuardPodsOnMissingNodes": {"namespace": "team-a"},
}


def test_every_alert_has_a_case():
    assert set(alerts()) == set(CASES)


def test_the_rules_pass_promtools_check(tmp_path: Path):
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(rule_groups()))
    checked = check_rules(rules)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.parametrize("alert", sorted(CASES))
def test_alert_fires_on_real_series_and_stays_quiet_when_healthy(alert: str, tmp_path: Path):
    firing, healthy, minutes = CASES[alert]
    rule = alerts()[alert]
    expected = {
        "exp_labels": {**ALERT_LABELS.get(alert, {}), **rule.get("labels", {})},
        "exp_annotations": rule["annotations"],
    }
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rule_groups()))
    unit_tests = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": firing,
                "alert_rule_test": [
                    {"eval_time": f"{minutes}m", "alertname": alert, "exp_alerts": [expected]}
                ],
            },
            {
                "interval": "1m",
                "input_series": healthy,
                "alert_rule_test": [
                    {"eval_time": f"{minutes}m", "alertname": alert, "exp_alerts": []}
                ],
            },
        ],
    }
    test_file = tmp_path / "alerts_test.yaml"
    test_file.write_text(yaml.safe_dump(unit_tests))
    result = run_rule_tests(test_file)
    assert result.returncode == 0, result.stdout + result.stderr


def test_webhook_down_fires_when_no_replica_is_scraped_at_all(tmp_path: Path):
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rule_groups()))
    rule = alerts()["VolcanoGuardWebhookDown"]
    unit_tests = {
        "rule_files": ["rules.yaml"],
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": 'up{job="other"}', "values": "1x10"}],
                "alert_rule_test": [
                    {
                        "eval_time": "5m",
                        "alertname": "VolcanoGuardWebhookDown",
                        "exp_alerts": [
                            {"exp_labels": rule["labels"], "exp_annotations": rule["annotations"]}
                        ],
                    }
                ],
            }
        ],
    }
    test_file = tmp_path / "absent_test.yaml"
    test_file.write_text(yaml.safe_dump(unit_tests))
    result = run_rule_tests(test_file)
    assert result.returncode == 0, result.stdout + result.stderr


def dashboard_queries() -> list[str]:
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]


def test_the_dashboards_queries_parse_with_its_variables_filled_in(tmp_path: Path):
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"job", "namespace"} <= variables
    recorded = [
        {
            "record": f"dashboard:query{i}",
            "expr": expr.replace("$job", ".*").replace("$namespace", ".*"),
        }
        for i, expr in enumerate(dashboard_queries())
    ]
    rules = tmp_path / "dashboard.yaml"
    rules.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": recorded}]}))
    checked = check_rules(rules)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    titles = " ".join(panel["title"] for panel in dashboard["panels"])
    for wanted in ("errors", "conflicts", "flush delay", "memory"):
        assert wanted in titles, wanted


async def exposed_names(aiohttp_client) -> set[str]:
    """Every sample name the webhook's, the sidecar's, the audit's and the reconciler's
    metrics ports can expose."""
    import volcano_guard.certs.reload
    import volcano_guard.reconciler.metrics
    import volcano_guard.sidecar.metrics
    import volcano_guard.webhook.metrics  # noqa: F401
    from volcano_guard.audit.metrics import AuditCollector
    from volcano_guard.base.metrics import REGISTRY

    audit = AuditCollector(lambda: None)  # what `audit --watch` registers
    REGISTRY.register(audit)
    try:
        client = await aiohttp_client(metrics_app())
        text = await (await client.get("/metrics")).text()
    finally:
        REGISTRY.unregister(audit)
    names: set[str] = set()
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M):
        suffixes = {"histogram": ("_bucket", "_count", "_sum"), "summary": ("_count", "_sum")}
        names.update(name + suffix for suffix in suffixes.get(kind, ("",)))
    return names


# Series that come from Prometheus itself and from kube-state-metrics, not from the guard.
EXTERNAL = {"up", "kube_deployment_status_replicas_available"}


async def test_rules_dashboard_and_cases_use_only_names_the_guard_exports(aiohttp_client):
    exposed = await exposed_names(aiohttp_client)
    used = set()
    texts = [r["expr"] for r in alerts().values()] + dashboard_queries()
    texts += [s["series"] for firing, healthy, _ in CASES.values() for s in firing + healthy]
    for text in texts:
        used.update(re.findall(r"\b((?:volcano_guard|process)_[a-z_]+|up|kube_[a-z_]+)\b", text))
    assert used - EXTERNAL <= exposed, sorted(used - EXTERNAL - exposed)


def test_the_in_server_policy_panel_reads_the_apiservers_own_metric():
    """A denial by the guard's ValidatingAdmissionPolicies is counted by kube-apiserver only
    (pkg/admission/plugin/policy/validating/metrics, 1.30): the panel's series and labels are
    the ones its source declares, and the policy names are the ones manifests prints."""
    from tests.upstream import upstream_file
    from volcano_guard.webhook.admission_policies import PREFIX

    source = upstream_file(
        "kubernetes-apiserver",
        "v0.30.14",
        "pkg/admission/plugin/policy/validating/metrics/metrics.go",
    )
    assert 'metricsNamespace = "apiserver"' in source
    assert 'metricsSubsystem = "validating_admission_policy"' in source
    assert 'Name:           "check_total"' in source
    assert '[]string{"policy", "policy_binding", "enforcement_action", "state"}' in source
    [query] = [
        q
        for q in dashboard_queries()
        if "apiserver_validating_admission_policy_check_total" in q and "enforcement_action)" in q
    ]
    assert "apiserver_validating_admission_policy_check_total" in query
    assert "by (policy, enforcement_action)" in query and f'policy=~"{PREFIX}.*"' in query


def test_the_podmonitor_scrapes_the_port_and_label_the_injection_writes():
    monitor = next(
        doc
        for doc in yaml.safe_load_all((MONITORING / "podmonitor.yaml").read_text())
        if doc["metadata"]["name"] == "volcano-guard-sidecars"
    )
    container = sidecar_container(
        SidecarInjectionConfig(), {"flush": "1", "ack": "async", "drain": 20.0}, native=True
    )
    assert monitor["spec"]["selector"]["matchLabels"] == {INJECT_LABEL: "true"}
    assert monitor["spec"]["namespaceSelector"] == {"any": True}
    [endpoint] = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] == container["ports"][0]["name"]
    assert "0.0.0.0:" in " ".join(container["args"])  # not loopback: Prometheus can reach it
