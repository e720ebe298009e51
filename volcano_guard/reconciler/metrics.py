"""The reconciler's metrics (prefix volcano_guard_reconciler_)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

from volcano_guard.base.metrics import PREFIX, REGISTRY

P = PREFIX + "reconciler_"
LEADING = Gauge(P + "leading", "1 while this replica holds the Lease", registry=REGISTRY)
CONFIG_VALID = Gauge(
    P + "config_valid",
    "1 while the config ConfigMap holds a config that parses; 0 while the last good one holds",
    registry=REGISTRY,
)
CONFIG_REJECTED = Counter(
    P + "config_rejected",
    "Config changes refused (the last good config stayed in force)",
    registry=REGISTRY,
)
PAUSED = Gauge(
    P + "paused",
    "1 while the config ConfigMap's volcano-guard.io/reconcile annotation says paused",
    registry=REGISTRY,
)
WRITES = Counter(
    P + "writes",
    "Owned objects written, by kind and why: config (the config changed), drift (someone "
    "else changed it), missing (deleted, re-created) or unused (deleted: the config needs none)",
    ["kind", "reason"],
    registry=REGISTRY,
)
DRIFT = Counter(
    P + "drift",
    "Owned objects found edited or deleted by someone else (repaired, or in GitOps mode "
    "reported), by kind and name",
    ["kind", "name"],
    registry=REGISTRY,
)
OUT_OF_STEP = Gauge(
    P + "out_of_step_objects",
    "Owned objects that differ from the config right now (GitOps mode leaves them so)",
    registry=REGISTRY,
)
ERRORS = Counter(
    P + "errors",
    "Reconcile passes that failed, by step (objects, certificates)",
    ["step"],
    registry=REGISTRY,
)
LAST_SUCCESS = Gauge(
    P + "last_success_timestamp_seconds",
    "When a reconcile pass last finished with everything in step",
    registry=REGISTRY,
)
NODE_STATES_FOREIGN = Gauge(
    P + "node_states_foreign",
    "ConfigMaps in the guard's namespace labelled as node-state params that the guard did not "
    "make (not one of its names): ignored by its policies, to be removed by an operator",
    registry=REGISTRY,
)
NODE_STATES_REPAIRS = Counter(
    P + "node_states_repairs",
    "Node-state ConfigMaps written again because someone edited, unlabelled or deleted them",
    registry=REGISTRY,
)
NODE_STATES_STALLS = Counter(
    P + "node_states_stalls",
    "Node-state publishing rounds that failed (the API server away, refusing, or a run of "
    "409 conflicts): the in-server checks read older states until one succeeds",
    registry=REGISTRY,
)
CA_REFUSALS = Counter(
    P + "ca_refusals",
    "Times the CA Secret listed CAs the guard did not make (named in the log): refused, kept "
    "out of every caBundle and removed from the Secret",
    registry=REGISTRY,
)
