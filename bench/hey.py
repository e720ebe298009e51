"""`hey`, the HTTP load generator from Debian, run and read: shared by the load benchmark and
the soak test."""

from __future__ import annotations

import csv
import io
import shutil
import statistics
import subprocess
import sys
from pathlib import Path


def find_hey(install: bool = True) -> str | None:
    """hey's path, installing the Debian package when missing (and allowed); None if absent."""
    if shutil.which("hey") is None and install:
        subprocess.run(["apt-get", "install", "-y", "-qq", "hey"], check=False,
                       capture_output=True)
    return shutil.which("hey")


def ensure_hey() -> str:
    path = find_hey()
    if path is None:
        sys.exit("hey is not installed and could not be installed (apt-get install hey)")
    return path


def run_hey(hey: str, url: str, body: Path, seconds: float, concurrency: int,
            rate_per_worker: float | None, *, requests: int | None = None,
            cpus: str | None = None) -> dict:
    """POST body to url for `seconds` (or exactly `requests` times) from concurrency workers,
    each at rate_per_worker requests/s if given; hey runs on the given CPUs (taskset list) if
    any. hey's CSV lists only the requests that got an HTTP answer, so throughput counts
    answers; with `requests`, "lost" counts the rest (connection errors and timeouts)."""
    if requests:
        requests -= requests % concurrency  # hey sends requests // concurrency per worker
    args = ["taskset", "-c", cpus] if cpus else []
    args += [hey, "-c", str(concurrency), "-m", "POST", "-T", "application/json", "-D",
             str(body), "-o", "csv"]
    args += ["-n", str(requests)] if requests else ["-z", f"{seconds}s"]
    if rate_per_worker:
        args += ["-q", str(rate_per_worker)]
    out = subprocess.run([*args, url], capture_output=True, text=True, check=True).stdout
    rows = list(csv.DictReader(io.StringIO(out)))
    latencies = sorted(float(r["response-time"]) * 1000 for r in rows)
    if not latencies:
        raise RuntimeError(f"hey got no answer from {url}")
    q = statistics.quantiles(latencies, n=1000)
    elapsed = max(float(r["offset"]) + float(r["response-time"]) for r in rows)
    return {"rps": len(rows) / (elapsed if requests else seconds), "total": len(rows),
            "ok": sum(1 for r in rows if r["status-code"] == "200"),
            "lost": (requests - len(rows)) if requests else 0,
            "p50": q[499], "p99": q[989], "p999": q[998]}
