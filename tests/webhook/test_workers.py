"""`webhook --workers N`: worker processes share the admission port; the parent merges their
metrics and readiness, passes SIGTERM on, and stops when a worker dies."""

import json
import os
import signal
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.parser import text_string_to_metric_families

from tests.builders import container, pod, review
from tests.processes import admissions_counted, post_once, start_cli, wait_for_log
from tests.promtool import check_metrics
from volcano_guard.webhook.workers import merge_metrics
from volcano_guard_sandbox.processes import children, stat_fields

NO_CLUSTER = (
    "policies: {nodeName: {mode: off, bindingGuard: {mode: off}}, podGroups: "
    "{stampGenerationId: false, deleteGuard: {mode: off}}, queues: {mode: off}}\n"
)


@pytest.fixture
def pool(certs, tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(NO_CLUSTER)
    proc = start_cli(
        "webhook",
        "--workers",
        "2",
        "--config",
        str(config),
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "127.0.0.1:0",
        "--tls-cert",
        str(certs.cert_file),
        "--tls-key",
        str(certs.key_file),
    )
    workers = [
        wait_for_log(proc, r"https://[^:]+:(\d+), metrics on http://[^:]+:(\d+)", timeout=60)
        for _ in range(2)
    ]
    parent = wait_for_log(proc, r"2 webhook workers; merged metrics on http://[^:]+:(\d+)")
    assert workers[0][1] == workers[1][1], "the workers must share one admission port"
    yield proc, int(workers[0][1]), [int(w[2]) for w in workers], int(parent[1])
    if proc.poll() is None:
        proc.kill()
    proc.wait(30)


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_workers_share_the_port_and_the_parent_sums_their_metrics(pool, certs):
    _, port, worker_metrics, parent_metrics = pool
    body = json.dumps(review(pod(container("c", requests={"cpu": "1", "memory": "1Gi"})))).encode()
    for _ in range(40):  # a connection each, so that the kernel picks a worker each time
        status, answer = post_once(certs.ca_file, port, "/validate", body)
        assert (status, answer["response"]["allowed"]) == (200, True)
    per_worker = [admissions_counted(get(p, "/metrics")[1]) for p in worker_metrics]
    assert sum(per_worker) == 40
    assert all(n > 0 for n in per_worker), f"one worker took every connection: {per_worker}"
    status, merged = get(parent_metrics, "/metrics")
    assert status == 200
    assert admissions_counted(merged) == 40
    memory = [resident_memory(get(p, "/metrics")[1]) for p in worker_metrics]
    assert resident_memory(merged) > sum(memory)  # the workers' and the parent's own
    checked = check_metrics(merged)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert get(parent_metrics, "/readyz") == (200, "ok")
    assert get(parent_metrics, "/healthz") == (200, "ok")


def resident_memory(metrics: str) -> float:
    return next(
        s.value
        for family in text_string_to_metric_families(metrics)
        for s in family.samples
        if s.name == "process_resident_memory_bytes"
    )


@pytest.mark.slow  # a fault run: two worker processes started for it, 3-5 s
def test_sigterm_stops_every_worker_and_exits_0(pool):
    proc, _, _, _ = pool
    workers = _worker_pids(proc.pid)
    assert len(workers) == 2
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(40) == 0
    assert not [pid for pid in workers if _alive(pid)]


@pytest.mark.slow  # a fault run: two worker processes started for it, 3-5 s
def test_a_dead_worker_stops_the_parent_with_status_1(pool):
    proc, _, _, _ = pool
    victim, survivor = _worker_pids(proc.pid)
    os.kill(victim, signal.SIGKILL)
    assert proc.wait(40) == 1
    assert not _alive(survivor)
    assert "exited; stopping the other workers" in proc.stderr.read()


@pytest.mark.slow  # a fault run: two worker processes started for it, 3-5 s
def test_a_killed_parent_takes_its_workers_with_it(pool):
    proc, _, _, _ = pool
    workers = _worker_pids(proc.pid)
    assert len(workers) == 2
    proc.kill()  # no SIGTERM to pass on: the kernel tells the workers (SIGTERM, a drain)
    proc.wait(10)
    deadline = time.monotonic() + 40
    while [pid for pid in workers if _alive(pid)] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in workers if _alive(pid)], "workers outlived their parent"


def test_workers_must_be_a_positive_number(certs):
    proc = start_cli(
        "webhook",
        "--workers",
        "0",
        "--tls-cert",
        str(certs.cert_file),
        "--tls-key",
        str(certs.key_file),
    )
    assert proc.wait(20) == 2
    assert "argument --workers: 0 is not a positive integer" in proc.stderr.read()


def worker_exposition(requests: int, durations: list[float], expiry: float) -> str:
    """One worker's /metrics as prometheus_client writes it (a counter's `_created` is a gauge
    family of its own there)."""
    registry = CollectorRegistry()
    counter = Counter("x_total", "Requests.", ["policy"], registry=registry)
    counter.labels("a").inc(requests)
    histogram = Histogram("latency_seconds", "Durations.", buckets=(0.1,), registry=registry)
    for duration in durations:
        histogram.observe(duration)
    Gauge("expiry_timestamp_seconds", "Expiry.", registry=registry).set(expiry)
    return generate_latest(registry).decode()


def test_merged_metrics_sum_counters_and_histograms_and_keep_the_highest_gauge():
    first = worker_exposition(3, [0.05, 0.2], 7)
    time.sleep(0.01)  # the second worker's series begin later
    second = worker_exposition(4, [0.05, 0.05, 0.2, 0.2, 0.2], 9)
    created = [
        s.value
        for text in (first, second)
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "x_created"
    ]
    assert created[0] < created[1]
    families = merge_metrics([first, second])
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in families
        for s in family.samples
    }
    assert samples[("x_total", (("policy", "a"),))] == 7
    assert samples[("x_created", (("policy", "a"),))] == created[0]  # the earliest
    assert samples[("latency_seconds_bucket", (("le", "0.1"),))] == 3
    assert samples[("latency_seconds_count", ())] == 7
    assert samples[("latency_seconds_sum", ())] == pytest.approx(0.95)
    assert samples[("expiry_timestamp_seconds", ())] == 9


def test_merged_process_memory_is_the_sum_and_start_time_the_earliest():
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    text = generate_latest(registry).decode()
    samples = {s.name: s.value for family in merge_metrics([text, text]) for s in family.samples}
    alone = {
        s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples
    }
    assert samples["process_resident_memory_bytes"] == 2 * alone["process_resident_memory_bytes"]
    assert samples["process_open_fds"] == 2 * alone["process_open_fds"]
    assert samples["process_start_time_seconds"] == alone["process_start_time_seconds"]
    assert samples["process_max_fds"] == alone["process_max_fds"]


def test_merged_open_connections_are_the_sum_over_the_workers():
    registry = CollectorRegistry()
    Gauge("volcano_guard_connections_open", "Open.", registry=registry).set(7)
    text = generate_latest(registry).decode()
    [family] = merge_metrics([text, text, text])
    assert [s.value for s in family.samples] == [21]


def _worker_pids(pid: int) -> list[int]:
    """Children running a webhook worker (not multiprocessing's resource tracker)."""
    out = []
    for child in children(pid):
        with open(f"/proc/{child}/cmdline", "rb") as f:
            if b"resource_tracker" not in f.read():
                out.append(child)
    return out


def _alive(pid: int) -> bool:
    try:
        return stat_fields(pid)[0] != "Z"
    except FileNotFoundError:
        return False
