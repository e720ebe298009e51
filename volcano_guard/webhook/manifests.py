"""The admission objects a config calls for: both webhook configurations and, where the cluster
serves them, the in-server policies and their bindings. One generator for `volcano-guard
manifests` (offline, for GitOps) and the reconciler (in the cluster), so both render the same
objects from the same config.

Every object has a name fixed in advance (OWNED), whatever the config: the reconciler's RBAC
names each one, and an object the config does not call for is deleted rather than left behind.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from volcano_guard.webhook.admission_policies import (
    NEWEST,
    PREFIX,
    PolicyApis,
    admission_policies,
    installed_apis,
)
from volcano_guard.webhook.config import Config
from volcano_guard.webhook.registrations import webhook_configurations

NAME = "volcano-guard"  # both webhook configurations'
MUTATING = "MutatingWebhookConfiguration"
VALIDATING = "ValidatingWebhookConfiguration"
POLICY = "ValidatingAdmissionPolicy"
BINDING = "ValidatingAdmissionPolicyBinding"
MUTATING_POLICY = "MutatingAdmissionPolicy"
MUTATING_BINDING = "MutatingAdmissionPolicyBinding"
# Every in-server check any config can produce (a test enumerates the configs that shape them).
IN_SERVER_CHECKS = (
    "resource-requests",
    "volcano-resource-requests",
    "node-name",
    "bindings",
    "podgroup-generation-id",
    "sidecar-host-network",
    "queue-resources",
)
# Every in-server mutation any config can produce.
IN_SERVER_MUTATIONS = (
    "default-requests",
    "volcano-default-requests",
    "node-name-rewrite",
    "sidecar-injection",
)
PLURALS = {
    MUTATING: "mutatingwebhookconfigurations",
    VALIDATING: "validatingwebhookconfigurations",
    POLICY: "validatingadmissionpolicies",
    BINDING: "validatingadmissionpolicybindings",
    MUTATING_POLICY: "mutatingadmissionpolicies",
    MUTATING_BINDING: "mutatingadmissionpolicybindings",
}


class Owned(NamedTuple):
    kind: str
    name: str


OWNED = (
    Owned(MUTATING, NAME),
    Owned(VALIDATING, NAME),
    *(Owned(kind, PREFIX + check) for check in IN_SERVER_CHECKS for kind in (POLICY, BINDING)),
    *(
        Owned(kind, PREFIX + mutation)
        for mutation in IN_SERVER_MUTATIONS
        for kind in (MUTATING_POLICY, MUTATING_BINDING)
    ),
)


def admission_objects(
    config: Config,
    namespace: str = "volcano-guard",
    service: str = "volcano-guard",
    *,
    served: PolicyApis = NEWEST,
) -> dict[Owned, dict[str, Any]]:
    """What config calls for, for the guard installed in namespace behind service, on a
    cluster that serves the in-server policy kinds `served` says. Where it serves none
    (Kubernetes before 1.30) the registrations judge alone and fail closed, as with
    `validatingAdmissionPolicies: false`; where it serves no MutatingAdmissionPolicy (or only
    the beta, and the config does not say it is on) the registrations keep the mutations."""
    import msgspec

    installed = installed_apis(config, served)
    config = msgspec.structs.replace(
        config,
        validatingAdmissionPolicies=installed.validating is not None,
        mutatingAdmissionPolicies=installed.mutating is not None,
    )
    objects = [
        *webhook_configurations(config, namespace, service, NAME),
        *admission_policies(config, namespace, installed.mutating or "v1"),
    ]
    found = {Owned(obj["kind"], obj["metadata"]["name"]): obj for obj in objects}
    unknown = set(found) - set(OWNED)
    if unknown:  # a new in-server check must be added to IN_SERVER_CHECKS (and the RBAC)
        raise ValueError(f"objects outside OWNED: {sorted(unknown)}")
    return found
