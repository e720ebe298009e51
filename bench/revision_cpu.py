"""The webhook's CPU time a Pod CREATE at several git revisions, next to the bare aiohttp floor,
server-bound: each server alone on CPU 1, hey on CPU 0, a fixed number of requests per run,
the server's CPU time read from /proc. Revisions take turns run by run, so each is measured
across the same minutes of the machine. For finding which change costs what.

    .venv/bin/python -m bench.revision_cpu [--requests 30000] [--rounds 3] [REV ...]

REV is a git revision (a worktree of it is served) or a directory holding a checkout; the
current tree is always measured as "current".
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

from bench.admission_load import (
    PINNED_HEY_CPU,
    PINNED_SERVER_CPU,
    ROOT,
    floor_command,
    guard_command,
    pod_review,
    start,
    start_sandbox,
    worktree,
)
from bench.hey import ensure_hey, run_hey
from volcano_guard.certs.generate import generate
from volcano_guard_sandbox.processes import cpu_seconds, free_port


def checkout(stack: ExitStack, rev: str, tmp: Path) -> Path:
    """A directory holding rev: itself if it is one, else a worktree removed at the end."""
    return Path(rev) if Path(rev).is_dir() else worktree(stack, rev, tmp)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("revisions", nargs="*", metavar="REV")
    parser.add_argument("--requests", type=int, default=30_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if (os.cpu_count() or 1) < 2:
        sys.exit("needs two CPUs: the server on one, hey on the other")
    hey = ensure_hey()
    with tempfile.TemporaryDirectory() as directory, ExitStack() as stack:
        tmp = Path(directory)
        made = generate("volcano-guard", "volcano-guard", tmp)
        body = tmp / "pod.json"
        body.write_text(json.dumps(pod_review()))
        _, kubeconfig = start_sandbox(stack, directory)
        servers: dict[str, tuple[str, int]] = {}
        for name in ("floor", "current", *args.revisions):
            port = free_port()
            command = (
                floor_command(made, port)
                if name == "floor"
                else guard_command(made, kubeconfig, port)
            )
            root = ROOT if name in ("floor", "current") else checkout(stack, name, tmp)
            proc = start(stack, ["taskset", "-c", PINNED_SERVER_CPU, *command], port, cwd=root)
            servers[name] = (f"https://127.0.0.1:{port}/validate", proc.pid)
        for url, _ in servers.values():
            run_hey(hey, url, body, 2, 10, None, cpus=PINNED_HEY_CPU)  # warm up
        costs: dict[str, list[float]] = {name: [] for name in servers}
        for _ in range(args.rounds):
            for name, (url, pid) in servers.items():
                before = cpu_seconds(pid)
                result = run_hey(
                    hey, url, body, 0, 50, None, requests=args.requests, cpus=PINNED_HEY_CPU
                )
                costs[name].append((cpu_seconds(pid) - before) / result["total"] * 1e6)
    floor = statistics.median(costs["floor"])
    print(
        f"Pod CREATE, server-bound (server on CPU {PINNED_SERVER_CPU}, hey on CPU "
        f"{PINNED_HEY_CPU}), {args.requests:,} requests a run, {args.rounds} runs each"
    )
    print(f"{'server':<16}{'CPU us/request':>15}  {'(each run)':<26}{'floor / it':>10}")
    for name, values in costs.items():
        runs = "(" + ", ".join(f"{value:.1f}" for value in sorted(values)) + ")"
        median = statistics.median(values)
        print(f"{name:<16}{median:>15.1f}  {runs:<26}{floor / median:>10.2f}")


if __name__ == "__main__":
    main()
