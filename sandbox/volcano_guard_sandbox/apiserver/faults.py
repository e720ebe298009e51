"""Injectable faults and request counters: what tests and benchmarks turn and read."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class FaultRule:
    """Applies to requests whose verb and resource match (empty = any)."""

    verbs: frozenset[str] = frozenset()
    resources: frozenset[str] = frozenset()
    latency: float = 0.0  # seconds added before answering
    error_rate: float = 0.0  # share answered with error_code
    error_code: int = 503
    throttle_rate: float = 0.0  # share answered 429 with Retry-After
    retry_after: int = 1

    def applies(self, verb: str, resource: str) -> bool:
        return (not self.verbs or verb in self.verbs) and (
            not self.resources or resource in self.resources
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FaultRule:
        """From the JSON of POST /sandbox/faults; ValueError names a bad field."""
        known = {
            "verbs",
            "resources",
            "latency",
            "errorRate",
            "errorCode",
            "throttleRate",
            "retryAfter",
        }
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown fault fields: {', '.join(sorted(unknown))}")
        rule = cls(
            verbs=frozenset(_strings(data.get("verbs", []), "verbs")),
            resources=frozenset(_strings(data.get("resources", []), "resources")),
            latency=_number(data.get("latency", 0.0), "latency", 0, 60),
            error_rate=_number(data.get("errorRate", 0.0), "errorRate", 0, 1),
            error_code=int(_number(data.get("errorCode", 503), "errorCode", 400, 599)),
            throttle_rate=_number(data.get("throttleRate", 0.0), "throttleRate", 0, 1),
            retry_after=int(_number(data.get("retryAfter", 1), "retryAfter", 0, 3600)),
        )
        return rule


@dataclass
class Faults:
    rules: tuple[FaultRule, ...] = ()
    random: random.Random = field(default_factory=lambda: random.Random(0))

    def decide(self, verb: str, resource: str) -> tuple[float, int | None, int]:
        """(latency, error code or None, retry-after) for one request."""
        latency, code, retry_after = 0.0, None, 0
        for rule in self.rules:
            if not rule.applies(verb, resource):
                continue
            latency += rule.latency
            if code is None and self.random.random() < rule.throttle_rate:
                code, retry_after = 429, rule.retry_after
            elif code is None and self.random.random() < rule.error_rate:
                code = rule.error_code
        return latency, code, retry_after


@dataclass
class Stats:
    requests: Counter[tuple[str, str]] = field(default_factory=Counter)  # (verb, resource)
    writes: Counter[str] = field(default_factory=Counter)  # resource[/subresource]
    conflicts: Counter[str] = field(default_factory=Counter)
    injected: Counter[int] = field(default_factory=Counter)  # status code

    def as_dict(self) -> dict[str, Any]:
        return {
            "requests": {
                f"{verb} {resource}": n for (verb, resource), n in sorted(self.requests.items())
            },
            "writes": dict(sorted(self.writes.items())),
            "conflicts": dict(sorted(self.conflicts.items())),
            "injected": {str(code): n for code, n in sorted(self.injected.items())},
        }


def _strings(value: Any, name: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{name} must be a list of strings")
    return value


def _number(value: Any, name: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise ValueError(f"{name} must be a number from {low} to {high}")
    return float(value)
