"""The peer for bench/admission_load.py: the resourceRequests rule as a kopf validating webhook.

Run by the benchmark as `kopf run --standalone --all-namespaces bench/kopf_peer.py` with
KOPF_PEER_SERVER (the sandbox API server kopf needs for discovery), KOPF_PEER_PORT,
KOPF_PEER_CERT and KOPF_PEER_KEY in the environment. kopf serves it at POST /resource-requests.
The rule is the one volcano-guard enforces: every container and init container of a pod that
Volcano schedules requests cpu and memory (a limit counts), as valid, non-negative quantities
no greater than their limits.
"""

from __future__ import annotations

import os
from typing import Any

import kopf

from volcano_guard.base.quantity import QuantityError, parse_quantity

REQUIRED = ("cpu", "memory")
VOLCANO_SCHEDULERS = ("volcano",)


@kopf.on.login()
def login(**_: Any) -> kopf.ConnectionInfo:
    return kopf.ConnectionInfo(server=os.environ["KOPF_PEER_SERVER"], insecure=True)


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.admission.server = kopf.WebhookServer(
        addr="127.0.0.1",
        port=int(os.environ["KOPF_PEER_PORT"]),
        certfile=os.environ["KOPF_PEER_CERT"],
        pkeyfile=os.environ["KOPF_PEER_KEY"],
    )
    settings.admission.managed = None  # no webhook configuration: the benchmark calls it


@kopf.on.validate("pods", id="resource-requests", operation="CREATE")
def resource_requests(spec: kopf.Spec, **_: Any) -> None:
    if spec.get("schedulerName") not in VOLCANO_SCHEDULERS:
        return
    problems = [
        problem
        for field in ("initContainers", "containers")
        for container in spec.get(field) or []
        for problem in _problems(container)
    ]
    if problems:
        raise kopf.AdmissionError("; ".join(problems), code=403)


def _problems(container: dict[str, Any]) -> list[str]:
    resources = container.get("resources") or {}
    requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
    problems, parsed = [], {}
    for field, values in (("requests", requests), ("limits", limits)):
        for resource, raw in values.items():
            try:
                parsed[field, resource] = value = parse_quantity(raw)
            except QuantityError as exc:
                problems.append(f"{container.get('name')}: invalid {resource} {field}: {exc}")
                continue
            if value < 0:
                problems.append(f"{container.get('name')}: negative {resource} {field}")
    for resource in REQUIRED:
        if resource not in requests and resource not in limits:
            problems.append(f"{container.get('name')}: no {resource} request")
    for resource in requests:
        request, limit = parsed.get(("requests", resource)), parsed.get(("limits", resource))
        if request is not None and limit is not None and request > limit:
            problems.append(f"{container.get('name')}: {resource} request over its limit")
    return problems
