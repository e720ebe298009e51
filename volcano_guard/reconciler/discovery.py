"""What the API server serves, read from its discovery: which admission objects to install."""

from __future__ import annotations

import re
from typing import Any

# ValidatingAdmissionPolicy is admissionregistration.k8s.io/v1 from Kubernetes 1.30.
POLICIES_FROM = (1, 30)
POLICY_RESOURCE = "validatingadmissionpolicies"


def parse_version(text: str) -> tuple[int, int]:
    """'1.30', 'v1.30.2' or '1.30+' as (1, 30); ValueError naming the text otherwise."""
    match = re.fullmatch(r"v?(\d+)\.(\d+)(\.\d+)?\+?(-.*)?", text.strip())
    if not match:
        raise ValueError(f"{text!r} is not a Kubernetes version such as 1.30")
    return int(match[1]), int(match[2])


def serves_policies(version: tuple[int, int]) -> bool:
    return version >= POLICIES_FROM


def policies_served(api_client: Any) -> bool:
    """Whether the cluster serves admissionregistration.k8s.io/v1 validatingadmissionpolicies
    (read from discovery, so a cluster that turned them off is believed over its version)."""
    from kubernetes.client.exceptions import ApiException

    from volcano_guard.base.api_client import request_json

    try:
        listed = request_json(api_client, "GET", "/apis/admissionregistration.k8s.io/v1")
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return any(r.get("name") == POLICY_RESOURCE for r in (listed or {}).get("resources") or ())
