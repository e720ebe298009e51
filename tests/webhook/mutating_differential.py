"""The two sides of the mutating differential tests: an object as the guard's webhook patches
it, and as the sandbox's MutatingAdmissionPolicy plugin (1.36) patches it with a policy's
InServerMutations. Either side answers the patched object, or a Refused with its message.

The mutations are rendered here as MutatingAdmissionPolicy objects the plain way (rules as
matchConstraints, the condition as the one matchCondition, failurePolicy Fail, params by the
label, parameterNotFoundAction Allow): what the tests compare is the expressions, whoever
renders them for `manifests`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from tests.webhook.test_admission_policies import NODE_LABELS, params_of, published_states
from volcano_guard.base.informer import static_snapshot
from volcano_guard.base.jsonpatch import apply_patch
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
from volcano_guard_sandbox.apiserver.admission import Record
from volcano_guard_sandbox.apiserver.matching import Attributes, User
from volcano_guard_sandbox.apiserver.mutating_admission import admit, policy_errors
from volcano_guard_sandbox.apiserver.mutating_policies import KUBERNETES_1_36
from volcano_guard_sandbox.apiserver.reinvocation import ReinvocationContext
from volcano_guard_sandbox.apiserver.store import ApiError

GUARD_NAMESPACE = "volcano-guard"
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


def rendered(mutation: InServerMutation) -> tuple[dict[str, Any], dict[str, Any]]:
    """The MutatingAdmissionPolicy and its binding for one InServerMutation."""
    name = f"volcano-guard-{mutation.name}"
    spec: dict[str, Any] = {
        "failurePolicy": "Fail",
        "reinvocationPolicy": "IfNeeded",
        "matchConstraints": {
            "resourceRules": [
                {
                    "apiGroups": [rule.api_group],
                    "apiVersions": [rule.api_version],
                    "resources": list(rule.resources),
                    "operations": list(rule.operations),
                }
                for rule in mutation.rules
            ]
        },
        "matchConditions": [{"name": "applies", "expression": mutation.condition}],
        "variables": [{"name": n, "expression": e} for n, e in mutation.variables],
        "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": mutation.json_patch}}],
    }
    binding: dict[str, Any] = {"policyName": name}
    if mutation.params_label:
        key, value = mutation.params_label
        spec["paramKind"] = {"apiVersion": "v1", "kind": "ConfigMap"}
        binding["paramRef"] = {
            "namespace": GUARD_NAMESPACE,
            "selector": {"matchLabels": {key: value}},
            "parameterNotFoundAction": "Allow",
        }
    api = "admissionregistration.k8s.io/v1"
    return (
        {
            "apiVersion": api,
            "kind": "MutatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": spec,
        },
        {
            "apiVersion": api,
            "kind": "MutatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": binding,
        },
    )


def compile_errors(mutations: Sequence[InServerMutation]) -> list[str]:
    """What the sandbox playing 1.36 refuses in the rendered policies when they are written."""
    return [
        error for m in mutations for error in policy_errors(rendered(m)[0]["spec"], KUBERNETES_1_36)
    ]


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
    objects = [o for m in mutations for o in rendered(m)]
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
