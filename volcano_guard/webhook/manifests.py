"""The admission objects a config calls for: both webhook configurations and, where the cluster
serves them, the in-server policies and their bindings. One generator for `volcano-guard
manifests` (offline, for GitOps) and the reconciler (in the cluster), so both render the same
objects from the same config.

Every object has a name fixed in advance (OWNED), whatever the config: the reconciler's RBAC
names each one, and an object the config does not call for is deleted rather than left behind.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from volcano_guard.webhook.admission_policies import PREFIX, admission_policies
from volcano_guard.webhook.config import Config
from volcano_guard.webhook.registrations import webhook_configurations

NAME = "volcano-guard"  # both webhook configurations'
MUTATING = "MutatingWebhookConfiguration"
VALIDATING = "ValidatingWebhookConfiguration"
POLICY = "ValidatingAdmissionPolicy"
BINDING = "ValidatingAdmissionPolicyBinding"
# Every in-server check any config can produce (a test enumerates the configs that shape them).
IN_SERVER_CHECKS = (
    "resource-requests",
    "volcano-resource-requests",
    "node-name",
    "bindings",
    "podgroup-generation-id",
)
PLURALS = {
    MUTATING: "mutatingwebhookconfigurations",
    VALIDATING: "validatingwebhookconfigurations",
    POLICY: "validatingadmissionpolicies",
    BINDING: "validatingadmissionpolicybindings",
}


class Owned(NamedTuple):
    kind: str
    name: str


OWNED = (
    Owned(MUTATING, NAME),
    Owned(VALIDATING, NAME),
    *(Owned(kind, PREFIX + check) for check in IN_SERVER_CHECKS for kind in (POLICY, BINDING)),
)


def admission_objects(
    config: Config,
    namespace: str = "volcano-guard",
    service: str = "volcano-guard",
    *,
    policies_served: bool = True,
) -> dict[Owned, dict[str, Any]]:
    """What config calls for, for the guard installed in namespace behind service. Without
    policies_served (Kubernetes before 1.30) the registrations judge alone and fail closed,
    as with `validatingAdmissionPolicies: false`."""
    import msgspec

    if not policies_served:
        config = msgspec.structs.replace(config, validatingAdmissionPolicies=False)
    objects = [
        *webhook_configurations(config, namespace, service, NAME),
        *admission_policies(config, namespace),
    ]
    found = {Owned(obj["kind"], obj["metadata"]["name"]): obj for obj in objects}
    unknown = set(found) - set(OWNED)
    if unknown:  # a new in-server check must be added to IN_SERVER_CHECKS (and the RBAC)
        raise ValueError(f"objects outside OWNED: {sorted(unknown)}")
    return found
