"""The nodeName policy's webhook decisions: /validate denies a pod CREATE naming a node it may
not name, /mutate (action: rewrite) turns that nodeName into a required node affinity, and the
binding guard refuses a Binding onto such a node by anyone but the allowed binders."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from volcano_guard.base import jsonpatch
from volcano_guard.base.jsonbody import object_at
from volcano_guard.webhook.policies.base import NOTHING_FOUND, PolicyContext, Verdict
from volcano_guard.webhook.policies.node_name.exemptions import exemption
from volcano_guard.webhook.policies.node_name.messages import (
    ANONYMOUS,
    binding_message_parts,
    message_parts,
)
from volcano_guard.webhook.policies.node_name.nodes import node_decision
from volcano_guard.webhook.policies.node_name.settings import first_scheduler, settings
from volcano_guard.webhook.review import AdmissionRequest
from volcano_guard.webhook.workloads import POD

if TYPE_CHECKING:  # config.py gathers the policies' sections: at run time, it imports this
    from volcano_guard.webhook.config import Config

NAME = "nodeName"
BINDING_NAME = "bindingGuard"
BINDING = ("", "Binding")  # the kind of both pods/binding and the bindings resource
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def validate(request: AdmissionRequest, context: PolicyContext) -> Verdict | None:
    node = _bound_node(request, context)
    if node is None:
        return None
    reason = node_decision(node, context)
    if reason is None:
        return NOTHING_FOUND
    return Verdict(violations=(_message(request, node, reason, context.config),))


def mutate(request: AdmissionRequest, context: PolicyContext) -> Verdict | None:
    if settings(context.config).action != "rewrite":
        return None
    node = _bound_node(request, context)
    if node is None or node_decision(node, context) is None:
        return None if node is None else NOTHING_FOUND
    spec = request.object["spec"] if request.object else {}
    scheduler = first_scheduler(context.config)
    patch = (
        jsonpatch.remove("/spec/nodeName"),
        jsonpatch.add("/spec/affinity", pin_to_node(spec.get("affinity"), node)),
        jsonpatch.add("/spec/schedulerName", scheduler),
    )
    change = (
        f'move {request.describe()} from spec.nodeName "{node}" to a required node '
        f'affinity on metadata.name and schedulerName "{scheduler}"'
    )
    return Verdict(patch=patch, changes=(change,))


def validate_binding(request: AdmissionRequest, context: PolicyContext) -> Verdict | None:
    """pods/binding CREATE: only the configured binders may bind onto a managed node."""
    if request.operation != "CREATE" or not _is_binding(request):
        return None
    target = (request.object or {}).get("target")
    node = target.get("name") if isinstance(target, dict) else None
    if not isinstance(node, str) or not node:
        return None
    binder = request.user.username
    if binder in settings(context.config).bindingGuard.allowedBinders:
        return NOTHING_FOUND
    reason = node_decision(node, context)
    if reason is None:
        return NOTHING_FOUND
    pod = f"{request.namespace}/{request.name}" if request.namespace else request.name
    return Verdict(
        violations=(
            "".join(
                binding_message_parts(
                    binder or ANONYMOUS, pod, node, reason, settings(context.config)
                )
            ),
        )
    )


def pin_to_node(affinity: Any, node: str) -> dict[str, Any]:
    """affinity with `metadata.name In [node]` required, ANDed into every nodeSelectorTerm
    (a new single term when there is none), as the DaemonSet controller pins its pods. Copies
    only the objects on the way to the terms: the rest is shared with the input, never walked
    (it may nest as deep as the parser allows)."""
    result = dict(affinity) if isinstance(affinity, dict) else {}
    node_affinity = dict(object_at(result, "nodeAffinity"))
    required = dict(object_at(node_affinity, REQUIRED))
    listed = required.get("nodeSelectorTerms")
    listed = listed if isinstance(listed, list) else []
    terms = [dict(t) if isinstance(t, dict) else {} for t in listed]
    requirement = {"key": "metadata.name", "operator": "In", "values": [node]}
    if not terms:
        terms = [{"matchFields": [requirement]}]
    for term in terms:
        # metadata.name is the only field matchFields supports, so ours replaces any other.
        term["matchFields"] = [requirement]
    required["nodeSelectorTerms"] = terms
    node_affinity[REQUIRED] = required
    result["nodeAffinity"] = node_affinity
    return result


def _bound_node(request: AdmissionRequest, context: PolicyContext) -> str | None:
    """The node a pod CREATE names, unless the pod or its creator is exempt."""
    pod = request.created(*POD)
    if pod is None:
        return None
    spec = pod.get("spec")
    node = spec.get("nodeName") if isinstance(spec, dict) else None
    if (
        not isinstance(node, str)
        or not node
        or exemption(pod, request.user, request.namespace, settings(context.config))
    ):
        return None
    return node


def _is_binding(request: AdmissionRequest) -> bool:
    """A core Binding, sent as the pods/binding subresource or the bindings resource."""
    if (request.kind.group, request.kind.kind) != BINDING:
        return False
    resource = request.resource.resource
    return resource == "bindings" or (resource == "pods" and request.sub_resource == "binding")


def _message(request: AdmissionRequest, node: str, reason: str, config: Config) -> str:
    return "".join(message_parts((request.describe(),), node, reason, first_scheduler(config)))
