"""Volcano's control plane as its installer ships it: which container is which component, and
whether a scheduler panics on a failed assertion.

Components are told by their image's name (the last path segment, registry and tag dropped),
as Volcano's Helm chart and installer YAML name them (installer/helm/chart/volcano/values.yaml:
`volcanosh/vc-scheduler` and the rest), or for a scheduler by its `--scheduler-name` argument
naming one of the configured Volcano schedulers (cmd/scheduler/app/options/options.go). A
mirrored or renamed image is added by configuration.

`Resource.Sub` asserts (pkg/scheduler/api/resource_info.go), and `assert.Assert` panics unless
the process's environment has PANIC_ON_ERROR set to exactly "false"
(pkg/scheduler/util/assert/assert.go, `init`); the installer does not set it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from typing import Any

PANIC_ON_ERROR = "PANIC_ON_ERROR"
SCHEDULER_PANICS = "schedulerPanics"  # the finding's (and check's) policy name
SCHEDULER, AGENT_SCHEDULER = "scheduler", "agent-scheduler"
SCHEDULERS = frozenset({SCHEDULER, AGENT_SCHEDULER})
# Image name -> component, as Volcano's installer names its images.
COMPONENT_IMAGES: Mapping[str, str] = {
    "vc-scheduler": SCHEDULER,
    "vc-agent-scheduler": AGENT_SCHEDULER,
    "vc-controller-manager": "controller-manager",
    "vc-hypernode-controller-manager": "hypernode-controller-manager",
    "vc-webhook-manager": "admission",
}
_SCHEDULER_FLAGS = ("--scheduler-name", "-scheduler-name")  # Go's flag package takes both
POD_TEMPLATE_KINDS = frozenset({"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"})


def image_name(image: Any) -> str:
    """`docker.io/volcanosh/vc-scheduler:v1.11.0@sha256:...` -> `vc-scheduler`."""
    if not isinstance(image, str):
        return ""
    name = image.split("@", 1)[0].rsplit("/", 1)[-1]
    return name.split(":", 1)[0]


def component(
    container: Mapping[str, Any],
    scheduler_names: Collection[str],
    images: Mapping[str, str] = COMPONENT_IMAGES,
) -> str | None:
    """The Volcano component a container runs, or None."""
    found = images.get(image_name(container.get("image")))
    if found:
        return found
    for argument in _arguments(container):
        flag, _, value = argument.partition("=")
        if flag in _SCHEDULER_FLAGS and value in scheduler_names:
            return SCHEDULER
    return None


def panics_on_error(container: Mapping[str, Any]) -> bool:
    """True unless the container's env sets PANIC_ON_ERROR to "false" (a value from a
    ConfigMap or Secret cannot be seen here, so it counts as not set)."""
    env = container.get("env")
    for variable in env if isinstance(env, list) else ():
        if isinstance(variable, dict) and variable.get("name") == PANIC_ON_ERROR:
            return variable.get("value") != "false"
    return True


def containers(pod_spec: Any) -> Iterator[Mapping[str, Any]]:
    """A pod spec's containers (init containers apart: they do not schedule)."""
    listed = pod_spec.get("containers") if isinstance(pod_spec, dict) else None
    yield from (c for c in listed if isinstance(c, dict)) if isinstance(listed, list) else ()


def armed_schedulers(
    pod_spec: Any, scheduler_names: Collection[str], images: Mapping[str, str] = COMPONENT_IMAGES
) -> list[str]:
    """The containers of a pod spec that run a Volcano scheduler which panics on a failed
    assertion."""
    return [
        str(c.get("name", ""))
        for c in containers(pod_spec)
        if component(c, scheduler_names, images) in SCHEDULERS and panics_on_error(c)
    ]


def panic_message(container: str, risk: str) -> str:
    """What an armed scheduler risks (`risk`) and the fix, for the audit and `check`."""
    return (
        f"container {container} runs Volcano's scheduler without {PANIC_ON_ERROR}=false, "
        f"so a failed assertion panics the process instead of being logged: {risk}; set "
        f'env {PANIC_ON_ERROR}: "false" on the container'
    )


NEGATIVE_IDLE_RISK = (
    "a managed node whose idle resources go negative (a pod bound around Volcano) would panic it"
)


def pod_template_spec(obj: Mapping[str, Any]) -> Any:
    """The pod spec a workload object runs (a Pod's own, a Deployment's template's...)."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return None
    if obj.get("kind") == "Pod":
        return spec
    if obj.get("kind") in POD_TEMPLATE_KINDS:
        template = spec.get("template")
        return template.get("spec") if isinstance(template, dict) else None
    return None


def _arguments(container: Mapping[str, Any]) -> Iterator[str]:
    for field in ("command", "args"):
        values = container.get(field)
        yield from (v for v in values if isinstance(v, str)) if isinstance(values, list) else ()


def may_run_volcano(pod_spec: Any, images: Mapping[str, str] = COMPONENT_IMAGES) -> bool:
    """Whether a pod spec may run a Volcano component (before the scheduler names are known):
    a component's image, or a container naming a scheduler. Run on every pod the audit
    reads, so a plain loop."""
    listed = pod_spec.get("containers") if isinstance(pod_spec, dict) else None
    for container in listed if isinstance(listed, list) else ():
        if not isinstance(container, dict):
            continue
        if image_name(container.get("image")) in images:
            return True
        for field in ("command", "args"):
            values = container.get(field)
            if isinstance(values, list) and any(
                isinstance(v, str) and v.startswith(_SCHEDULER_FLAGS) for v in values
            ):
                return True
    return False
