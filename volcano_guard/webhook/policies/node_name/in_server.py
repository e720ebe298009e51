"""The nodeName policy as the API server sees it: the scopes its registrations send (CEL
matchConditions), its in-server checks (ValidatingAdmissionPolicies), and the protocol of the
node states the webhook publishes for those checks when the API server cannot tell a node's
state alone (webhook.node_states writes them)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from volcano_guard.base.node_selectors import is_managed
from volcano_guard.webhook.cel import (
    DESCRIBED,
    Expr,
    all_of,
    concat,
    field_set,
    json_patch,
    kind_is,
    literal,
    negate,
    operation_is,
    string,
    user_in,
)
from volcano_guard.webhook.policies.base import (
    BINDINGS,
    MUTATE,
    VALIDATE,
    InServerCheck,
    InServerMutation,
    Rule,
    Scope,
    pods_rule,
)
from volcano_guard.webhook.policies.node_name.decision import BINDING, REQUIRED
from volcano_guard.webhook.policies.node_name.exemptions import not_exempt
from volcano_guard.webhook.policies.node_name.messages import (
    ANONYMOUS,
    binding_message_parts,
    message_parts,
)
from volcano_guard.webhook.policies.node_name.settings import (
    NodeNameConfig,
    first_scheduler,
    settings,
)
from volcano_guard.webhook.workloads import POD

if TYPE_CHECKING:  # config.py gathers the policies' sections: at run time, it imports this
    from volcano_guard.webhook.config import Config

# The params of the in-server checks when the API server cannot tell a node's state alone:
# ConfigMaps in the guard's namespace labelled NODE_STATES_LABEL, each holding node name ->
# MANAGED or UNMANAGED for every node the guard knows whose name lies in [its NODES_FROM
# annotation, its NODES_TO annotation) ("" : unbounded), kept by webhook.node_states. One
# annotated NODES_PENDING refuses every name it holds (the first, while the rest are written).
NODE_STATES_LABEL = ("volcano-guard.io/params", "node-states")
NODES_FROM, NODES_TO = "volcano-guard.io/nodes-from", "volcano-guard.io/nodes-to"
NODES_PENDING = "volcano-guard.io/nodes-pending"
MANAGED, UNMANAGED = "managed", "unmanaged"
# The names the params take, fixed in advance so that the reconciler's Role names every one it
# may write (32 ranges hold some 400,000 nodes); a labelled ConfigMap of another name was not
# made by the guard and is never read as a range (docs/decisions/registrations.md, "Node-state
# params only the guard makes").
NODE_STATES_NAMES = tuple(f"volcano-guard-node-states-{index}" for index in range(32))


def needs_node_states(config: NodeNameConfig) -> bool:
    """Whether the in-server checks need the published node states: unless every node a pod
    can name is refused (no managedNodeSelectors: every node is managed; unknownNodes: deny)."""
    return bool(config.managed_selectors) or config.unknownNodes != "deny"


def node_state(labels: Mapping[str, str], config: NodeNameConfig) -> str:
    return MANAGED if is_managed(labels, config.managed_selectors) else UNMANAGED


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


def binding_scopes(config: Config) -> tuple[Scope, ...]:
    """Bindings (pods/binding or the bindings resource) by anyone but the allowed binders."""
    binders = settings(config).bindingGuard.allowedBinders
    condition = all_of(kind_is(*BINDING), operation_is("CREATE"), negate(user_in(binders, ())))
    rules = (Rule("", "v1", ("pods/binding", "bindings"), ("CREATE",)),)
    return (Scope(BINDINGS, rules, condition),)


def _named_node_not_exempt(config: NodeNameConfig) -> str:
    """CEL: a pod CREATE naming a node, by a requester exemption() does not exempt."""
    return all_of(
        kind_is(*POD),
        operation_is("CREATE"),
        field_set("object.spec.nodeName"),
        *not_exempt(config),
    )


def in_server(config: Config) -> tuple[InServerCheck, ...]:
    """Pods naming a node the webhook refuses, decided by the API server."""
    node_name = settings(config)

    def message(reason: str) -> str:
        return concat(
            *message_parts(DESCRIBED, Expr("variables.node"), reason, first_scheduler(config))
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


def mutate_in_server(config: Config) -> tuple[InServerMutation, ...]:
    """`action: rewrite` in the API server: a pod CREATE naming a node the in-server check would
    refuse (the same variables, so a pod is rewritten exactly when it would be refused, as the
    webhook rewrites exactly what it would deny) loses its nodeName for a required node affinity
    on metadata.name and the first Volcano scheduler. With the node states published as params,
    each params object rewrites only the names in its range; none yet, and nothing is rewritten
    (parameterNotFoundAction Allow, as for the check).

    The webhook adds the whole affinity it builds (pin_to_node); CEL cannot copy an object with
    one field changed, so the patch adds the first of affinity, nodeAffinity and its required
    selector that is missing, or replaces the selector's terms: the same object, as the
    differential test holds it (a typed pod carries no field outside these types' schemas)."""
    node_name = settings(config)
    if node_name.action != "rewrite":
        return ()
    rewrite = _rewrite(first_scheduler(config))
    if needs_node_states(node_name):
        variables = _state_variables("object.spec.nodeName")
        patch = f"!({_allowed(node_name)}) ? {rewrite} : []"
        label: tuple[str, str] | None = NODE_STATES_LABEL
    else:  # every node a pod may name is refused
        variables, patch, label = (("node", "object.spec.nodeName"),), rewrite, None
    return (
        InServerMutation(
            "node-name-rewrite",
            (pods_rule("CREATE"),),
            _named_node_not_exempt(node_name),
            patch,
            variables,
            label,
        ),
    )


# pin_to_node's requirement and term, every map value dyn: Kubernetes refuses a literal whose
# values differ in type (HomogeneousAggregateLiterals; literal() makes them dyn), and the terms
# it keeps are typed.
_REQUIREMENT = literal(
    {"key": "metadata.name", "operator": "In", "values": [Expr("variables.node")]}
)
_TERM = f"{{'matchFields': dyn([{_REQUIREMENT}])}}"


def _kept_term(term: str) -> str:
    """CEL: the node selector term `term` keeps, its matchExpressions and the requirement."""
    return literal(
        {"matchExpressions": Expr(f"{term}.matchExpressions"), "matchFields": [Expr(_REQUIREMENT)]}
    )


def _rewrite(scheduler: str) -> str:
    """CEL: the JSONPatch list moving variables.node into the pod's affinity (pin_to_node)."""
    affinity = "object.spec.affinity"
    node_affinity = f"{affinity}.nodeAffinity"
    required = f"{node_affinity}.{REQUIRED}"
    terms = f"{required}.nodeSelectorTerms"
    kept_terms = (
        f"{{'nodeSelectorTerms': has({required}) && has({terms}) && size({terms}) > 0 ? "
        f"{terms}.map(t, has(t.matchExpressions) ? {_kept_term('t')} : {_TERM}) : "
        f"[{_TERM}]}}"
    )
    new_selector = f"{{'nodeSelectorTerms': [{_TERM}]}}"
    under_node_affinity = f"{{{string(REQUIRED)}: {new_selector}}}"
    under_affinity = f"{{'nodeAffinity': {under_node_affinity}}}"
    pinned = (
        f"!has({affinity}) ? {json_patch('add', string('/spec/affinity'), under_affinity)} : "
        f"!has({node_affinity}) ? "
        f"{json_patch('add', string('/spec/affinity/nodeAffinity'), under_node_affinity)} : "
        f"{json_patch('add', string(f'/spec/affinity/nodeAffinity/{REQUIRED}'), kept_terms)}"
    )
    return (
        f"[{json_patch('remove', string('/spec/nodeName'))}, {pinned}, "
        f"{json_patch('add', string('/spec/schedulerName'), string(scheduler))}]"
    )


def binding_in_server(config: Config) -> tuple[InServerCheck, ...]:
    """Bindings by anyone but the allowed binders onto a node the webhook refuses, decided by
    the API server (as in_server decides pods)."""
    node_name = settings(config)
    (scope,) = binding_scopes(config)
    node = "has(object.target) && has(object.target.name) ? object.target.name : ''"

    def message(reason: str) -> str:
        return concat(
            *binding_message_parts(
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

    variables = _state_variables(node)
    refusal = (
        f"variables.nodeState == {string(MANAGED)} ? ({message('managed')}) : "
        f"variables.nodeState == 'pending' ? ({message('pending')}) : "
        f"({message('unknown')})"
    )
    return InServerCheck(
        name, rules, condition, ((_allowed(config), refusal),), variables, NODE_STATES_LABEL
    )


def _state_variables(node: str) -> tuple[tuple[str, str], ...]:
    """The variables giving the node `node` (CEL) names and its state in one params object:
    inRange when that object judges the name, nodeState its verdict ('managed', 'unmanaged',
    'pending' or 'unknown')."""

    def annotation(key: str) -> str:
        return (
            f"has(params.metadata.annotations) && {string(key)} in "
            f"params.metadata.annotations ? params.metadata.annotations[{string(key)}] : ''"
        )

    return (
        ("node", node),
        ("statesFrom", annotation(NODES_FROM)),
        ("statesTo", annotation(NODES_TO)),
        (
            "ours",
            f"params.metadata.name in [{', '.join(string(n) for n in NODE_STATES_NAMES)}]",
        ),
        (
            "inRange",
            "variables.ours && variables.node >= variables.statesFrom && "
            "(variables.statesTo == '' || variables.node < variables.statesTo)",
        ),
        (
            "nodeState",
            f"has(params.metadata.annotations) && {string(NODES_PENDING)} in "
            "params.metadata.annotations ? 'pending' : has(params.data) && "
            "variables.node in params.data ? params.data[variables.node] : 'unknown'",
        ),
    )


def _allowed(config: NodeNameConfig) -> str:
    """CEL over _state_variables: this params object lets the node be named."""
    allowed = [
        "variables.node == ''",
        "!variables.inRange",
        f"variables.nodeState == {string(UNMANAGED)}",
    ]
    if config.unknownNodes == "allow":
        allowed.append("variables.nodeState == 'unknown'")
    return " || ".join(allowed)
