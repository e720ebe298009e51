"""Where pod specs live inside the objects the guard sees, and who will schedule them.

A Pod is its own spec; Deployments, StatefulSets, DaemonSets, ReplicaSets and batch Jobs carry
one template, CronJobs one a level deeper, and Volcano Jobs one per task, as do the Volcano kinds
whose controllers make Volcano Jobs from a Job spec they carry: a Volcano CronJob
(spec.jobTemplate.spec) and a JobFlow's JobTemplate (spec). Each is returned as a
PodTemplate with the JSON path to its spec (for messages and JSON patches) and the scheduler
that will place its pods. A spec of the wrong shape raises ObjectShapeError naming the path.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgspec

Path = tuple[str | int, ...]

DEFAULT_SCHEDULER = "default-scheduler"  # what the API server defaults an empty name to
VOLCANO_JOB_GROUP = "batch.volcano.sh"
VOLCANO_FLOW_GROUP = "flow.volcano.sh"

# (API group, kind) -> path from the object to its pod template's spec.
_TEMPLATE_PATHS: dict[tuple[str, str], tuple[str, ...]] = {
    ("apps", "Deployment"): ("spec", "template", "spec"),
    ("apps", "StatefulSet"): ("spec", "template", "spec"),
    ("apps", "DaemonSet"): ("spec", "template", "spec"),
    ("apps", "ReplicaSet"): ("spec", "template", "spec"),
    ("", "ReplicationController"): ("spec", "template", "spec"),
    ("batch", "Job"): ("spec", "template", "spec"),
    ("batch", "CronJob"): ("spec", "jobTemplate", "spec", "template", "spec"),
}


# (API group, kind) -> path from the object to the Volcano Job spec (spec.tasks[].template) it
# carries. Volcano's API: batch.volcano.sh/v1alpha1 Job and CronJob (its jobTemplate is a
# JobTemplateSpec), flow.volcano.sh/v1alpha1 JobTemplate (its spec is a JobSpec).
VOLCANO_JOB_SPEC_PATHS: dict[tuple[str, str], tuple[str, ...]] = {
    (VOLCANO_JOB_GROUP, "Job"): ("spec",),
    (VOLCANO_JOB_GROUP, "CronJob"): ("spec", "jobTemplate", "spec"),
    (VOLCANO_FLOW_GROUP, "JobTemplate"): ("spec",),
}

POD: tuple[str, str] = ("", "Pod")
# Every kind whose pod templates pod_templates() finds.
SUPPORTED_KINDS = frozenset({*_TEMPLATE_PATHS, POD, *VOLCANO_JOB_SPEC_PATHS})


class ObjectShapeError(ValueError):
    """A field of the object does not have the type Kubernetes gives it."""


class PodTemplate(msgspec.Struct, frozen=True):
    path: Path  # to the pod spec inside the object
    spec: dict[str, Any]
    scheduler_name: str
    task: str | None = None  # the Volcano Job task this template belongs to


class Container(msgspec.Struct, frozen=True):
    path: Path  # to the container inside the object
    kind: str  # "container" or "init container"
    name: str
    body: dict[str, Any]


def format_path(path: Path) -> str:
    """("spec", "containers", 0, "resources") -> "spec.containers[0].resources"."""
    text = ""
    for token in path:
        text += f"[{token}]" if isinstance(token, int) else (f".{token}" if text else token)
    return text


def group_of(api_version: str) -> str:
    return api_version.rpartition("/")[0]


def is_supported(group: str, kind: str) -> bool:
    return (group, kind) in SUPPORTED_KINDS


def pod_templates(
    group: str, kind: str, obj: dict[str, Any], volcano_default: str
) -> list[PodTemplate]:
    """Every pod spec in obj; volcano_default is the scheduler Volcano gives a Job without one."""
    if (group, kind) == POD:
        spec = _mapping(obj.get("spec"), ("spec",))
        return [PodTemplate(("spec",), spec, _scheduler(spec, ("spec",)) or DEFAULT_SCHEDULER)]
    job_spec_path = VOLCANO_JOB_SPEC_PATHS.get((group, kind))
    if job_spec_path is not None:
        return list(_volcano_job_templates(obj, job_spec_path, volcano_default))
    path = _TEMPLATE_PATHS.get((group, kind))
    if path is None:
        return []
    spec = _lookup(obj, path)
    return [PodTemplate(path, spec, _scheduler(spec, path) or DEFAULT_SCHEDULER)]


def _volcano_job_templates(
    obj: dict[str, Any], job_spec_path: tuple[str, ...], volcano_default: str
) -> Iterator[PodTemplate]:
    job_spec = _lookup(obj, job_spec_path)
    # Volcano's job controller: a template without schedulerName inherits the job's, and
    # Volcano's own admission defaults the job's to its scheduler.
    job_scheduler = _scheduler(job_spec, job_spec_path) or volcano_default
    tasks = job_spec.get("tasks") or []
    if not isinstance(tasks, list):
        raise ObjectShapeError(f"{format_path((*job_spec_path, 'tasks'))} must be a list")
    for index, task in enumerate(tasks):
        task_path: Path = (*job_spec_path, "tasks", index)
        task = _mapping(task, task_path)
        name = task.get("name")
        label = name if isinstance(name, str) and name else f"#{index}"
        path = (*task_path, "template", "spec")
        spec = _lookup(task, ("template", "spec"), base=task_path)
        yield PodTemplate(path, spec, _scheduler(spec, path) or job_scheduler, task=label)


def containers(template: PodTemplate) -> list[Container]:
    """Init containers first (they run first), then app containers."""
    found: list[Container] = []
    for field, kind in _CONTAINER_LISTS:
        items = template.spec.get(field)
        if not items:
            continue
        if not isinstance(items, list):
            raise ObjectShapeError(f"{format_path((*template.path, field))} must be a list")
        for index, item in enumerate(items):
            path = (*template.path, field, index)
            if not isinstance(item, dict):
                raise ObjectShapeError(f"{format_path(path)} must be an object")
            name = item.get("name")
            if not isinstance(name, str):
                raise ObjectShapeError(f"{format_path((*path, 'name'))} must be a string")
            found.append(Container(path, kind, name, item))
    return found


# The pod spec fields holding containers, in the order they run; and what messages call them.
CONTAINER_FIELDS = ("initContainers", "containers")
_CONTAINER_LISTS = tuple(zip(CONTAINER_FIELDS, ("init container", "container"), strict=True))


def requests_and_limits(container: Container) -> tuple[dict[str, Any], dict[str, Any]]:
    """container.resources' requests and limits as mappings; absent -> {}."""
    resources = container.body.get("resources")
    if resources is None:
        return {}, {}
    if not isinstance(resources, dict):  # paths are formatted only for errors: a hot path
        raise ObjectShapeError(f"{format_path((*container.path, 'resources'))} must be an object")
    requests, limits = resources.get("requests"), resources.get("limits")
    if (requests is None or isinstance(requests, dict)) and (
        limits is None or isinstance(limits, dict)
    ):
        return requests or {}, limits or {}
    wrong = "requests" if requests is not None and not isinstance(requests, dict) else "limits"
    raise ObjectShapeError(
        f"{format_path((*container.path, 'resources', wrong))} must be an object"
    )


def _scheduler(spec: dict[str, Any], path: Path) -> str:
    name = spec.get("schedulerName") or ""
    if not isinstance(name, str):
        raise ObjectShapeError(f"{format_path((*path, 'schedulerName'))} must be a string")
    return name


def _lookup(obj: dict[str, Any], keys: tuple[str, ...], base: Path = ()) -> dict[str, Any]:
    """obj[keys[0]][keys[1]]..., each level an object (absent or null -> {})."""
    node = obj
    for depth, key in enumerate(keys, start=1):
        node = _mapping(node.get(key), (*base, *keys[:depth]))
    return node


def _mapping(value: Any, path: Path) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ObjectShapeError(f"{format_path(path) or 'object'} must be an object")
    return value
