"""What each of the guard's in-server policies costs kube-apiserver 1.30 at the extremes.

    python -m bench.policy_cost [--tasks N --containers M]

Runs the ValidatingAdmissionPolicies `volcano-guard manifests` prints (default config) in the
sandbox's admission-policy evaluator, which counts CEL cost as cel-go v0.17.8 does, and prints,
per policy: the matchConditions' cost against their 2,500,000 budget, each variable's, the
validations' total against the 10,000,000 budget, and the largest single expression against the
1,000,000 per-call limit, with the headroom. Objects: a Volcano Job of T tasks x C containers
(30 x 40 by default, and the largest such Job the API server stores, see docs/decisions/sandbox.md).
"""

from __future__ import annotations

import argparse
import json
from typing import Any


def volcano_job(tasks: int, containers: int, name_length: int = 8) -> dict[str, Any]:
    """A valid Volcano Job: every container requests cpu and memory within its limits."""
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "team-a"},
        "spec": {
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
                                    "image": "busybox",
                                    "resources": {
                                        "requests": {"cpu": "500m", "memory": "1Gi"},
                                        "limits": {"cpu": "1", "memory": "2Gi"},
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
    }


def size_of(obj: Any) -> int:
    return len(json.dumps(obj, separators=(",", ":")).encode())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=30)
    parser.add_argument("--containers", type=int, default=40)
    args = parser.parse_args(argv)
    job = volcano_job(args.tasks, args.containers)
    print(f"Job {args.tasks} x {args.containers}: {size_of(job):,} bytes")


if __name__ == "__main__":
    main()
