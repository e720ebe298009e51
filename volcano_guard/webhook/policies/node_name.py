"""Policy nodeName: no pod reaches a Volcano-managed node around Volcano's accounting.

A pod created with `spec.nodeName` skips every scheduler; on a node Volcano manages it drives the
node's idle resources negative in Volcano's cache and crashes its scheduler. `action: deny`
refuses it; `action: rewrite` (in /mutate) turns the nodeName into a required node affinity
on `metadata.name`, ANDed into every existing term as the DaemonSet controller does, and hands
the pod to Volcano. The binding guard refuses `pods/binding` onto a managed node
by anyone but the configured Volcano scheduler identities.

A pod may name a managed node only when its requester vouches for it (static_pod_of_its_node,
daemonset_pod_of_its_controller): the fields that mark a mirror or DaemonSet pod are written by
whoever creates the pod, so only who creates it decides, as NodeRestriction decides for nodes.

Managed nodes are chosen as the Volcano scheduler's `--node-selector key:value` flags choose
them (volcano_guard.base.node_selectors): a node is managed if any selector matches one of its
labels; no selectors, every node.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from volcano_guard.base import jsonpatch
from volcano_guard.base.jsonbody import object_at
from volcano_guard.base.node_selectors import is_managed
from volcano_guard.webhook.cel import (
    DESCRIBED,
    Expr,
    all_of,
    concat,
    field_set,
    kind_is,
    namespace_in,
    negate,
    operation_is,
    string,
    user_in,
)
from volcano_guard.webhook.config import Config, NodeNameConfig
from volcano_guard.webhook.policies.base import (
    BINDINGS,
    MUTATE,
    NOTHING_FOUND,
    VALIDATE,
    InServerCheck,
    Policy,
    PolicyContext,
    Rule,
    Scope,
    Verdict,
    WatchedList,
    pods_rule,
)
from volcano_guard.webhook.review import AdmissionRequest, UserInfo
from volcano_guard.webhook.workloads import POD

NAME = "nodeName"
BINDING_NAME = "bindingGuard"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
# A kubelet's identity (the Node authorizer's): user system:node:<node> in group system:nodes.
NODES_GROUP, NODE_USER_PREFIX = "system:nodes", "system:node:"
ANONYMOUS = "an anonymous user"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def settings(config: Config) -> NodeNameConfig:
    return config.policies.nodeName


def node_labels(node: dict[str, Any]) -> Mapping[str, str]:
    """What the policy keeps of a node: its labels (a few hundred bytes)."""
    metadata = node.get("metadata")
    labels = metadata.get("labels") if isinstance(metadata, dict) else None
    return MappingProxyType(
        {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}
    )


NODES = WatchedList("nodes", "Node", node_labels)


def node_decision(node: str, context: PolicyContext) -> str | None:
    """Why the pod may not go to node ('managed', 'unknown', 'not synced'), or None."""
    config = settings(context.config)
    nodes = context.snapshot(NODES)
    if nodes is None or not nodes.synced:
        return "not synced" if context.config.failClosed else None
    labels = nodes.items.get(node)
    if labels is None:
        return "unknown" if config.unknownNodes == "deny" else None
    return "managed" if is_managed(labels, config.managed_selectors) else None


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
                _binding_message_parts(
                    binder or ANONYMOUS, pod, node, reason, settings(context.config)
                )
            ),
        )
    )


def _binding_message_parts(
    binder: str, pod: str, node: str, reason: str, config: NodeNameConfig
) -> tuple[str, ...]:
    """The binding denial's words; binder, pod and node may be CEL Exprs."""
    allowed = ", ".join(config.bindingGuard.allowedBinders)
    return (
        binder,
        ' may not bind pod "',
        pod,
        '" to node "',
        node,
        f'": {_reason_text(reason)}; only {allowed} may bind there (add the binder to '
        "policies.nodeName.bindingGuard.allowedBinders if it is a Volcano scheduler)",
    )


def binding_in_server(config: Config) -> tuple[InServerCheck, ...]:
    """Bindings by anyone but the allowed binders onto a node the webhook refuses, decided by
    the API server (as in_server decides pods)."""
    node_name = settings(config)
    (scope,) = binding_scopes(config)
    node = "has(object.target) && has(object.target.name) ? object.target.name : ''"

    def message(reason: str) -> str:
        return concat(
            *_binding_message_parts(
                Expr(
                    f"request.userInfo.username != '' ? request.userInfo.username : "
                    f"{string(ANONYMOUS)}"
                ),
                Expr("request.namespace + '/' + request.name"),
                Expr("variables.node"),
                reason,
                node_name,
            )
        )

    return (_in_server_check("bindings", scope.rules, scope.condition, node, message, node_name),)


def scopes(config: Config) -> tuple[Scope, ...]:
    """Pod CREATEs naming a node, but for the exempt (as exemption decides). Which nodes are
    managed is not known to the API server: every such pod is sent."""
    node_name = settings(config)
    condition = _named_node_not_exempt(node_name)
    rules = (pods_rule("CREATE"),)
    validating = Scope(VALIDATE, rules, condition)
    return (
        (Scope(MUTATE, rules, condition), validating)
        if node_name.action == "rewrite"
        else (validating,)
    )


def _named_node_not_exempt(config: NodeNameConfig) -> str:
    """CEL: a pod CREATE naming a node, by a requester exemption() does not exempt."""
    return all_of(
        kind_is(*POD),
        operation_is("CREATE"),
        field_set("object.spec.nodeName"),
        negate(namespace_in(config.exemptNamespaces)),
        negate(user_in(config.exemptUsers, config.exemptGroups)),
        negate(_STATIC_POD_OF_ITS_NODE),
        negate(_daemonset_pod_of_its_controller(config) if config.allowDaemonSets else ""),
    )


def in_server(config: Config) -> tuple[InServerCheck, ...]:
    """Pods naming a node the webhook refuses, decided by the API server."""
    node_name = settings(config)

    def message(reason: str) -> str:
        return concat(
            *_message_parts(DESCRIBED, Expr("variables.node"), reason, first_scheduler(config))
        )

    return (
        _in_server_check(
            "node-name",
            (pods_rule("CREATE"),),
            _named_node_not_exempt(node_name),
            "object.spec.nodeName",
            message,
            node_name,
        ),
    )


# The params of the in-server checks when the API server cannot tell a node's state alone:
# ConfigMaps in the guard's namespace labelled NODE_STATES_LABEL, each holding node name ->
# MANAGED or UNMANAGED for every node the guard knows whose name lies in [its NODES_FROM
# annotation, its NODES_TO annotation) ("" : unbounded), kept by webhook.node_states. One
# annotated NODES_PENDING refuses every name it holds (the first, while the rest are written).
NODE_STATES_LABEL = ("volcano-guard.io/params", "node-states")
NODES_FROM, NODES_TO = "volcano-guard.io/nodes-from", "volcano-guard.io/nodes-to"
NODES_PENDING = "volcano-guard.io/nodes-pending"
MANAGED, UNMANAGED = "managed", "unmanaged"


def needs_node_states(config: NodeNameConfig) -> bool:
    """Whether the in-server checks need the published node states: unless every node a pod
    can name is refused (no managedNodeSelectors: every node is managed; unknownNodes: deny)."""
    return bool(config.managed_selectors) or config.unknownNodes != "deny"


def node_state(labels: Mapping[str, str], config: NodeNameConfig) -> str:
    return MANAGED if is_managed(labels, config.managed_selectors) else UNMANAGED


def _in_server_check(
    name: str,
    rules: tuple[Rule, ...],
    condition: str,
    node: str,
    message: Callable[[str], str],
    config: NodeNameConfig,
) -> InServerCheck:
    """A check refusing what node_decision refuses of the node `node` (CEL) names, worded by
    message(reason); "" (no node) is allowed. Each params object judges only the names in
    its range, so the states can be spread over as many ConfigMaps as they need."""
    if not needs_node_states(config):
        return InServerCheck(
            name,
            rules,
            condition,
            (("variables.node == ''", message("managed")),),
            (("node", node),),
        )

    def annotation(key: str) -> str:
        return (
            f"has(params.metadata.annotations) && {string(key)} in "
            f"params.metadata.annotations ? params.metadata.annotations[{string(key)}] : ''"
        )

    variables = (
        ("node", node),
        ("statesFrom", annotation(NODES_FROM)),
        ("statesTo", annotation(NODES_TO)),
        (
            "inRange",
            "variables.node >= variables.statesFrom && (variables.statesTo == '' || "
            "variables.node < variables.statesTo)",
        ),
        (
            "nodeState",
            f"has(params.metadata.annotations) && {string(NODES_PENDING)} in "
            "params.metadata.annotations ? 'pending' : has(params.data) && "
            "variables.node in params.data ? params.data[variables.node] : 'unknown'",
        ),
    )
    allowed = [
        "variables.node == ''",
        "!variables.inRange",
        f"variables.nodeState == {string(UNMANAGED)}",
    ]
    if config.unknownNodes == "allow":
        allowed.append("variables.nodeState == 'unknown'")
    refusal = (
        f"variables.nodeState == {string(MANAGED)} ? ({message('managed')}) : "
        f"variables.nodeState == 'pending' ? ({message('pending')}) : "
        f"({message('unknown')})"
    )
    return InServerCheck(
        name, rules, condition, ((" || ".join(allowed), refusal),), variables, NODE_STATES_LABEL
    )


def first_scheduler(config: Config) -> str:
    return config.volcanoSchedulerNames[0]


def binding_scopes(config: Config) -> tuple[Scope, ...]:
    """Bindings (pods/binding or the bindings resource) by anyone but the allowed binders."""
    binders = settings(config).bindingGuard.allowedBinders
    condition = all_of(kind_is(*_BINDING), operation_is("CREATE"), negate(user_in(binders, ())))
    rules = (Rule("", "v1", ("pods/binding", "bindings"), ("CREATE",)),)
    return (Scope(BINDINGS, rules, condition),)


POLICY = Policy(
    name=NAME,
    mode=lambda config: settings(config).mode,
    off="policies.nodeName.mode: off",
    mutate=mutate,
    validate=validate,
    kinds=frozenset({POD}),
    scopes=scopes,
    watches=(NODES,),
    in_server=in_server,
)
_BINDING = ("", "Binding")  # the kind of both pods/binding and the bindings resource
BINDING_POLICY = Policy(
    name=BINDING_NAME,
    mode=lambda config: settings(config).bindingGuard.mode,
    off="policies.nodeName.bindingGuard.mode: off",
    validate=validate_binding,
    kinds=frozenset({_BINDING}),
    scopes=binding_scopes,
    watches=(NODES,),
    in_server=binding_in_server,
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


def exemption(
    pod: dict[str, Any], user: UserInfo, namespace: str, config: NodeNameConfig
) -> str | None:
    """Why a pod CREATE by user may name its node ('static pod', 'DaemonSet pod', 'namespace',
    'user'), or None. The one rule; scopes() holds it in CEL, and the audit and `check` ask it
    with the requester the cluster (or nothing) vouches for."""
    if static_pod_of_its_node(pod, user):
        return "static pod"
    if config.allowDaemonSets and daemonset_pod_of_its_controller(pod, user, config):
        return "DaemonSet pod"
    if namespace in config.exemptNamespaces:
        return "namespace"
    if user.username in config.exemptUsers or set(user.groups) & set(config.exemptGroups):
        return "user"
    return None


def static_pod_of_its_node(pod: dict[str, Any], user: UserInfo) -> bool:
    """A mirror pod created by the kubelet of the node it names: NodeRestriction lets a node
    create nothing else, and the annotation alone anyone may write."""
    annotations = object_at(pod, "metadata").get("annotations")
    return (
        isinstance(annotations, dict)
        and MIRROR_ANNOTATION in annotations
        and NODES_GROUP in user.groups
        and user.username == NODE_USER_PREFIX + str(object_at(pod, "spec").get("nodeName"))
    )


def daemonset_pod_of_its_controller(
    pod: dict[str, Any], user: UserInfo, config: NodeNameConfig
) -> bool:
    """A pod created by the DaemonSet controller, controlled by an apps/v1 DaemonSet."""
    return user.username in config.daemonSetControllers and daemonset_owner(pod) is not None


def daemonset_owner(pod: dict[str, Any]) -> dict[str, Any] | None:
    """The pod's controlling apps/v1 DaemonSet owner reference, if it names one."""
    owners = object_at(pod, "metadata").get("ownerReferences")
    for owner in owners if isinstance(owners, list) else ():
        if (
            isinstance(owner, dict)
            and owner.get("apiVersion") == "apps/v1"
            and owner.get("kind") == "DaemonSet"
            and owner.get("controller") is True
        ):
            return owner
    return None


def unvouched_claim(pod: dict[str, Any], config: NodeNameConfig) -> str | None:
    """What the pod claims to be that only its requester can confirm, said for a reader who
    cannot see the requester (`check`); None when it claims nothing."""
    annotations = object_at(pod, "metadata").get("annotations")
    if isinstance(annotations, dict) and MIRROR_ANNOTATION in annotations:
        node = object_at(pod, "spec").get("nodeName")
        return (
            f"it is a mirror pod, exempt only when created by node {node}'s kubelet "
            f"(user {NODE_USER_PREFIX}{node} in {NODES_GROUP}), which cannot be judged "
            "offline"
        )
    if config.allowDaemonSets and daemonset_owner(pod) is not None:
        controllers = ", ".join(config.daemonSetControllers) or "no one (daemonSetControllers)"
        return (
            f"it names a DaemonSet owner, exempt only when created by {controllers}, "
            "which cannot be judged offline"
        )
    return None


_STATIC_POD_OF_ITS_NODE = (
    f"has(object.metadata.annotations) && {string(MIRROR_ANNOTATION)} in "
    f"object.metadata.annotations && has(request.userInfo.groups) && "
    f"{string(NODES_GROUP)} in request.userInfo.groups && "
    f"request.userInfo.username == {string(NODE_USER_PREFIX)} + object.spec.nodeName"
)


def _daemonset_pod_of_its_controller(config: NodeNameConfig) -> str:
    return (
        all_of(
            user_in(config.daemonSetControllers, ()),
            "has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists(o, "
            "has(o.apiVersion) && o.apiVersion == 'apps/v1' && o.kind == 'DaemonSet' && "
            "has(o.controller) && o.controller == true)",
        )
        if config.daemonSetControllers
        else "false"
    )


def _is_binding(request: AdmissionRequest) -> bool:
    """A core Binding, sent as the pods/binding subresource or the bindings resource."""
    if (request.kind.group, request.kind.kind) != _BINDING:
        return False
    resource = request.resource.resource
    return resource == "bindings" or (resource == "pods" and request.sub_resource == "binding")


def _reason_text(reason: str) -> str:
    return {
        "managed": "the node is managed by the Volcano scheduler",
        "unknown": "the node is not known to volcano-guard (policies.nodeName.unknownNodes: deny)",
        "not synced": "volcano-guard's node cache is not synced (starting up, or the API server "
        "is unreachable; failClosed: true)",
        "pending": "volcano-guard has not finished publishing node states for the API server "
        "(starting up)",
    }[reason]


def _message(request: AdmissionRequest, node: str, reason: str, config: Config) -> str:
    return "".join(_message_parts((request.describe(),), node, reason, first_scheduler(config)))


def _message_parts(
    subject: tuple[str, ...], node: str, reason: str, scheduler: str
) -> tuple[str, ...]:
    """The denial's words; subject and node may be CEL Exprs (the in-server check's)."""
    return (
        *subject,
        ' sets spec.nodeName "',
        node,
        f'": {_reason_text(reason)}, and a pod '
        "bound directly bypasses Volcano's resource accounting. Remove spec.nodeName; to "
        'run on that node use nodeSelector kubernetes.io/hostname: "',
        node,
        f'" or a required node affinity, with schedulerName "{scheduler}"',
    )
