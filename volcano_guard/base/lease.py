"""One active replica at a time (the audit's, the reconciler's): leader election over a
coordination.k8s.io/v1 Lease, as client-go's leaderelection does it
(tools/leaderelection/leaderelection.go: holderIdentity, leaseDurationSeconds, acquireTime,
renewTime, leaseTransitions; optimistic concurrency on the Lease's resourceVersion).

Time is this replica's own: a record's expiry runs from the local moment this replica last saw
it change (client-go's observedTime), never from the renewTime another replica wrote, so two
replicas whose clocks disagree still agree on who leads. The leader renews every `retry`
seconds; one that has not renewed for `renew_deadline` (shorter than the lease's duration)
stops leading at once, before any other may take over. A standby tries every `retry` seconds
and again the moment the record it saw runs out, so it takes over within duration + retry of
the leader's last renewal. A leader that stops releases the lease (holder empty), so another
takes over at its next try.
"""

from __future__ import annotations

import datetime
import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("volcano_guard.base.lease")


@dataclass(frozen=True, kw_only=True)
class LeaseSettings:
    namespace: str
    name: str = "volcano-guard-audit"
    duration: int = 15  # seconds a record may go unchanged before another replica takes over
    renew_deadline: float = 10.0  # seconds the leader may go without renewing, then stops
    retry: float = 2.0  # seconds between tries (renewals by the leader)
    namespace_flag: str = "--lease-namespace"  # what sets the namespace, for messages


def _micro_time(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(text: Any) -> datetime.datetime | None:
    """An RFC 3339 time as the apiserver or a client writes it (Z or an offset, micro or not)."""
    try:
        moment = datetime.datetime.fromisoformat(str(text))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.UTC)


def _record(spec: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(
        spec.get(key)
        for key in (
            "holderIdentity",
            "leaseDurationSeconds",
            "acquireTime",
            "renewTime",
            "leaseTransitions",
        )
    )


class LeaseElector:
    """try_lead() once every `retry` seconds; True while this identity holds the lease.
    `problem` says why the lease cannot be read or written (None when it can)."""

    def __init__(
        self,
        api_client: Any,
        identity: str,
        settings: LeaseSettings,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        from kubernetes import client

        self._api = client.CoordinationV1Api(api_client)
        self.identity, self.settings, self._clock = identity, settings, clock
        self.leading = False
        self.problem: str | None = None
        self._observed: tuple[Any, ...] | None = None
        self._holder: str | None = None  # the holder this replica last read
        self._duration = float(settings.duration)  # the duration that holder declared
        self._observed_at = -math.inf  # this replica's clock when the record last changed
        self._renewed_at = -math.inf  # this replica's clock at its last renewal

    def try_lead(self, now: datetime.datetime | None = None) -> bool:
        from kubernetes.client.exceptions import ApiException

        now = now or datetime.datetime.now(datetime.UTC)
        local = self._clock()
        try:
            self.leading = self._try(now, local)
            self._say(None)
        except ApiException as exc:
            if exc.status != 409:  # a 409 is a rival's write winning: nothing wrong
                self._say(self._explain(exc))
            self._keep_leading_until_the_deadline(local)
        except Exception as exc:  # the API server unreachable: lead on until the deadline
            self._say(f"lease {self._where()}: {exc}")
            self._keep_leading_until_the_deadline(local)
        return self.leading

    def next_try_in(self) -> float:
        """Seconds to the next try: `retry`, or sooner when another's record runs out first,
        so a standby takes over within duration + retry of the last renewal it saw."""
        if self.leading or self._holder in (None, "", self.identity):
            return self.settings.retry
        remaining = self._observed_at + self._duration - self._clock()
        # Run out already: the try that just failed (the API server unreachable, a rival's
        # write first) is tried again at the usual pace, not at once and for ever.
        return min(self.settings.retry, remaining) if remaining > 0 else self.settings.retry

    def release(self) -> None:
        """Give the lease up (holder empty, 1 s), so another replica takes it at once."""
        if not self.leading:
            return
        self.leading = False
        settings = self.settings
        try:
            lease = self._read()
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self.identity:
                return
            now = _micro_time(datetime.datetime.now(datetime.UTC))
            lease["spec"] = {
                "holderIdentity": "",
                "leaseDurationSeconds": 1,
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": spec.get("leaseTransitions") or 0,
            }
            self._api.replace_namespaced_lease(settings.name, settings.namespace, lease)
        except Exception as exc:  # it expires in its own time
            log.warning("lease %s: not released: %s", self._where(), exc)

    def _keep_leading_until_the_deadline(self, local: float) -> None:
        self.leading = self.leading and local - self._renewed_at < self.settings.renew_deadline

    def _try(self, now: datetime.datetime, local: float) -> bool:
        from kubernetes.client.exceptions import ApiException

        settings = self.settings
        try:
            current = self._read()
        except ApiException as exc:
            if exc.status != 404:
                raise
            lease: Any = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": settings.name, "namespace": settings.namespace},
                "spec": self._spec(now, transitions=0, acquired=now),
            }
            self._api.create_namespaced_lease(settings.namespace, lease)
            self._holder = self.identity
            self._renewed(lease["spec"], local)
            return True
        spec = current.get("spec") or {}
        if _record(spec) != self._observed:
            self._observed, self._observed_at = _record(spec), local
        holder = self._holder = spec.get("holderIdentity")
        duration = self._duration = int(spec.get("leaseDurationSeconds") or settings.duration)
        if holder and holder != self.identity and local < self._observed_at + duration:
            return False
        transitions = int(spec.get("leaseTransitions") or 0) + (holder != self.identity)
        acquired = now if holder != self.identity else _parse(spec.get("acquireTime")) or now
        current["spec"] = self._spec(now, transitions, acquired)
        # The resourceVersion read makes this a compare-and-swap: a rival's write wins (409).
        self._api.replace_namespaced_lease(settings.name, settings.namespace, current)
        self._holder = self.identity
        self._renewed(current["spec"], local)
        return True

    def _read(self) -> Any:
        """The Lease as JSON (raw: its times kept as written); ApiException if unreadable."""
        read: Any = self._api.read_namespaced_lease(
            self.settings.name, self.settings.namespace, _preload_content=False
        )
        return json.loads(read.data)

    def _renewed(self, spec: dict[str, Any], local: float) -> None:
        self._observed, self._observed_at, self._renewed_at = _record(spec), local, local

    def _spec(
        self, now: datetime.datetime, transitions: int, acquired: datetime.datetime
    ) -> dict[str, Any]:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.settings.duration,
            "acquireTime": _micro_time(acquired),
            "renewTime": _micro_time(now),
            "leaseTransitions": transitions,
        }

    def _where(self) -> str:
        return f"{self.settings.namespace}/{self.settings.name}"

    def _explain(self, exc: Any) -> str:
        """One line on what is wrong with the lease, naming the flag that moves it."""
        settings, flag = self.settings, self.settings.namespace_flag
        if exc.status == 404:
            return (
                f"lease {self._where()}: the namespace {settings.namespace} does not exist; "
                f"create it or choose another with {flag}"
            )
        if exc.status in (401, 403):
            return (
                f"lease {self._where()}: {exc.status} {exc.reason}: this account may not "
                f"get, create and update Leases in {settings.namespace} (grant it, or "
                f"choose another namespace with {flag})"
            )
        return f"lease {self._where()}: {exc.status} {exc.reason}"

    def _say(self, problem: str | None) -> None:
        """Log a problem once, when it starts or changes, and when it is over."""
        if problem != self.problem:
            if problem:
                log.warning("%s", problem)
            elif self.problem:
                log.info("lease %s: reachable again", self._where())
        self.problem = problem
