"""Policy nodeName: no pod reaches a Volcano-managed node around Volcano's accounting.

A pod created with `spec.nodeName` skips every scheduler; on a node Volcano manages it drives the
node's idle resources negative in Volcano's cache and crashes its scheduler. `action: deny`
refuses it; `action: rewrite` (in /mutate) turns the nodeName into a required node affinity
on `metadata.name`, ANDed into every existing term as the DaemonSet controller does, and hands
the pod to Volcano. The binding guard refuses `pods/binding` onto a managed node
by anyone but the configured Volcano scheduler identities.

Managed nodes are chosen as the Volcano scheduler's `--node-selector key:value` flags choose
them (volcano_guard.base.node_selectors): a node is managed if any selector matches one of its
labels; no selectors, every node.

One job a module: settings (its config section), nodes (the node cache's data and whether a
node may be named), exemptions (who may name a node anyway), decision (the webhook's answers),
messages (the denials' words), in_server (scopes, in-server checks, the in-server rewrite and
the node-states params protocol). Nothing outside this package imports those modules: what the
rest of the guard uses is here, in __all__:

- the registry (webhook.evaluation): POLICY, BINDING_POLICY;
- `check`: NAME, NODES, node_labels, unvouched_claim, with_settings (offline, every node
  counts as managed);
- the audit: NODES, node_labels, daemonset_owner, vouched_requester;
- the node-state publisher (webhook.node_states): settings, NODES, node_state,
  NODE_STATES_LABEL, NODE_STATES_NAMES, NODES_FROM, NODES_TO, NODES_PENDING;
- the config: NodeNameConfig (its section), and exempt_own_namespace, which the webhook
  command applies to the config it loads.
"""

from __future__ import annotations

from volcano_guard.webhook.policies.base import Policy
from volcano_guard.webhook.policies.node_name.decision import (
    BINDING,
    BINDING_NAME,
    NAME,
    mutate,
    validate,
    validate_binding,
)
from volcano_guard.webhook.policies.node_name.exemptions import (
    daemonset_owner,
    exempt_own_namespace,
    unvouched_claim,
    vouched_requester,
)
from volcano_guard.webhook.policies.node_name.in_server import (
    NODE_STATES_LABEL,
    NODE_STATES_NAMES,
    NODES_FROM,
    NODES_PENDING,
    NODES_TO,
    binding_in_server,
    binding_scopes,
    in_server,
    mutate_in_server,
    node_state,
    scopes,
)
from volcano_guard.webhook.policies.node_name.nodes import NODES, node_labels
from volcano_guard.webhook.policies.node_name.settings import (
    NodeNameConfig,
    settings,
    with_settings,
)
from volcano_guard.webhook.workloads import POD

__all__ = [
    "BINDING_POLICY",
    "NAME",
    "NODES",
    "NODES_FROM",
    "NODES_PENDING",
    "NODES_TO",
    "NODE_STATES_LABEL",
    "NODE_STATES_NAMES",
    "POLICY",
    "NodeNameConfig",
    "daemonset_owner",
    "exempt_own_namespace",
    "node_labels",
    "node_state",
    "settings",
    "unvouched_claim",
    "vouched_requester",
    "with_settings",
]

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
    in_server_mutations=mutate_in_server,
)
BINDING_POLICY = Policy(
    name=BINDING_NAME,
    mode=lambda config: settings(config).bindingGuard.mode,
    off="policies.nodeName.bindingGuard.mode: off",
    validate=validate_binding,
    kinds=frozenset({BINDING}),
    scopes=binding_scopes,
    watches=(NODES,),
    in_server=binding_in_server,
)
