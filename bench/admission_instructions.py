"""CPU instructions per admission under callgrind: the floor and volcano-guard, exact and
repeatable where the throughput of bench/admission_load.py swings 20% with the machine.

Each server (the floor of admission_load, then volcano-guard's webhook with every policy on)
runs under `valgrind --tool=callgrind`; after a warm-up its counters are zeroed, hey sends it
the same ~4 KB Volcano pod over HTTPS with keep-alive a fixed number of times, and the counters
are dumped. Instructions per request (user space only: the kernel's socket work is not
counted) is that total over the requests; the ratio floor/guard is the instruction-count
analogue of the load benchmark's throughput ratio. Callgrind counts instructions, not time:
it cannot see cache misses, so the same ratio in seconds is lower (BENCHMARKS.md).

    .venv/bin/python -m bench.admission_instructions [--requests 2000] [--baseline DIR]

--baseline DIR also measures the webhook of another checkout (say `git worktree add /tmp/old
HEAD~3`) for a before/after of a change. valgrind (Debian package) is installed if missing.
"""

from __future__ import annotations

import argparse
import functools
import json
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from bench.admission_load import (
    ROOT,
    floor_command,
    guard_command,
    pod_review,
    start_sandbox,
)
from bench.hey import ensure_hey, run_hey
from volcano_guard.certs.generate import generate
from volcano_guard_sandbox.processes import free_port, wait_for_port

WARM_UP = 300  # requests before counting: imports, caches and the TLS session settle


def ensure_valgrind() -> None:
    if shutil.which("valgrind") is None:
        subprocess.run(
            ["apt-get", "install", "-y", "-qq", "valgrind"], check=False, capture_output=True
        )
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed and could not be installed (apt-get install valgrind)")


def instructions_per_request(
    hey: str, server: list[str], cwd: Path, port: int, body: Path, requests: int, out_dir: Path
) -> float:
    """Run server under callgrind, count the instructions of `requests` admissions."""
    out = out_dir / f"callgrind.{port}"
    proc = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}.%p", *server],
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, proc, timeout=300)  # python under valgrind starts ~50x slower
        url = f"https://127.0.0.1:{port}/validate"
        run_hey(hey, url, body, 0, 10, None, requests=WARM_UP)
        subprocess.run(
            ["callgrind_control", "--zero", str(proc.pid)], check=True, capture_output=True
        )
        result = run_hey(hey, url, body, 0, 10, None, requests=requests)
        if result["ok"] != result["total"] or result["lost"]:
            raise RuntimeError(
                f"{server[0]}: {result['total'] - result['ok']} answers were not "
                f"HTTP 200, {result['lost']} lost"
            )
        subprocess.run(
            ["callgrind_control", "--dump", str(proc.pid)], check=True, capture_output=True
        )
        dump = _newest_dump(out_dir, out.name)
        return _total_instructions(dump) / result["total"]
    finally:
        proc.terminate()
        proc.wait(60)


def _newest_dump(out_dir: Path, prefix: str) -> Path:
    for _ in range(50):  # callgrind_control returns before the file is complete
        dumps = sorted(out_dir.glob(f"{prefix}.*.1"), key=lambda p: p.stat().st_mtime)
        if dumps and _total_instructions(dumps[-1]) is not None:
            return dumps[-1]
        time.sleep(0.2)
    raise RuntimeError("callgrind wrote no dump")


def _total_instructions(dump: Path) -> int | None:
    for line in dump.read_text(errors="replace").splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000, help="counted (default 2000)")
    parser.add_argument(
        "--baseline", type=Path, help="also measure the webhook of this checkout (before/after)"
    )
    args = parser.parse_args()
    hey = ensure_hey()
    ensure_valgrind()
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        out_dir = Path(tmp)
        made = generate("volcano-guard", "volcano-guard", tmp)
        body = out_dir / "pod.json"
        body.write_text(json.dumps(pod_review()))
        _, kubeconfig = start_sandbox(stack, tmp)
        servers = {
            "floor": (functools.partial(floor_command, made), ROOT),
            "volcano-guard": (functools.partial(guard_command, made, kubeconfig), ROOT),
        }
        if args.baseline:
            servers[f"volcano-guard ({args.baseline})"] = (
                servers["volcano-guard"][0],
                args.baseline.resolve(),
            )
        print(
            f"Pod CREATE ({body.stat().st_size:,} bytes), {args.requests:,} requests each, "
            "under callgrind"
        )
        print(f"{'server':<40}{'instructions/request':>22}{'floor / server':>16}")
        floor = None
        for name, (command, cwd) in servers.items():
            port = free_port()
            count = instructions_per_request(
                hey, command(port), cwd, port, body, args.requests, out_dir
            )
            floor = floor or count
            print(f"{name:<40}{count:>22,.0f}{floor / count:>16.3f}")


if __name__ == "__main__":
    main()
