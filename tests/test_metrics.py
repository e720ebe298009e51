"""The loop-owned metric types expose exactly what prometheus_client's own types would, and
the metrics port serves what Prometheus's own lint accepts."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.promtool import check_metrics
from volcano_guard.base.metrics import OwnedCounter, OwnedHistogram, metrics_app

BUCKETS = (0.001, 0.01, 0.1, 1.0)
# Below, on and above every bound, zero and a value past the last bound.
OBSERVATIONS = (0.0, 0.0005, 0.001, 0.002, 0.01, 0.05, 0.1, 0.1, 0.5, 1.0, 7.5)


def test_owned_histogram_exposes_what_prometheus_clients_histogram_does() -> None:
    owned_registry, reference_registry = CollectorRegistry(), CollectorRegistry()
    owned = OwnedHistogram("latency_seconds", "Latency.", BUCKETS, registry=owned_registry)
    reference = Histogram("latency_seconds", "Latency.", buckets=BUCKETS,
                          registry=reference_registry)
    for value in OBSERVATIONS:
        owned.observe(value)
        reference.observe(value)
    assert _samples(owned_registry) == _samples(reference_registry)
    buckets = {s.labels["le"]: s.value for s in _samples(owned_registry)
               if s.name.endswith("_bucket")}
    assert buckets == {"0.001": 3, "0.01": 5, "0.1": 8, "1.0": 10, "+Inf": 11}


def test_owned_counter_exposes_what_prometheus_clients_counter_does() -> None:
    owned_registry, reference_registry = CollectorRegistry(), CollectorRegistry()
    labels = ("operation", "decision")
    owned = OwnedCounter("requests_total", "Requests.", labels, registry=owned_registry)
    reference = Counter("requests_total", "Requests.", labels, registry=reference_registry)
    for operation, decision in [("CREATE", "allowed")] * 3 + [("DELETE", "denied")]:
        owned.inc(operation, decision)
        reference.labels(operation, decision).inc()
    assert _samples(owned_registry) == _samples(reference_registry)
    assert owned.value("CREATE", "allowed") == 3
    assert owned.value("UPDATE", "allowed") == 0


def _samples(registry: CollectorRegistry) -> list:
    """Every sample but the _created timestamps (prometheus_client's own types add them)."""
    text = generate_latest(registry).decode()
    return sorted((s for family in text_string_to_metric_families(text) for s in family.samples
                   if not s.name.endswith("_created")), key=repr)


async def test_metrics_port_serves_process_metrics_and_passes_promtools_lint(aiohttp_client):
    import volcano_guard.sidecar.metrics
    import volcano_guard.webhook.metrics  # noqa: F401

    client = await aiohttp_client(metrics_app())
    response = await client.get("/metrics")
    text = await response.text()
    names = {s.name for family in text_string_to_metric_families(text) for s in family.samples}
    assert {"process_resident_memory_bytes", "process_cpu_seconds_total",
            "process_start_time_seconds", "process_open_fds"} <= names
    checked = check_metrics(text)
    assert checked.returncode == 0, checked.stdout + checked.stderr
