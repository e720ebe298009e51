"""Small builders for the Kubernetes objects and AdmissionReviews the tests send."""

from __future__ import annotations

import copy
import uuid
from typing import Any

KINDS = {
    "Pod": ("", "v1", "pods"),
    "ConfigMap": ("", "v1", "configmaps"),
    "Deployment": ("apps", "v1", "deployments"),
    "Job": ("batch.volcano.sh", "v1alpha1", "jobs"),
    "CronJob": ("batch.volcano.sh", "v1alpha1", "cronjobs"),
    "JobTemplate": ("flow.volcano.sh", "v1alpha1", "jobtemplates"),
    "PodGroup": ("scheduling.volcano.sh", "v1beta1", "podgroups"),
    "Queue": ("scheduling.volcano.sh", "v1beta1", "queues"),
    "Binding": ("", "v1", "pods"),  # as pods/binding: set request.subResource too
}


def container(
    name: str = "main", requests: dict | None = None, limits: dict | None = None, **extra: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "image": "busybox:1.36", **extra}
    resources = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    if resources:
        body["resources"] = resources
    return body


def pod(
    *containers: dict,
    init: tuple[dict, ...] = (),
    scheduler: str = "volcano",
    name: str = "train-0",
    namespace: str = "team-a",
) -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulerName": scheduler, "containers": list(containers)}
    if init:
        spec["initContainers"] = list(init)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def volcano_job(
    tasks: dict[str, list[dict]],
    scheduler: str | None = "volcano",
    name: str = "mnist",
    namespace: str = "team-a",
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "minAvailable": 1,
        "tasks": [
            {
                "name": task,
                "replicas": 1,
                "template": {"spec": {"containers": containers, "restartPolicy": "Never"}},
            }
            for task, containers in tasks.items()
        ],
    }
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def volcano_cronjob(tasks: dict[str, list[dict]], name: str = "nightly") -> dict[str, Any]:
    """A Volcano CronJob (batch.volcano.sh/v1alpha1) whose jobTemplate carries these tasks."""
    job = volcano_job(tasks)
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "CronJob",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {"schedule": "0 2 * * *", "jobTemplate": {"spec": job["spec"]}},
    }


def job_template(tasks: dict[str, list[dict]], name: str = "train") -> dict[str, Any]:
    """A JobFlow JobTemplate (flow.volcano.sh/v1alpha1): its spec is a Volcano Job spec."""
    job = volcano_job(tasks)
    return {
        "apiVersion": "flow.volcano.sh/v1alpha1",
        "kind": "JobTemplate",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": job["spec"],
    }


def review(
    obj: dict[str, Any], operation: str = "CREATE", uid: str | None = None, old: dict | None = None
) -> dict[str, Any]:
    group, version, resource = KINDS[obj["kind"]]
    metadata = obj.get("metadata", {})
    request: dict[str, Any] = {
        "uid": uid or str(uuid.uuid4()),
        "kind": {"group": group, "version": version, "kind": obj["kind"]},
        "resource": {"group": group, "version": version, "resource": resource},
        "operation": operation,
        "namespace": metadata.get("namespace", ""),
        "name": metadata.get("name", ""),
        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
        "object": copy.deepcopy(obj),
    }
    if old is not None:
        request["oldObject"] = old
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
