"""kube-apiserver's admission-policy metrics on the sandbox's `/metrics`, as the version played
exports them: what a dashboard of the guard's in-server policies reads off a real API server.

Transcribed from k8s.io/apiserver (names, HELP, labels, buckets, stability):
- pkg/admission/plugin/policy/validating/metrics/metrics.go: from 1.31 (v0.32.9 and v0.36.3
  alike) `apiserver_validating_admission_policy_check_total` and `..._check_duration_seconds`
  labelled policy, policy_binding, error_type, enforcement_action (BETA); in 1.30 (v0.30.14)
  policy, policy_binding, enforcement_action, state (ALPHA, state always "active"). Which of
  1.31's shapes it is, the frozen sources do not say (no 1.31 copy): the label change came
  from kubernetes#124064, filed in 1.30's code freeze, so the sandbox gives 1.31 the new one.
- pkg/admission/plugin/policy/validating/dispatcher.go Dispatch: one observation per decision
  that is not a clean admit: an error the failurePolicy Ignore admitted ("allow"), and for a
  denial one per validationAction of the binding ("deny", "audit", "warn"); an audit
  annotation's error under failurePolicy Fail is a "deny". A clean admit is never counted.
  validating/errors.go ErrorType reads the decision's message: "compilation..." is
  compile_error, the cost budget's message out_of_budget, any other error invalid_error.
- pkg/admission/plugin/policy/mutating/metrics/metrics.go (1.36): `apiserver_mutating_
  admission_policy_check_total` and `..._check_duration_seconds`, labelled policy,
  policy_binding, error_type (ALPHA): one observation per mutation of an invocation
  (mutating/dispatcher.go dispatchInvocations), `record_mutation` below.
- pkg/admission/metrics/metrics.go ObserveWebhook: `apiserver_admission_webhook_request_total`
  labelled name, type ("admit" for a mutating webhook, "validating"), operation, code (200, the
  refusal's status, 0 when the call failed), rejected (ALPHA).
component-base prefixes a metric's HELP with its stability level in brackets, and writes a
counter's TYPE under its full name: so does `exposition`.

Elapsed: the apiserver times each validation expression; the sandbox times the policy's whole
evaluation for one param and gives every decision of it that time (the dashboard's latency is
per policy, so the sum is what it shows either way).

Each sandbox app has its own PolicyMetrics (several run in one test process); the `bind`
middleware makes it the current one for a request, so the plugins record without being handed
it.
"""

from __future__ import annotations

import contextvars
import math
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from volcano_guard_sandbox.apiserver.versions import DEFAULT, KubernetesVersion

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# metrics.go: the buckets of both policy latency histograms, in seconds.
POLICY_BUCKETS = (0.0000005, 0.001, 0.01, 0.1, 1.0)
COMPILE_ERROR, INVALID_ERROR, OUT_OF_BUDGET, NO_ERROR = (
    "compile_error",
    "invalid_error",
    "out_of_budget",
    "no_error",
)
_BUDGET_MESSAGE = "validation failed due to running out of cost budget"  # errors.go's prefix


@dataclass(frozen=True)
class Family:
    """One metric as component-base registers it."""

    name: str
    kind: str  # "counter" or "histogram"
    help: str
    stability: str  # "ALPHA", "BETA", "STABLE"
    labels: tuple[str, ...]
    buckets: tuple[float, ...] = ()


_VAP = "apiserver_validating_admission_policy"
_MAP = "apiserver_mutating_admission_policy"
_VAP_BUCKET_HELP = (
    "Validation admission latency for individual validation expressions in seconds, labeled by "
    "policy and further including binding"
)
VALIDATING = (
    Family(
        f"{_VAP}_check_total",
        "counter",
        "Validation admission policy check total, labeled by policy and further identified by "
        "binding and enforcement action taken.",
        "BETA",
        ("policy", "policy_binding", "error_type", "enforcement_action"),
    ),
    Family(
        f"{_VAP}_check_duration_seconds",
        "histogram",
        f"{_VAP_BUCKET_HELP} and enforcement action taken.",
        "BETA",
        ("policy", "policy_binding", "error_type", "enforcement_action"),
        POLICY_BUCKETS,
    ),
)
VALIDATING_1_30 = (
    Family(
        f"{_VAP}_check_total",
        "counter",
        "Validation admission policy check total, labeled by policy and further identified by "
        "binding, enforcement action taken, and state.",
        "ALPHA",
        ("policy", "policy_binding", "enforcement_action", "state"),
    ),
    Family(
        f"{_VAP}_check_duration_seconds",
        "histogram",
        f"{_VAP_BUCKET_HELP}, state and enforcement action taken.",
        "ALPHA",
        ("policy", "policy_binding", "enforcement_action", "state"),
        POLICY_BUCKETS,
    ),
)
MUTATING = (
    Family(
        f"{_MAP}_check_total",
        "counter",
        "Mutation admission policy check total, labeled by policy and further identified by "
        "binding.",
        "ALPHA",
        ("policy", "policy_binding", "error_type"),
    ),
    Family(
        f"{_MAP}_check_duration_seconds",
        "histogram",
        "Mutation admission latency for individual mutation expressions in seconds, labeled by "
        "policy and binding.",
        "ALPHA",
        ("policy", "policy_binding", "error_type"),
        POLICY_BUCKETS,
    ),
)
WEBHOOK_REQUESTS = Family(
    "apiserver_admission_webhook_request_total",
    "counter",
    "Admission webhook request total, identified by name and broken out for each admission type "
    "(validating or admit) and operation. Additional labels specify whether the request was "
    "rejected or not and an HTTP status code. Codes greater than 600 are truncated to 600, to "
    "keep the metrics cardinality bounded.",
    "ALPHA",
    ("name", "type", "operation", "code", "rejected"),
)


def families(version: KubernetesVersion) -> tuple[Family, ...]:
    """The metrics the sandbox exports when it plays version."""
    validating = VALIDATING_1_30 if version.minor <= 30 else VALIDATING
    return (*validating, *MUTATING, WEBHOOK_REQUESTS)


@dataclass
class _Series:
    count: float = 0.0
    total: float = 0.0
    buckets: list[int] = field(default_factory=list)


class PolicyMetrics:
    """The admission metrics of one sandbox API server."""

    def __init__(self, version: KubernetesVersion = DEFAULT) -> None:
        self.version = version
        self._families = {f.name: f for f in families(version)}
        self._series: dict[str, dict[tuple[str, ...], _Series]] = {n: {} for n in self._families}

    def observe_validation(
        self, policy: str, binding: str, action: str, error_type: str, elapsed: float
    ) -> None:
        """validating metrics.go Observe{Admission,Rejection,Audit,Warn}: action is the
        enforcement_action ("allow", "deny", "audit", "warn")."""
        labels = (
            (policy, binding, action, "active")
            if self.version.minor <= 30
            else (policy, binding, error_type, action)
        )
        self._observe(f"{_VAP}_check", labels, elapsed)

    def observe_mutation(self, policy: str, binding: str, error_type: str, elapsed: float) -> None:
        """mutating metrics.go ObserveAdmission and ObserveRejection (the same series)."""
        self._observe(f"{_MAP}_check", (policy, binding, error_type), elapsed)

    def observe_webhook(
        self, name: str, mutating: bool, operation: str, code: int, rejected: bool
    ) -> None:
        """admission metrics.go ObserveWebhook's request counter."""
        labels = (
            name,
            "admit" if mutating else "validating",
            operation,
            str(min(code, 600)),
            "true" if rejected else "false",
        )
        self._add(WEBHOOK_REQUESTS.name, labels)

    def _observe(self, prefix: str, labels: tuple[str, ...], elapsed: float) -> None:
        self._add(f"{prefix}_total", labels)
        histogram = self._families[f"{prefix}_duration_seconds"]
        series = self._series[histogram.name].setdefault(
            labels, _Series(buckets=[0] * len(histogram.buckets))
        )
        series.count += 1
        series.total += elapsed
        for index, bound in enumerate(histogram.buckets):
            if elapsed <= bound:
                series.buckets[index] += 1

    def _add(self, name: str, labels: tuple[str, ...]) -> None:
        self._series[name].setdefault(labels, _Series()).count += 1

    def exposition(self) -> str:
        """The Prometheus text format (0.0.4) of every metric that has a series, as the Go
        client writes it: a metric with none is left out."""
        lines: list[str] = []
        for name, family in self._families.items():
            series = self._series[name]
            if not series:
                continue
            lines.append(f"# HELP {name} [{family.stability}] {_escape_help(family.help)}")
            lines.append(f"# TYPE {name} {family.kind}")
            for labels, values in sorted(series.items()):
                lines.extend(_samples(family, labels, values))
        return "".join(f"{line}\n" for line in lines)


def _samples(family: Family, labels: tuple[str, ...], values: _Series) -> Iterator[str]:
    pairs = list(zip(family.labels, labels, strict=True))
    if family.kind == "counter":
        yield f"{family.name}{_labels(pairs)} {_number(values.count)}"
        return
    for bound, count in zip(family.buckets, values.buckets, strict=True):
        yield f"{family.name}_bucket{_labels([*pairs, ('le', _number(bound))])} {count}"
    yield f"{family.name}_bucket{_labels([*pairs, ('le', '+Inf')])} {_number(values.count)}"
    yield f"{family.name}_sum{_labels(pairs)} {_number(values.total)}"
    yield f"{family.name}_count{_labels(pairs)} {_number(values.count)}"


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    inner = ",".join(f'{key}="{_escape_value(value)}"' for key, value in pairs)
    return f"{{{inner}}}" if inner else ""


def _escape_value(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _escape_help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def _number(value: float) -> str:
    """Go's strconv.FormatFloat(v, 'g', -1, 64), as the Go client writes a sample value."""
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == int(value) and abs(value) < 1e21:
        return str(int(value))
    text = repr(value)
    if "e" in text:
        mantissa, _, exponent = text.partition("e")
        sign = "-" if exponent.startswith("-") else "+"
        return f"{mantissa}e{sign}{exponent.lstrip('+-').zfill(2)}"
    return text


# -- the current app's metrics ----------------------------------------------------------------

METRICS_KEY = web.AppKey("policy_metrics", PolicyMetrics)
_CURRENT: contextvars.ContextVar[PolicyMetrics | None] = contextvars.ContextVar(
    "policy_metrics", default=None
)


@web.middleware
async def bind(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Makes the app's PolicyMetrics the one this request's admission records into."""
    token = _CURRENT.set(request.app[METRICS_KEY])
    try:
        return await handler(request)
    finally:
        _CURRENT.reset(token)


async def serve(request: web.Request) -> web.Response:
    """GET /metrics: the app's admission metrics in the Prometheus text format."""
    body = request.app[METRICS_KEY].exposition()
    return web.Response(body=body.encode(), headers={"Content-Type": CONTENT_TYPE})


@contextmanager
def current(metrics: PolicyMetrics) -> Iterator[PolicyMetrics]:
    """metrics as the current one outside a request (a test calling a plugin directly)."""
    token = _CURRENT.set(metrics)
    try:
        yield metrics
    finally:
        _CURRENT.reset(token)


def error_type(message: str) -> str:
    """validating/errors.go ErrorType for a decision that errored, from its message."""
    if message.startswith("compilation"):
        return COMPILE_ERROR
    if message.startswith(_BUDGET_MESSAGE):
        return OUT_OF_BUDGET
    return INVALID_ERROR


def record_validations(
    policy: str, binding: str, actions: Sequence[str], result: Any, elapsed: float
) -> None:
    """validating/dispatcher.go's observations for one param's ValidateResult (result: its
    `decisions` and `audit_annotations`) under a binding's validationActions ("Deny", "Warn",
    "Audit"); elapsed: seconds the evaluation took."""
    metrics = _CURRENT.get()
    if metrics is None:
        return
    for decision in result.decisions:
        errored = decision.evaluation == "error"
        kind = error_type(decision.message) if errored else NO_ERROR
        if decision.action == "admit":
            if errored:  # an error failurePolicy Ignore admitted
                metrics.observe_validation(policy, binding, "allow", kind, elapsed)
            continue
        for action in actions:
            if action in ("Deny", "Audit", "Warn"):
                metrics.observe_validation(policy, binding, action.lower(), kind, elapsed)
    for annotation in result.audit_annotations:
        if annotation.action == "error":  # failurePolicy Fail: a denial
            metrics.observe_validation(
                policy, binding, "deny", error_type(annotation.error), elapsed
            )


def record_mutation(policy: str, binding: str, error: str | None, elapsed: float) -> None:
    """For the MutatingAdmissionPolicy plugin: one mutation of one invocation was applied
    (mutating/dispatcher.go dispatchInvocations, after dispatchOne).

    policy, binding: the MutatingAdmissionPolicy's and its binding's names.
    error: None when the mutation applied cleanly (error_type no_error), else its error's
    message (a compile error's starts "compilation", the cost budget's "validation failed due
    to running out of cost budget"; anything else is invalid_error).
    elapsed: seconds dispatchOne took (evaluating and applying the patch).
    Outside a sandbox request with no `current` metrics it records nothing."""
    metrics = _CURRENT.get()
    if metrics is not None:
        kind = NO_ERROR if error is None else error_type(error)
        metrics.observe_mutation(policy, binding, kind, elapsed)


def record_webhook_call(
    name: str, mutating: bool, operation: str, code: int, rejected: bool
) -> None:
    """For the webhook dispatcher: one call to webhook name ended with code (200 allowed, the
    refusal's status, 0 when the call failed); rejected when it refused the request."""
    metrics = _CURRENT.get()
    if metrics is not None:
        metrics.observe_webhook(name, mutating, operation, code, rejected)


def timer() -> Callable[[], float]:
    """Seconds since this call, when the returned function is called."""
    start = time.perf_counter()
    return lambda: time.perf_counter() - start
