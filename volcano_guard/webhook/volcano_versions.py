"""The Volcano components a workload runs, their versions, and what the advisory table
(base/advisories.py) says of them under this config: for the audit (volcano_guard.audit) and
`check` alike.

Each Volcano container of a pod spec (a Pod's, or a Deployment's, StatefulSet's or DaemonSet's
template) gives:
- per advisory that affects its component at its version, a notice (policy volcanoAdvisories):
  warn when the guard feature that covers it is on, fail when the guard could cover it and that
  feature is off, warn when nothing in the guard covers it (upgrade);
- for a version it cannot read from the image tag, one warn notice: "version unknown";
- for the scheduler and the queue controller (policy queueStatusSidecar): fail when the release
  PUTs Queue status from both (the storm the sidecar coalesces) and the sidecar is missing, warn
  when the sidecar is there and the release does not need it.
docs/decisions/audit.md says why these results.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from volcano_guard.base.advisories import (
    ADVISORIES_POLICY,
    NODE_ADMISSION,
    PODGROUP_DELETE_GUARD,
    QUEUE_GUARANTEES_FINDING,
    QUEUES_POLICY,
    SIDECAR,
    SIDECAR_SCOPE_POLICY,
    STATUS_WRITERS,
    UNKNOWN,
    Advisory,
    Version,
    advisories_for,
    image_version,
    status_writers,
)
from volcano_guard.base.volcano import component, containers
from volcano_guard.webhook.config import Config
from volcano_guard.webhook.policies.sidecar_injection import CONTAINER_NAME, INJECT_LABEL

# What runs a component for good: a Job's pods (Volcano's admission-init, which runs the webhook's
# image to make its certificate) run once and serve nothing.
SERVING_KINDS = frozenset({"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Pod"})
ON, OFF, NONE, UNAVAILABLE = "on", "off", "none", "unavailable"  # an advisory's coverage
FAIL, WARN = "fail", "warn"
_FIX = {
    SIDECAR: f'label the pod template {INJECT_LABEL}: "true" (policies.sidecarInjection)',
    NODE_ADMISSION: "set policies.resourceRequests.mode and policies.nodeName.mode to enforce",
    PODGROUP_DELETE_GUARD: "set policies.podGroups.deleteGuard.mode to enforce",
    QUEUES_POLICY: "set policies.queues.mode to enforce",
}
_FEATURE = {
    SIDECAR: "the coalescing sidecar",
    NODE_ADMISSION: "the resourceRequests and nodeName policies",
    PODGROUP_DELETE_GUARD: "the podGroups delete guard",
    QUEUES_POLICY: "the queues policy",
    # Always on: the audit grades Queue guarantees past the cluster by this scheduler's release.
    QUEUE_GUARANTEES_FINDING: "the audit's queueGuarantees finding",
}


@dataclass(frozen=True)
class ComponentRun:
    """One Volcano container of a workload."""

    container: str
    component: str
    image: str
    version: Version | None
    sidecar: bool  # the pod (template) has the sidecar, or is labelled for its injection

    @property
    def version_text(self) -> str:
        return str(self.version) if self.version else UNKNOWN


@dataclass(frozen=True)
class Notice:
    """One line of the audit or `check` about a component."""

    policy: str
    result: str  # fail or warn
    message: str
    component: str
    version: str  # "v1.10.0" or "unknown"
    advisory: str = ""  # the row's key; "" for version unknown and the sidecar scope
    coverage: str = ""  # on, off, none, unavailable


def component_runs(
    pod_spec: Any, labels: Mapping[str, Any], config: Config
) -> Iterator[ComponentRun]:
    """The Volcano containers of a pod spec whose pod carries these labels."""
    every = list(containers(pod_spec))
    inits = pod_spec.get("initContainers") if isinstance(pod_spec, dict) else None
    names = {c.get("name") for c in every}
    if isinstance(inits, list):  # a native sidecar is an init container
        names |= {c.get("name") for c in inits if isinstance(c, dict)}
    # Only an enforcing sidecarInjection patches a labelled pod; warn and audit only tell.
    injecting = config.policies.sidecarInjection.mode == "enforce"
    labelled = labels.get(INJECT_LABEL) == "true" and injecting
    sidecar = CONTAINER_NAME in names or labelled
    for container in every:
        which = component(container, config.volcanoSchedulerNames, config.audit.component_images)
        if which is None:
            continue
        image = container.get("image")
        yield ComponentRun(
            str(container.get("name", "")),
            which,
            image if isinstance(image, str) else "",
            image_version(image),
            sidecar,
        )


def notices(run: ComponentRun, config: Config) -> Iterator[Notice]:
    """What the advisory table and the sidecar scope say of one component run."""
    if run.version is None:
        yield Notice(
            ADVISORIES_POLICY,
            WARN,
            f"Volcano {run.component} (container {run.container}) runs image "
            f"{run.image or '(none)'}, whose tag names no release (a digest alone, latest...): "
            "version unknown, so its known failures cannot be told; tag the image with its "
            "release, e.g. v1.12.1",
            run.component,
            UNKNOWN,
        )
        return
    for advisory in advisories_for(run.component, run.version):
        yield advisory_notice(run, advisory, config)
    scope = sidecar_notice(run)
    if scope is not None:
        yield scope


def advisory_notice(run: ComponentRun, advisory: Advisory, config: Config) -> Notice:
    state = coverage(advisory, run, config)
    where = f"Volcano {run.component} {run.version_text} (container {run.container})"
    said = (
        f"[{advisory.key}] {where}: {advisory.failure} ({advisory.upstream()}; "
        f"{advisory.releases()})"
    )
    feature = _FEATURE.get(advisory.cover, "")  # none for `upgrade` rows
    verb = "are" if feature.endswith("policies") else "is"  # the verb agrees with the feature
    if state == ON:
        tail = f"covered: {feature} {verb} on"
    elif state == OFF:
        tail = f"{feature} would cover it and {verb} off: {_FIX[advisory.cover]}"
    elif state == UNAVAILABLE:
        tail = f"{feature} {verb} not in this build of the guard: upgrade Volcano"
    else:
        tail = "nothing in the guard covers it: " + (
            f"upgrade Volcano to {advisory.fixed_in} or later"
            if advisory.fixed_in
            else "no fixed release yet"
        )
    return Notice(
        ADVISORIES_POLICY,
        FAIL if state == OFF else WARN,
        f"{said}; {tail}",
        run.component,
        run.version_text,
        advisory.key,
        state,
    )


def coverage(advisory: Advisory, run: ComponentRun, config: Config) -> str:
    """Whether the guard feature that covers the advisory is on for this run."""
    policies = config.policies
    if advisory.cover == SIDECAR:
        return ON if run.sidecar else OFF
    if advisory.cover == NODE_ADMISSION:
        enforced = policies.resourceRequests.mode == policies.nodeName.mode == "enforce"
        return ON if enforced else OFF
    if advisory.cover == PODGROUP_DELETE_GUARD:
        return ON if policies.podGroups.deleteGuard.mode == "enforce" else OFF
    if advisory.cover == QUEUE_GUARANTEES_FINDING:
        return ON
    if advisory.cover == QUEUES_POLICY:
        section = getattr(policies, "queues", None)  # the queues policy's own config section
        if section is None:
            return UNAVAILABLE
        return ON if getattr(section, "mode", "off") == "enforce" else OFF
    return NONE


def sidecar_notice(run: ComponentRun) -> Notice | None:
    """Sidecar needed and missing (fail), or present and not needed (warn), for a Queue status
    writer of a known release."""
    if run.component not in STATUS_WRITERS or run.version is None:
        return None
    writers = status_writers(run.version)
    own = writers.scheduler if run.component == "scheduler" else writers.controller
    where = f"Volcano {run.component} {run.version_text} (container {run.container})"
    if writers.sidecar_needed and not run.sidecar:
        return Notice(
            SIDECAR_SCOPE_POLICY,
            FAIL,
            f"{where} writes Queue status by {own}, as does the "
            f"{'queue controller' if run.component == 'scheduler' else 'scheduler'}: the "
            "sidecar is needed to coalesce their conflicting writes and is missing; "
            + _FIX[SIDECAR],
            run.component,
            run.version_text,
        )
    if run.sidecar and not writers.sidecar_needed:
        return Notice(
            SIDECAR_SCOPE_POLICY,
            WARN,
            f"{where} writes Queue status by {own}; this release does not PUT Queue status "
            "from both writers, so the sidecar is not needed here: remove the "
            f"{INJECT_LABEL} label (and the sidecar) from the pod template",
            run.component,
            run.version_text,
        )
    return None


def workload_notices(pod_spec: Any, labels: Mapping[str, Any], config: Config) -> list[Notice]:
    """Every notice for the Volcano containers of one pod spec."""
    runs = component_runs(pod_spec, labels, config)
    return [notice for run in runs for notice in notices(run, config)]


def template_labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """The labels of the pods a workload object runs: a Pod's own, a template's."""
    if obj.get("kind") == "Pod":
        holder: Any = obj
    else:
        spec = obj.get("spec")
        holder = spec.get("template") if isinstance(spec, dict) else None
    metadata = holder.get("metadata") if isinstance(holder, dict) else None
    labels = metadata.get("labels") if isinstance(metadata, dict) else None
    return labels if isinstance(labels, dict) else {}
