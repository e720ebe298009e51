"""The node states the in-server node-name check reads, at 100,000 nodes: how many ConfigMaps
they take and how large each is (the API server refuses more than 1 MiB), what the webhook's
publisher spends computing them and planning its writes, and what the API server spends judging
one pinned pod against all of them (the sandbox's CEL, as kube-apiserver evaluates a policy once
per param), beside the same check with no params (no managedNodeSelectors) in this process.

    .venv/bin/python -m bench.node_states [--nodes 100000] [--repeat 200]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from volcano_guard.webhook.admission_policies import admission_policies
from volcano_guard.webhook.config import Config, config_from_dict
from volcano_guard.webhook.node_states import (
    NodeRange,
    configmap,
    desired_states,
    from_configmap,
    plan,
)
from volcano_guard_sandbox.apiserver import policies as plugin
from volcano_guard_sandbox.apiserver.admission import Record
from volcano_guard_sandbox.apiserver.matching import Attributes, User
from volcano_guard_sandbox.apiserver.store import ApiError

TRAIN = {"volcano.sh/role": "train", "kubernetes.io/os": "linux"}
WEB = {"role": "web", "kubernetes.io/os": "linux"}


def cluster(nodes: int) -> dict[str, dict[str, str]]:
    """AWS-style node names, nine in ten managed."""
    return {
        f"ip-10-{i // 65536}-{i // 256 % 256}-{i % 256}.eu-west-1.compute.internal": WEB
        if i % 10 == 0
        else TRAIN
        for i in range(nodes)
    }


def timed(work: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """(median seconds, the last result)."""
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = work()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def pinned_pod_judge(
    config: Config, configmaps: list[dict[str, Any]], node: str
) -> Callable[[], bool]:
    """One pinned pod's CREATE through the sandbox's admission-policy plugin."""
    objects = admission_policies(config)
    vaps = [
        o
        for o in objects
        if o["kind"] == "ValidatingAdmissionPolicy"
        and o["metadata"]["name"] == "volcano-guard-node-name"
    ]
    bindings = [
        o
        for o in objects
        if o["kind"] == "ValidatingAdmissionPolicyBinding"
        and o["spec"]["policyName"] == "volcano-guard-node-name"
    ]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "team-a"},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]},
    }
    attributes = Attributes(
        operation="CREATE",
        group="",
        version="v1",
        resource="pods",
        subresource="",
        kind=("", "v1", "Pod"),
        namespace="team-a",
        name="p",
        user=User("alice", "", ()),
        object=pod,
    )

    def lookup(api_version: str, kind: str) -> plugin.ParamSource | None:
        return plugin.ParamSource(True, lambda namespace: configmaps)

    def judge() -> bool:
        try:
            plugin.dispatch(attributes, vaps, bindings, lookup, None, Record())
        except ApiError:
            return False
        return True

    return judge


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    config = config_from_dict(
        {"policies": {"nodeName": {"managedNodeSelectors": ["volcano.sh/role:train"]}}}
    )
    labels = cluster(args.nodes)

    states_s, states = timed(lambda: desired_states(labels, config), 5)
    first_s, writes = timed(lambda: plan([], states), 3)
    stored = [from_configmap(_stored(r)) for r in {r.start: r for r in writes}.values()]
    steady_s, none = timed(lambda: plan(stored, states), 3)
    joined = {**states, "ip-10-9-9-9.eu-west-1.compute.internal": "managed"}
    join_s, one = timed(lambda: plan(stored, joined), 3)
    objects = [configmap(r, "volcano-guard") for r in stored]
    sizes = [len(json.dumps(o)) for o in objects]
    data = [sum(len(k) + len(v) for k, v in o["data"].items()) for o in objects]

    print(f"{args.nodes:,} nodes, {sum(1 for s in states.values() if s == 'managed'):,} managed")
    print(
        f"  ConfigMaps: {len(objects)}; data per ConfigMap max {max(data):,} bytes, "
        f"object max {max(sizes):,} bytes (the API server's limit: {1024 * 1024:,} of data)"
    )
    print(
        f"  publisher: states from the node cache {states_s * 1000:.0f} ms; "
        f"plan from nothing {first_s * 1000:.0f} ms ({len(writes)} writes); "
        f"plan, nothing changed {steady_s * 1000:.0f} ms ({len(none)} writes); "
        f"plan, one node joined {join_s * 1000:.0f} ms ({len(one)} write)"
    )

    managed, unmanaged = (
        next(n for n, s in states.items() if s == "managed"),
        next(n for n, s in states.items() if s == "unmanaged"),
    )
    baseline = config_from_dict({})
    base_s, base_allowed = timed(pinned_pod_judge(baseline, [], managed), args.repeat)
    with_params = {}
    for node in (managed, unmanaged):
        seconds, allowed = timed(pinned_pod_judge(config, objects, node), args.repeat)
        with_params[node] = (seconds, allowed)
    print(f"A pinned pod judged by volcano-guard-node-name (sandbox CEL, median of {args.repeat}):")
    print(
        f"  no managedNodeSelectors, no params        {base_s * 1e6:8.1f} us "
        f"({'admitted' if base_allowed else 'refused'})"
    )
    for node, (seconds, allowed) in with_params.items():
        print(
            f"  {len(objects)} node-state ConfigMaps, {states[node]:9} node "
            f"{seconds * 1e6:8.1f} us ({'admitted' if allowed else 'refused'}; "
            f"{seconds / base_s:.1f}x)"
        )


def _stored(node_range: NodeRange) -> dict[str, Any]:
    obj = configmap(node_range, "volcano-guard")
    obj["metadata"]["resourceVersion"] = "1"
    return obj


if __name__ == "__main__":
    main()
