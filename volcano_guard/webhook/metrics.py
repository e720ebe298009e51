"""The webhook's Prometheus metrics (their names are part of the contract: docs/reference.md)."""

from __future__ import annotations

import functools

from prometheus_client import Counter, Histogram

from volcano_guard.base.metrics import PREFIX, REGISTRY

ADMISSION_REQUESTS = Counter(
    f"{PREFIX}admission_requests_total",
    "Admission requests by operation, kind, policy and per-policy decision.",
    ["operation", "kind", "policy", "decision"],
    registry=REGISTRY,
)
# The counter's child for (operation, kind, policy, decision), made once: labels() checks the
# values and takes a lock on every call.
admission_counter = functools.cache(ADMISSION_REQUESTS.labels)
ADMISSION_DURATION = Histogram(
    f"{PREFIX}admission_duration_seconds",
    "Time from a complete admission body to its answer.",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0),
    registry=REGISTRY,
)
ADMISSION_ERRORS = Counter(
    f"{PREFIX}admission_errors_total",
    "Admission requests answered with an error, by reason.",
    ["reason"],
    registry=REGISTRY,
)
LIVE_LOOKUPS = Counter(
    f"{PREFIX}live_lookups_total",
    "Rare-path lists a decision waited on (PodGroup delete members), by resource and outcome: "
    "listed, failed (error or timeout), or refused (too many at once).",
    ["resource", "outcome"],
    registry=REGISTRY,
)
