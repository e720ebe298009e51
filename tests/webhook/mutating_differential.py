"""The two sides of the mutating differential tests: an object as the guard's webhook patches
it, and as the sandbox's MutatingAdmissionPolicy plugin (1.36) patches it with a policy's
InServerMutations, rendered as `manifests` prints them (admission_policies.mutating_policies).
Either side answers the patched object, or a Refused with its message."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from tests.webhook.test_admission_policies import NODE_LABELS, params_of, published_states
from volcano_guard.base.informer import static_snapshot
from volcano_guard.base.jsonpatch import apply_patch
from volcano_guard.webhook.admission_policies import PREFIX, mutating_policies
from volcano_guard.webhook.config import Config
from volcano_guard.webhook.evaluation import enabled_checks, evaluate
from volcano_guard.webhook.policies.base import InServerMutation, Policy, PolicyContext
from volcano_guard.webhook.policies.node_name import NODES
from volcano_guard.webhook.review import (
    AdmissionRequest,
    GroupVersionKind,
    GroupVersionResource,
    UserInfo,
)
from volcano_guard_sandbox.apiserver import cel_eval, policy_validation
from volcano_guard_sandbox.apiserver import mutating_policies as mutating_policies_sandbox
from volcano_guard_sandbox.apiserver.admission import Record
from volcano_guard_sandbox.apiserver.matching import Attributes, User
from volcano_guard_sandbox.apiserver.mutating_admission import admit, policy_errors
from volcano_guard_sandbox.apiserver.mutating_policies import KUBERNETES_1_36
from volcano_guard_sandbox.apiserver.reinvocation import ReinvocationContext
from volcano_guard_sandbox.apiserver.store import ApiError

GUARD_NAMESPACE = "volcano-guard"  # where the rendered policies read their params
# kind -> (API group, version, resource) of a write of it.
SENT_AS = {
    "Pod": ("", "v1", "pods"),
    "Job": ("batch.volcano.sh", "v1alpha1", "jobs"),
    "CronJob": ("batch.volcano.sh", "v1alpha1", "cronjobs"),
    "JobTemplate": ("flow.volcano.sh", "v1alpha1", "jobtemplates"),
}
Operation = Literal["CREATE", "UPDATE"]
ALICE = ("alice", ("system:authenticated",))


@dataclass(frozen=True)
class Refused:
    """The request was refused: the webhook's denial or the API server's error."""

    message: str


def rendered(config: Config, mutations: Sequence[InServerMutation]) -> list[dict[str, Any]]:
    """The MutatingAdmissionPolicies and bindings `manifests` prints for these mutations."""
    names = {PREFIX + m.name for m in mutations}
    return [o for o in mutating_policies(config, GUARD_NAMESPACE) if o["metadata"]["name"] in names]


def compile_errors(config: Config, mutations: Sequence[InServerMutation]) -> list[str]:
    """What the sandbox playing 1.36 refuses in the rendered policies when they are written."""
    policies = [o for o in rendered(config, mutations) if o["kind"].endswith("Policy")]
    assert len(policies) == len(mutations)
    return [error for p in policies for error in policy_errors(p["spec"], KUBERNETES_1_36)]


def uncosted(mutations: Sequence[InServerMutation]) -> list[str]:
    """The expressions of these mutations the sandbox cannot cost as cel-go does (it would run
    them on cel-cpp, which counts no cost and stops at 10,000 iterations)."""
    patch_program = mutating_policies_sandbox._compiled_in(KUBERNETES_1_36)
    found = []
    for mutation in mutations:
        plain = [mutation.condition, *(expression for _, expression in mutation.variables)]
        found += [e for e in plain if cel_eval.plan_of(policy_validation.program, e) is None]
        if mutating_policies_sandbox._plan(patch_program, mutation.json_patch) is None:
            found.append(mutation.json_patch)
    return found


def webhook_side(
    policy: Policy,
    config: Config,
    obj: dict[str, Any],
    user: tuple[str, tuple[str, ...]] = ALICE,
    operation: Operation = "CREATE",
    labels: Mapping[str, Mapping[str, str]] = NODE_LABELS,
) -> dict[str, Any] | Refused:
    """obj as the webhook's /mutate of this one policy leaves it, every node of labels known."""
    group, version, resource = SENT_AS[obj["kind"]]
    request = AdmissionRequest(
        uid="u",
        kind=GroupVersionKind(group, version, obj["kind"]),
        resource=GroupVersionResource(group, version, resource),
        operation=operation,
        namespace=obj["metadata"]["namespace"],
        name=obj["metadata"]["name"],
        user=UserInfo(*user),
        object=obj,
    )
    context = PolicyContext(config, {NODES: static_snapshot(labels)})
    checks = enabled_checks("mutate", config, [policy])
    decision = evaluate("mutate", request, context, checks).decision
    if not decision.allowed:
        return Refused(decision.message)
    return apply_patch(obj, list(decision.patch)) if decision.patch else obj


def policy_side(
    mutations: Sequence[InServerMutation],
    config: Config,
    obj: dict[str, Any],
    user: tuple[str, tuple[str, ...]] = ALICE,
    operation: Operation = "CREATE",
    params: list[dict[str, Any]] | None = None,
) -> dict[str, Any] | Refused:
    """obj as the sandbox's MutatingAdmissionPolicy plugin leaves it with these mutations
    installed, the node states published for NODE_LABELS (or these ConfigMaps) as params."""
    group, version, resource = SENT_AS[obj["kind"]]
    objects = rendered(config, mutations)
    attributes = Attributes(
        operation=operation,
        group=group,
        version=version,
        resource=resource,
        kind=(group, version, obj["kind"]),
        namespace=obj["metadata"]["namespace"],
        name=obj["metadata"]["name"],
        user=User(user[0], "", user[1]),
        object=obj,
        old_object=obj if operation == "UPDATE" else None,
        namespace_labels={"kubernetes.io/metadata.name": obj["metadata"]["namespace"]},
    )
    try:
        patched = admit(
            attributes,
            [o for o in objects if o["kind"].endswith("Policy")],
            [o for o in objects if o["kind"].endswith("Binding")],
            params_of(published_states(config) if params is None else params),
            None,
            Record(),
            KUBERNETES_1_36,
            ReinvocationContext(),
        )
    except ApiError as exc:
        return Refused(exc.message)
    assert patched is not None
    return patched
