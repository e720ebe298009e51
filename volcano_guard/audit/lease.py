"""One active audit replica at a time: leader election over a coordination.k8s.io/v1 Lease, as
client-go's leaderelection does it (holderIdentity, leaseDurationSeconds, acquireTime,
renewTime, leaseTransitions; optimistic concurrency on the Lease's resourceVersion).

A replica holds the lease while it renews it within leaseDurationSeconds; another takes it
only once it has not been renewed for that long. A write that loses a race (409) or cannot be
made means not leading, until the next try.
"""

from __future__ import annotations

import datetime
import json
import logging
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("volcano_guard.audit.lease")


@dataclass(frozen=True, kw_only=True)
class LeaseSettings:
    namespace: str
    name: str = "volcano-guard-audit"
    duration: int = 15  # seconds without a renewal before another replica may take over
    retry: float = 2.0  # seconds between tries (renewals by the leader)


def _micro_time(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(text: Any) -> datetime.datetime | None:
    """An RFC 3339 time as the apiserver or a client writes it (Z or an offset, micro or not)."""
    try:
        moment = datetime.datetime.fromisoformat(str(text))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.UTC)


class LeaseElector:
    """try_lead() once every `retry` seconds; True while this identity holds the lease."""

    def __init__(self, api_client: Any, identity: str, settings: LeaseSettings) -> None:
        from kubernetes import client

        self._api = client.CoordinationV1Api(api_client)
        self.identity, self.settings = identity, settings
        self.leading = False

    def try_lead(self, now: datetime.datetime | None = None) -> bool:
        from kubernetes.client.exceptions import ApiException

        now = now or datetime.datetime.now(datetime.UTC)
        try:
            self.leading = self._try(now)
        except ApiException as exc:
            if exc.status != 409:
                log.warning("lease %s/%s: %s %s", self.settings.namespace, self.settings.name,
                            exc.status, exc.reason)
            self.leading = False
        except Exception as exc:  # the API server unreachable: not leading until it answers
            log.warning("lease %s/%s: %s", self.settings.namespace, self.settings.name, exc)
            self.leading = False
        return self.leading

    def _try(self, now: datetime.datetime) -> bool:
        from kubernetes.client.exceptions import ApiException

        settings = self.settings
        try:
            lease: Any = self._api.read_namespaced_lease(settings.name, settings.namespace,
                                                         _preload_content=False)
        except ApiException as exc:
            if exc.status != 404:
                raise
            lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                     "metadata": {"name": settings.name, "namespace": settings.namespace},
                     "spec": self._spec(now, transitions=0, acquired=now)}
            self._api.create_namespaced_lease(settings.namespace, lease)
            return True
        current = json.loads(lease.data)
        spec = current.get("spec") or {}
        holder = spec.get("holderIdentity")
        renewed = _parse(spec.get("renewTime"))
        duration = int(spec.get("leaseDurationSeconds") or settings.duration)
        expired = renewed is None or (now - renewed).total_seconds() > duration
        if holder != self.identity and not expired:
            return False
        transitions = int(spec.get("leaseTransitions") or 0) + (holder != self.identity)
        acquired = now if holder != self.identity else _parse(spec.get("acquireTime")) or now
        current["spec"] = self._spec(now, transitions, acquired)
        # The resourceVersion read makes this a compare-and-swap: a rival's write wins (409).
        self._api.replace_namespaced_lease(settings.name, settings.namespace, current)
        return True

    def _spec(self, now: datetime.datetime, transitions: int,
              acquired: datetime.datetime) -> dict[str, Any]:
        return {"holderIdentity": self.identity,
                "leaseDurationSeconds": self.settings.duration,
                "acquireTime": _micro_time(acquired), "renewTime": _micro_time(now),
                "leaseTransitions": transitions}
