"""resourceRequests.defaults as MutatingAdmissionPolicies: over generated pods and Volcano Jobs,
CronJobs and JobTemplates, the repository's examples and Volcano's own control-plane pods, the
sandbox's 1.36 plugin running "default-requests" and "volcano-default-requests" leaves the
object the webhook's /mutate leaves, under every config (mutating_differential)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.policy_cost import largest_job, mutation_costs, volcano_object, without_resources
from tests.conftest import REPO
from tests.webhook.mutating_differential import (
    Refused,
    compile_errors,
    policy_side,
    uncosted,
    webhook_side,
)
from tests.webhook.test_admission_policies import INSTALLER_WORKLOADS, installer_pods
from volcano_guard.webhook.config import Config, config_from_dict
from volcano_guard.webhook.policies.resource_requests import FILLED_CONTAINERS, POLICY
from volcano_guard_sandbox.apiserver import cel_cost

# Resource names a JSON pointer must escape, and a scheduler name CEL must.
HOSTILE_RESOURCE = "example.com/a~b'c\\d"
HOSTILE_SCHEDULER = "batch'\n\\"
CONFIGS: dict[str, dict[str, Any]] = {
    "cpu and memory": {
        "policies": {"resourceRequests": {"defaults": {"cpu": "100m", "memory": "128Mi"}}}
    },
    "gpu, hostile names, two schedulers": {
        "volcanoSchedulerNames": ["volcano", HOSTILE_SCHEDULER],
        "policies": {
            "resourceRequests": {
                "defaults": {"nvidia.com/gpu": 1, HOSTILE_RESOURCE: "2", "memory": "1Gi"}
            }
        },
    },
    # A pod without a schedulerName is placed by default-scheduler.
    "default-scheduler named": {
        "volcanoSchedulerNames": ["default-scheduler"],
        "policies": {"resourceRequests": {"defaults": {"cpu": "1"}}},
    },
}
RESOURCES = ("cpu", "memory", "nvidia.com/gpu", HOSTILE_RESOURCE)


def config_of(name: str) -> Config:
    return config_from_dict(CONFIGS[name])


def assert_same_object(config: Config, obj: dict[str, Any], operation: Any = "CREATE") -> Any:
    webhook = webhook_side(POLICY, config, obj, operation=operation)
    in_server = policy_side(POLICY.mutate_in_server(config), config, obj, operation=operation)
    assert in_server == webhook, obj
    return in_server


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_the_fills_compile_as_1_36_writes_them_and_every_call_is_costed(name):
    mutations = POLICY.mutate_in_server(config_of(name))
    assert [m.name for m in mutations] == ["default-requests", "volcano-default-requests"]
    assert compile_errors(config_of(name), mutations) == []
    assert uncosted(mutations) == []


@pytest.mark.parametrize(
    "section", [{"defaults": {}}, {"mode": "warn", "defaults": {"cpu": "1"}}, {"mode": "audit"}]
)
def test_only_enforced_defaults_run_in_the_server(section):
    config = config_from_dict({"policies": {"resourceRequests": section}})
    assert POLICY.mutate_in_server(config) == ()


quantities = st.sampled_from(["1", "500m", "2Gi"])


@st.composite
def resources(draw: Any) -> dict[str, Any] | None:
    """A container's resources: absent, empty, or some requests and limits (either map
    absent, empty or holding some of RESOURCES)."""
    shape = draw(st.sampled_from(["absent", "empty", "some"]))
    if shape == "absent":
        return None
    found: dict[str, Any] = {}
    for field in ("requests", "limits") if shape == "some" else ():
        if draw(st.booleans()):
            names = draw(st.lists(st.sampled_from(RESOURCES), unique=True, max_size=3))
            found[field] = {name: draw(quantities) for name in names}
    return found


@st.composite
def containers(draw: Any, prefix: str, least: int) -> list[dict[str, Any]]:
    found = []
    for index in range(draw(st.integers(least, 3))):
        container: dict[str, Any] = {"name": f"{prefix}-{index}", "image": "x"}
        body = draw(resources())
        if body is not None:
            container["resources"] = body
        found.append(container)
    return found


@st.composite
def pod_specs(draw: Any, schedulers: tuple[str | None, ...]) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": draw(containers("main", 1))}
    init = draw(containers("init", 0))
    if init:
        spec["initContainers"] = init
    scheduler = draw(st.sampled_from(schedulers))
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    return spec


SCHEDULERS = (None, "", "volcano", "default-scheduler", HOSTILE_SCHEDULER)


def pod_of(scheduler: str, containers: list[dict[str, Any]]) -> dict[str, Any]:
    return pod_with({"schedulerName": scheduler, "containers": containers})


def pod_with(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "team-a"},
        "spec": spec,
    }


@st.composite
def pods(draw: Any) -> dict[str, Any]:
    return pod_with(draw(pod_specs(SCHEDULERS)))


@st.composite
def volcano_objects(draw: Any) -> dict[str, Any]:
    """A Job, CronJob or JobTemplate whose tasks may share a name or have none, but never are
    the same in every field (the policy would find the first for each: see mutate_in_server)."""
    tasks = []
    for index in range(draw(st.integers(0, 3))):
        task: dict[str, Any] = {"replicas": index + 1}
        name = draw(st.sampled_from([f"task-{index}", "same", None]))
        if name is not None:
            task["name"] = name
        if draw(st.integers(0, 5)):  # now and then a task without a template
            task["template"] = {"spec": draw(pod_specs(SCHEDULERS))}
        tasks.append(task)
    job_spec: dict[str, Any] = {"tasks": tasks} if tasks or draw(st.booleans()) else {}
    scheduler = draw(st.sampled_from(SCHEDULERS))
    if scheduler is not None:
        job_spec["schedulerName"] = scheduler
    return volcano_object(draw(st.sampled_from(["Job", "CronJob", "JobTemplate"])), job_spec)


@pytest.mark.parametrize("name", sorted(CONFIGS))
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pod=pods())
def test_generated_pods_end_as_the_webhook_leaves_them(name, pod):
    assert_same_object(config_of(name), pod)


@pytest.mark.parametrize("name", sorted(CONFIGS))
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(obj=volcano_objects(), operation=st.sampled_from(["CREATE", "UPDATE"]))
def test_generated_volcano_jobs_end_as_the_webhook_leaves_them(name, obj, operation):
    assert_same_object(config_of(name), obj, operation)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CONFIGS))
@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pod=pods(), obj=volcano_objects())
def test_many_generated_objects_end_as_the_webhook_leaves_them(name, pod, obj):
    assert_same_object(config_of(name), pod)
    assert_same_object(config_of(name), obj)


def example_objects() -> list[dict[str, Any]]:
    """The Pods and Volcano Jobs of the repository's examples (admission reviews, manifests)."""
    found = []
    for path in sorted((REPO / "examples" / "admissions").glob("*.yaml")):
        request = yaml.safe_load(Path(path).read_text())["request"]
        if request["kind"]["kind"] in ("Pod", "Job") and request["operation"] == "CREATE":
            obj = copy.deepcopy(request["object"])
            obj["metadata"].setdefault("namespace", request.get("namespace", "default"))
            found.append(obj)
    manifest = REPO / "examples" / "manifests" / "volcano-job-ok.yaml"
    found += [d for d in yaml.safe_load_all(manifest.read_text()) if d]
    return found


def without_requests(obj: dict[str, Any]) -> dict[str, Any]:
    """obj with every container's resources dropped: what defaults are for."""
    obj = copy.deepcopy(obj)
    specs = (
        [t["template"]["spec"] for t in obj["spec"]["tasks"]]
        if obj["kind"] == "Job"
        else [obj["spec"]]
    )
    for spec in specs:
        for field in ("initContainers", "containers"):
            for container in spec.get(field) or ():
                container.pop("resources", None)
    return obj


def test_the_examples_end_as_the_webhook_leaves_them():
    examples = example_objects()
    assert {o["kind"] for o in examples} == {"Pod", "Job"}
    for name in CONFIGS:
        for obj in examples:
            for variant in (obj, without_requests(obj)):
                assert_same_object(config_of(name), variant)


@pytest.mark.parametrize("workload", INSTALLER_WORKLOADS)
def test_volcanos_control_plane_pods_handed_to_volcano_end_as_the_webhook_leaves_them(workload):
    """Volcano's own pods (its installer's templates), as if a Volcano scheduler placed them."""
    pod = copy.deepcopy(installer_pods()[workload])
    pod["spec"]["schedulerName"] = "volcano"
    for name in CONFIGS:
        for variant in (pod, without_requests(pod)):
            filled = assert_same_object(config_of(name), variant)
            assert isinstance(filled, dict)


def test_a_job_with_tasks_of_one_name_fills_each_task():
    """Task names find a task's index; tasks sharing a name are found by their whole value."""
    config = config_of("cpu and memory")
    task = {"name": "same", "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}
    other = copy.deepcopy(task)
    other["template"]["spec"]["containers"][0]["image"] = "y"
    job = volcano_object("Job", {"schedulerName": "volcano", "tasks": [task, other]})
    filled = assert_same_object(config, job)
    assert isinstance(filled, dict)
    for each in filled["spec"]["tasks"]:
        requests = each["template"]["spec"]["containers"][0]["resources"]["requests"]
        assert requests == {"cpu": "100m", "memory": "128Mi"}


def test_a_hostile_resource_name_is_one_key_of_the_requests():
    config = config_of("gpu, hostile names, two schedulers")
    pod = pod_of(
        HOSTILE_SCHEDULER,
        [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}],
    )
    filled = assert_same_object(config, pod)
    assert isinstance(filled, dict)
    assert filled["spec"]["containers"][0]["resources"]["requests"] == {
        "cpu": "1",
        "nvidia.com/gpu": "1",
        HOSTILE_RESOURCE: "2",
        "memory": "1Gi",
    }


@pytest.mark.slow
def test_a_pod_with_more_containers_than_the_webhook_fills_is_refused_in_the_server_too():
    """The webhook refuses an object past FILLED_CONTAINERS (its answer would not fit); the
    policy's patch then fails, and failurePolicy Fail refuses it. Slow: ~20,000 containers
    through both sides takes some seconds."""
    config = config_of("cpu and memory")
    pod = pod_of("volcano", [{"name": f"c{i}", "image": "x"} for i in range(FILLED_CONTAINERS + 1)])
    webhook = webhook_side(POLICY, config, pod)
    in_server = policy_side(POLICY.mutate_in_server(config), config, pod)
    assert isinstance(webhook, Refused) and isinstance(in_server, Refused)
    assert "more containers than volcano-guard fills requests of" in in_server.message


@pytest.mark.slow
def test_every_expression_costs_less_than_a_call_on_the_largest_job():
    """bench.policy_cost's largest Volcano Job (14,095 containers): with every request set,
    each variable and the patch within half the per-call limit, the mutation within half its
    budget; with no container's resources (14,095 operations, the JSONPatch expression at 90%
    of a call), still within the limit. Slow: ~15 s."""
    config = config_of("cpu and memory")
    for name, costs in mutation_costs(config, largest_job()):
        assert max(costs.values()) <= cel_cost.PER_CALL_LIMIT // 2, (name, costs)
        assert sum(costs.values()) <= cel_cost.RUNTIME_BUDGET // 2, (name, costs)
    for name, costs in mutation_costs(config, without_resources(largest_job())):
        assert max(costs.values()) <= cel_cost.PER_CALL_LIMIT, (name, costs)
