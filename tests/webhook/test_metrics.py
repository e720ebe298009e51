"""The metrics port serves the process metrics and what Prometheus's own lint accepts."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from tests.promtool import check_metrics
from volcano_guard.base.metrics import metrics_app


async def test_metrics_port_serves_process_metrics_and_passes_promtools_lint(aiohttp_client):
    import volcano_guard.sidecar.metrics
    import volcano_guard.webhook.metrics  # noqa: F401

    client = await aiohttp_client(metrics_app())
    response = await client.get("/metrics")
    text = await response.text()
    names = {s.name for family in text_string_to_metric_families(text) for s in family.samples}
    assert {
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
        "process_start_time_seconds",
        "process_open_fds",
    } <= names
    checked = check_metrics(text)
    assert checked.returncode == 0, checked.stdout + checked.stderr
