"""What the API server serves, read from its discovery: which admission objects to install."""

from __future__ import annotations

import re
from typing import Any

from volcano_guard.webhook.admission_policies import GROUP, ApiVersion, PolicyApis

# The registrations' matchConditions are served from Kubernetes 1.28 (beta; GA in 1.30).
OLDEST_SUPPORTED = (1, 28)
VALIDATING_RESOURCE = "validatingadmissionpolicies"
MUTATING_RESOURCE = "mutatingadmissionpolicies"


def parse_version(text: str) -> tuple[int, int]:
    """'1.30', 'v1.30.2' or '1.30+' as (1, 30); ValueError naming the text otherwise (ASCII
    digits only, no leading zero: `1.036` or a full-width digit is no version)."""
    number = "(0|[1-9][0-9]*)"
    match = re.fullmatch(rf"v?{number}\.{number}(\.[0-9]+)?\+?(-.*)?", text.strip())
    if not match or match[1] != "1":
        raise ValueError(f"{text!r} is not a Kubernetes version such as 1.30")
    version = int(match[1]), int(match[2])
    if version < OLDEST_SUPPORTED:
        raise ValueError(
            f"Kubernetes {text.strip()} is older than the guard supports "
            f"(1.{OLDEST_SUPPORTED[1]}: its registrations' matchConditions)"
        )
    return version


def served_apis(api_client: Any) -> PolicyApis:
    """Which in-server policy kinds the cluster serves, at which version: read from
    discovery, so a cluster that turned an API off (or a beta on) is believed over its
    version. MutatingAdmissionPolicy at v1 (1.36+), else at v1beta1 (1.34 and 1.35 with
    --runtime-config=admissionregistration.k8s.io/v1beta1=true)."""
    v1 = _resources(api_client, "v1")
    mutating: ApiVersion | None = None
    if MUTATING_RESOURCE in v1:
        mutating = "v1"
    elif MUTATING_RESOURCE in _resources(api_client, "v1beta1"):
        mutating = "v1beta1"
    return PolicyApis("v1" if VALIDATING_RESOURCE in v1 else None, mutating)


def _resources(api_client: Any, version: str) -> set[str]:
    """The resources admissionregistration.k8s.io/<version> serves (none where it is not)."""
    from kubernetes.client.exceptions import ApiException

    from volcano_guard.base.api_client import request_json

    try:
        listed = request_json(api_client, "GET", f"/apis/{GROUP}/{version}")
    except ApiException as exc:
        if exc.status == 404:
            return set()
        raise
    return {str(r.get("name")) for r in (listed or {}).get("resources") or ()}
