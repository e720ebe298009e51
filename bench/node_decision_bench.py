"""Admission decision time for a pod with spec.nodeName against a 5,000-node cache, and the
memory that cache takes. In process: the full path from request bytes to answer bytes
(webhook.server.admit), next to the same path for a pod without nodeName as the baseline.

    .venv/bin/python -m bench.node_decision_bench [--nodes 5000] [--decisions 20000]
Targets (issue 5): p99 under 1 ms; 5,000 nodes well under 50 MiB.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import tracemalloc

from volcano_guard.base.informer import static_snapshot
from volcano_guard.webhook.config import config_from_dict
from volcano_guard.webhook.policies.base import PolicyContext
from volcano_guard.webhook.policies.node_name import NODES, node_labels
from volcano_guard.webhook.server import admit


def make_node(i: int) -> dict:
    labels = {
        "kubernetes.io/hostname": f"node-{i}",
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": "p4d.24xlarge",
        "topology.kubernetes.io/region": "us-east-1",
        "topology.kubernetes.io/zone": f"us-east-1{'abc'[i % 3]}",
        "nvidia.com/gpu.product": "A100-SXM4-40GB",
        "nvidia.com/gpu.count": "8",
        "volcano.sh/role": "train" if i % 2 else "serve",
        "node-pool": f"pool-{i % 20}",
        "team": f"team-{i % 40}",
    }
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"node-{i}", "labels": labels}}


def review(node: str | None, n: int) -> bytes:
    spec = {
        "schedulerName": "volcano",
        "containers": [
            {"name": "c", "image": "x", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}
        ],
    }
    if node:
        spec["nodeName"] = node
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": f"u{n}",
                "operation": "CREATE",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "namespace": "team-a",
                "name": f"p{n}",
                "userInfo": {"username": "alice"},
                "object": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": f"p{n}", "namespace": "team-a"},
                    "spec": spec,
                },
            },
        }
    ).encode()


def timings(context: PolicyContext, bodies: list[bytes]) -> list[float]:
    out = []
    for body in bodies:
        started = time.perf_counter()
        admit("validate", body, context)
        out.append((time.perf_counter() - started) * 1000)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--decisions", type=int, default=20000)
    args = parser.parse_args()
    tracemalloc.start()
    snapshot = static_snapshot({f"node-{i}": node_labels(make_node(i)) for i in range(args.nodes)})
    cache_mib = tracemalloc.get_traced_memory()[0] / 2**20
    tracemalloc.stop()
    config = config_from_dict(
        {"policies": {"nodeName": {"managedNodeSelectors": ["volcano.sh/role:train"]}}}
    )
    context = PolicyContext(config, {NODES: snapshot})
    bound = [review(f"node-{i % args.nodes}", i) for i in range(args.decisions)]
    plain = [review(None, i) for i in range(args.decisions)]
    timings(context, bound[:1000])  # warm up
    with_node, without = timings(context, bound), timings(context, plain)

    def p(values: list[float], q: int) -> float:
        return statistics.quantiles(values, n=100)[q - 1]

    print(
        f"{args.nodes:,}-node cache: {cache_mib:.1f} MiB "
        f"({cache_mib * 2**20 / args.nodes:,.0f} bytes a node, labels only)"
    )
    print(f"{'admit(), request bytes to answer':<34}{'p50 ms':>9}{'p99 ms':>9}")
    for label, values in (
        ("pod with nodeName (cache lookup)", with_node),
        ("pod without nodeName (baseline)", without),
    ):
        print(f"{label:<34}{p(values, 50):>9.3f}{p(values, 99):>9.3f}")
    print(f"ratio p99: {p(with_node, 99) / p(without, 99):.2f}x")
    ok = p(with_node, 99) < 1.0 and cache_mib < 50
    print(f"targets p99 < 1 ms and cache < 50 MiB: {'meets' if ok else 'MISSES'}")


if __name__ == "__main__":
    main()
