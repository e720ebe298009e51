"""The sidecar's Prometheus metrics (their names are part of the contract: docs/reference.md)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from volcano_guard.base.metrics import PREFIX, REGISTRY

WRITES_RECEIVED = Counter(
    f"{PREFIX}sidecar_writes_received_total",
    "Status writes of coalesced resources received from clients.",
    registry=REGISTRY,
)
UPSTREAM_WRITES = Counter(
    f"{PREFIX}sidecar_upstream_writes_total",
    "Merge patches sent upstream by the flusher, by HTTP code (0: none).",
    ["code"],
    registry=REGISTRY,
)
COALESCED = Counter(
    f"{PREFIX}sidecar_coalesced_total",
    "Writes merged into an object's pending state that already held others.",
    registry=REGISTRY,
)
NOOP_SKIPPED = Counter(
    f"{PREFIX}sidecar_noop_skipped_total",
    "Writes or flushes skipped because the server already held the intent.",
    registry=REGISTRY,
)
CONFLICTS = Counter(
    f"{PREFIX}sidecar_conflicts_total",
    "409 answers to the sidecar's own upstream writes.",
    registry=REGISTRY,
)
STALE_DROPPED = Counter(
    f"{PREFIX}sidecar_stale_dropped_total",
    "Pending states dropped because the object was replaced or deleted.",
    registry=REGISTRY,
)
PASSED_THROUGH = Counter(
    f"{PREFIX}sidecar_writes_passed_through_total",
    "Status writes forwarded unchanged (nothing known to coalesce with).",
    registry=REGISTRY,
)
PENDING_OBJECTS = Gauge(
    f"{PREFIX}sidecar_pending_objects", "Objects with a pending desired status.", registry=REGISTRY
)
FLUSH_DELAY = Histogram(
    f"{PREFIX}sidecar_flush_delay_seconds",
    "From an object's first pending write to the upstream write's success.",
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60),
    registry=REGISTRY,
)
PROXIED = Counter(
    f"{PREFIX}sidecar_proxied_requests_total",
    "Requests passed through to the upstream API server, by method and code.",
    ["method", "code"],
    registry=REGISTRY,
)
PROXY_LATENCY = Histogram(
    f"{PREFIX}sidecar_proxy_latency_seconds",
    "Time from a proxied request to the upstream response headers.",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1),
    registry=REGISTRY,
)
