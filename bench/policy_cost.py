"""What each of the guard's in-server policies costs kube-apiserver 1.30 at the extremes.

    python -m bench.policy_cost

Runs the ValidatingAdmissionPolicies `volcano-guard manifests` prints, and the webhook's
matchConditions, on the sandbox's CEL evaluator, which counts cost as cel-go v0.17.8 does, and
prints for each: the matchConditions against their budget (2,500,000), the validations and the
messageExpressions against the evaluation's budget (10,000,000; the messages get what the
validations leave, and the API server evaluates every one of them), and the costliest single
expression against the per-call limit (1,000,000), with the headroom (limit / cost).

The objects: a Volcano Job of 30 tasks x 40 containers; the largest Volcano Job the API server
stores (its CRD caps no list, so the bound is etcd's request limit of 1.5 MiB, under the API
server's 3 MiB body limit: the Job made of the smallest valid containers, each with cpu and
memory requests and limits, up to 1.5 MiB); and a Pod pinned to a node among 100,000 node
states, published as the reconciler publishes them (one evaluation a ConfigMap of states).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from volcano_guard.webhook.admission_policies import admission_policies
from volcano_guard.webhook.config import Config, config_from_dict
from volcano_guard.webhook.evaluation import POLICIES
from volcano_guard.webhook.node_states import RANGE_BYTES, configmap, desired_states, plan
from volcano_guard.webhook.policies.base import InServerMutation
from volcano_guard.webhook.registrations import webhook_configurations
from volcano_guard_sandbox.apiserver import cel_cost, cel_eval, mutating_policies, policy_validation

ETCD_REQUEST_BYTES = 1536 * 1024  # etcd's --max-request-bytes default, which kube stores under
REQUEST_BODY_BYTES = 3 * 1024 * 1024  # kube-apiserver's MaxRequestBodyBytes


def volcano_object(kind: str, job_spec: dict[str, Any]) -> dict[str, Any]:
    """A Volcano Job, CronJob or JobFlow JobTemplate team-a/train carrying job_spec."""
    group = "flow.volcano.sh" if kind == "JobTemplate" else "batch.volcano.sh"
    spec = (
        {"schedule": "0 * * * *", "jobTemplate": {"spec": job_spec}}
        if kind == "CronJob"
        else job_spec
    )
    return {
        "apiVersion": f"{group}/v1alpha1",
        "kind": kind,
        "metadata": {"name": "train", "namespace": "team-a"},
        "spec": spec,
    }


def volcano_job(tasks: int, containers: int, name_length: int = 8) -> dict[str, Any]:
    """A valid Volcano Job: every container requests cpu and memory within its limits."""
    return volcano_object(
        "Job",
        {
            "schedulerName": "volcano",
            "minAvailable": 1,
            "tasks": [
                {
                    "name": f"t{t}",
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": f"c{c}".ljust(name_length, "x"),
                                    "image": "b",
                                    "resources": {
                                        "requests": {"cpu": "1", "memory": "1"},
                                        "limits": {"cpu": "1", "memory": "1"},
                                    },
                                }
                                for c in range(containers)
                            ]
                        }
                    },
                }
                for t in range(tasks)
            ],
        },
    )


def size_of(obj: Any) -> int:
    return len(json.dumps(obj, separators=(",", ":")).encode())


def largest_job(containers_per_task: int = 100) -> dict[str, Any]:
    """The most containers a Job stored in etcd holds (short names, tasks of 100)."""
    low, high = 1, 1024  # the most whole tasks that fit, by bisection
    while low < high:
        middle = (low + high + 1) // 2
        fits = size_of(volcano_job(middle, containers_per_task, 1)) <= ETCD_REQUEST_BYTES
        low, high = (middle, high) if fits else (low, middle - 1)
    job = volcano_job(low, containers_per_task, 1)
    last = job["spec"]["tasks"][-1]["template"]["spec"]["containers"]
    room = ETCD_REQUEST_BYTES - size_of(job)
    extra = size_of(last[-1]) + 1  # a container and its comma
    last.extend({**last[-1], "name": f"z{index}"} for index in range(room // (extra + 4)))
    return job


@dataclass
class PolicyCost:
    match_conditions: int = 0
    validations: int = 0
    messages: int = 0
    costliest: tuple[int, str] = (0, "")


def _cost(expression: str, data: Mapping[str, Any], found: PolicyCost) -> int:
    node = cel_eval.plan_of(policy_validation.program, expression)
    assert node is not None, f"not modelled: {expression}"
    outcome = cel_eval.run(node, dict(data), limit=2**63)
    found.costliest = max(found.costliest, (outcome.cost, expression[:40] + "..."))
    return outcome.cost


def policy_cost(spec: Mapping[str, Any], data: dict[str, Any]) -> PolicyCost:
    """What the API server charges one evaluation of the policy (validator.go, filter.go,
    composition.go): every expression, each variable once a filter, when first read."""
    found = PolicyCost()
    conditions = [c["expression"] for c in spec.get("matchConditions") or ()]
    found.match_conditions = sum(_cost(e, data, found) for e in conditions)
    values: dict[str, Any] = {}
    costs: dict[str, int] = {}
    reads: dict[str, set[str]] = {}
    for variable in spec.get("variables") or ():
        lazy = cel_eval.LazyVariables(values, costs, reads)
        node = cel_eval.plan_of(policy_validation.program, variable["expression"])
        assert node is not None
        outcome = cel_eval.run(node, {**data, "variables": lazy}, limit=2**63)
        costs[variable["name"]] = outcome.cost
        reads[variable["name"]] = set(lazy.charged)
        found.costliest = max(found.costliest, (outcome.cost, f"variable {variable['name']}"))
        if not outcome.error:
            values[variable["name"]] = outcome.value
    validations = spec.get("validations") or ()
    for field, key in (("validations", "expression"), ("messages", "messageExpression")):
        lazy = cel_eval.LazyVariables(values, costs, reads)
        total = sum(_cost(v[key], {**data, "variables": lazy}, found) for v in validations)
        setattr(found, field, total + lazy.total)
    return found


def _against(cost: int, limit: int) -> str:
    headroom = f"{limit / cost:,.1f}x" if cost else "-"
    return f"{cost:>12,} of {limit:>10,}  headroom {headroom}"


def report(title: str, rows: Iterable[tuple[str, PolicyCost]]) -> None:
    print(title)
    for name, found in rows:
        print(f"  {name}")
        print(f"    matchConditions {_against(found.match_conditions, MATCH_BUDGET)}")
        if found.validations or found.messages:
            left = cel_cost.RUNTIME_BUDGET - found.validations
            print(f"    validations     {_against(found.validations, cel_cost.RUNTIME_BUDGET)}")
            print(f"    messages        {_against(found.messages, left)}")
        cost, expression = found.costliest
        print(f"    costliest call  {_against(cost, cel_cost.PER_CALL_LIMIT)}  ({expression})")


MATCH_BUDGET = cel_cost.MATCH_CONDITIONS_BUDGET


def request_of(obj: Mapping[str, Any], resource: str, group: str, version: str) -> dict[str, Any]:
    return {
        "kind": {"group": group, "version": version, "kind": obj["kind"]},
        "resource": {"group": group, "version": version, "resource": resource},
        "namespace": obj["metadata"]["namespace"],
        "name": obj["metadata"]["name"],
        "operation": "CREATE",
        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
    }


def job_data(job: dict[str, Any]) -> dict[str, Any]:
    """What the expressions see of the Job's CREATE."""
    return {
        "object": job,
        "oldObject": None,
        "request": request_of(job, "jobs", "batch.volcano.sh", "v1alpha1"),
        "params": None,
        "namespaceObject": None,
    }


def job_costs(config: Config, job: dict[str, Any]) -> list[tuple[str, PolicyCost]]:
    data = job_data(job)
    rows = [
        (p["metadata"]["name"], policy_cost(p["spec"], data))
        for p in admission_policies(config)
        if p["kind"] == "ValidatingAdmissionPolicy" and "jobs" in json.dumps(p["spec"])
    ]
    return rows + webhook_condition_costs(config, data)


def webhook_condition_costs(config: Config, data: dict[str, Any]) -> list[tuple[str, PolicyCost]]:
    """The matchConditions of each webhook the guard registers, on the same request."""
    rows = []
    for configuration in webhook_configurations(config):
        for webhook in configuration.get("webhooks") or ():
            spec = {"matchConditions": webhook.get("matchConditions") or ()}
            rows.append((f"webhook {webhook['name']}", policy_cost(spec, data)))
    return rows


def node_state_costs(nodes: int) -> list[tuple[str, PolicyCost]]:
    """A Pod pinned to the last of `nodes` managed nodes: the nodeName policies evaluated once
    for each ConfigMap of states (the binding's params), the costliest evaluation shown."""
    selectors = {"managedNodeSelectors": ["volcano.sh/role:train"]}
    config = config_from_dict(
        {"policies": {"nodeName": {**selectors, "bindingGuard": {"mode": "enforce"}}}}
    )
    labels = {f"node-{i:06d}": {"volcano.sh/role": "train"} for i in range(nodes)}
    ranges = plan([], desired_states(labels, config), RANGE_BYTES)
    configmaps = [configmap(r, "volcano-guard") for r in ranges]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "team-a"},
        "spec": {"schedulerName": "volcano", "nodeName": f"node-{nodes - 1:06d}", "containers": []},
    }
    base = {
        "object": pod,
        "oldObject": None,
        "request": request_of(pod, "pods", "", "v1"),
        "namespaceObject": None,
    }
    rows = []
    for policy in admission_policies(config):
        if policy["kind"] != "ValidatingAdmissionPolicy" or "paramKind" not in policy["spec"]:
            continue
        worst = max(
            (policy_cost(policy["spec"], {**base, "params": c}) for c in configmaps),
            key=lambda found: found.validations + found.messages,
        )
        rows.append((f"{policy['metadata']['name']} ({len(configmaps)} maps)", worst))
    return rows


def mutation_cost(mutation: InServerMutation, data: Mapping[str, Any]) -> dict[str, int]:
    """What one evaluation of an InServerMutation costs, each expression alone (each is its own
    call against the per-call limit): its condition, each variable, and the JSONPatch
    expression as 1.36 compiles it (with the patch types)."""
    costs = {"condition": _cost(mutation.condition, data, PolicyCost())}
    values: dict[str, Any] = {}
    for name, expression in mutation.variables:
        node = cel_eval.plan_of(policy_validation.program, expression)
        assert node is not None, f"not modelled: {expression}"
        outcome = cel_eval.run(node, {**data, "variables": values}, limit=2**63)
        costs[f"variable {name}"] = outcome.cost
        values[name] = outcome.value
    program_of = mutating_policies._compiled_in(mutating_policies.KUBERNETES_1_36)
    node = mutating_policies._plan(program_of, mutation.json_patch)
    assert node is not None, f"not modelled: {mutation.json_patch}"
    outcome = cel_eval.run(node, {**data, "variables": values}, limit=2**63)
    costs["jsonPatch"] = outcome.cost
    return costs


def mutation_costs(config: Config, job: dict[str, Any]) -> list[tuple[str, dict[str, int]]]:
    """mutation_cost of every InServerMutation config gives that applies to the Job."""
    return [
        (mutation.name, mutation_cost(mutation, job_data(job)))
        for policy in POLICIES
        for mutation in policy.mutate_in_server(config)
        if any("jobs" in rule.resources for rule in mutation.rules)
    ]


def report_mutations(title: str, rows: Iterable[tuple[str, dict[str, int]]]) -> None:
    print(title)
    for name, costs in rows:
        expression, cost = max(costs.items(), key=lambda item: item[1])
        total = sum(costs.values())
        print(f"  {name}")
        print(f"    all expressions {_against(total, cel_cost.RUNTIME_BUDGET)}")
        print(f"    costliest call  {_against(cost, cel_cost.PER_CALL_LIMIT)}  ({expression})")


def without_resources(job: dict[str, Any]) -> dict[str, Any]:
    """The Job with no container's resources: every default to fill."""
    tasks = [
        {
            **task,
            "template": {
                "spec": {
                    "containers": [
                        {k: v for k, v in c.items() if k != "resources"}
                        for c in task["template"]["spec"]["containers"]
                    ]
                }
            },
        }
        for task in job["spec"]["tasks"]
    ]
    return {**job, "spec": {**job["spec"], "tasks": tasks}}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100_000)
    args = parser.parse_args(argv)
    config = Config()
    job = volcano_job(30, 40)
    report(f"Volcano Job 30 x 40 containers ({size_of(job):,} bytes)", job_costs(config, job))
    job = largest_job()
    containers = sum(len(t["template"]["spec"]["containers"]) for t in job["spec"]["tasks"])
    report(
        f"Largest Volcano Job etcd stores: {len(job['spec']['tasks'])} tasks, {containers:,} "
        f"containers ({size_of(job):,} bytes of {ETCD_REQUEST_BYTES:,})",
        job_costs(config, job),
    )
    report(f"Pod on one of {args.nodes:,} node states", node_state_costs(args.nodes))
    defaults = config_from_dict(
        {"policies": {"resourceRequests": {"defaults": {"cpu": "100m", "memory": "128Mi"}}}}
    )
    report_mutations(
        "Mutations (defaults cpu, memory) on the largest Volcano Job, every request set",
        mutation_costs(defaults, job),
    )
    report_mutations(
        "... and on the same Job with no container's resources (every default filled)",
        mutation_costs(defaults, without_resources(job)),
    )


if __name__ == "__main__":
    main()
