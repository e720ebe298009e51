"""`hey`, the HTTP load generator from Debian, run and read: shared by the load benchmark and
the soak test."""

from __future__ import annotations

import bisect
import csv
import io
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from volcano_guard_sandbox.processes import stat_fields


def find_hey(install: bool = True) -> str | None:
    """hey's path, installing the Debian package when missing (and allowed); None if absent."""
    if shutil.which("hey") is None and install:
        subprocess.run(["apt-get", "install", "-y", "-qq", "hey"], check=False, capture_output=True)
    return shutil.which("hey")


def ensure_hey() -> str:
    path = find_hey()
    if path is None:
        sys.exit("hey is not installed and could not be installed (apt-get install hey)")
    return path


# hey's report keeps at most this many results (requester.go maxResult); its CSV lists no more.
HEY_MAX_RESULTS = 1_000_000
_REQUESTS_A_RUN = HEY_MAX_RESULTS // 2


def run_hey(
    hey: str,
    url: str,
    body: Path,
    seconds: float,
    concurrency: int,
    rate_per_worker: float | None,
    *,
    requests: int | None = None,
    cpus: str | None = None,
) -> dict:
    """POST body to url for `seconds` (or exactly `requests` times) from concurrency workers,
    each at rate_per_worker requests/s if given; hey runs on the given CPUs (taskset list) if
    any. hey's CSV lists only the requests that got an HTTP answer, so throughput counts
    answers; with `requests`, "lost" counts the rest (connection errors and timeouts). Many
    requests are sent as consecutive hey runs that each stay below hey's result limit, so the
    count never depends on how fast the machine is."""
    args = _hey_args(hey, body, concurrency, cpus)
    if rate_per_worker:
        args += ["-q", str(rate_per_worker)]
    if requests:
        requests -= requests % concurrency  # hey sends requests // concurrency per worker
        step = _REQUESTS_A_RUN - _REQUESTS_A_RUN % concurrency
        runs = [
            _answers([*args, "-n", str(min(step, requests - sent)), url])
            for sent in range(0, requests, step)
        ]
    else:
        runs = [_answers([*args, "-z", f"{seconds}s", url])]
    times = [taken for run in runs for taken in run.times]
    if not times:
        raise RuntimeError(f"hey got no answer from {url}")
    elapsed = sum(run.elapsed for run in runs) if requests else seconds
    return {
        "rps": len(times) / elapsed,
        "total": len(times),
        "ok": sum(run.ok for run in runs),
        "lost": (requests - len(times)) if requests else 0,
        **_quantiles(times),
    }


@dataclass
class _Answers:
    """One hey run's answered requests: response times (s), how many were 200, and the time
    from its first request to its last answer."""

    times: list[float]
    ok: int
    elapsed: float


def _answers(command: list[str]) -> _Answers:
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    answers = _Answers([], 0, 0.0)
    for row in csv.DictReader(io.StringIO(out)):
        taken = float(row["response-time"])
        answers.times.append(taken)
        answers.ok += row["status-code"] == "200"
        answers.elapsed = max(answers.elapsed, float(row["offset"]) + taken)
    if len(answers.times) >= HEY_MAX_RESULTS:
        raise RuntimeError(
            f"hey kept only its first {HEY_MAX_RESULTS:,} results; run it for "
            "fewer requests or seconds"
        )
    return answers


@dataclass
class _Paused:
    """A hey started paused, and the turns it was let run (start, end; time.time())."""

    process: subprocess.Popen[str]
    turns: list[tuple[float, float]] = field(default_factory=list)


def run_hey_in_turns(
    hey: str,
    urls: dict[str, str],
    body: Path,
    rounds: int,
    seconds: float,
    *,
    turn: float = 0.25,
    concurrency: int = 50,
    cpus: str | None = None,
    cpu_time: Callable[[str], float] | None = None,
) -> dict[str, list[dict]]:
    """Closed-loop maximum throughput of several servers measured in turns: a hey per url, all
    started paused (SIGSTOP); each in turn runs for `turn` seconds while the others stay paused,
    keeping their connections. Every server is so measured alone, yet in the same moments of
    the machine as the others: this machine's speed swings by a third for seconds at a time,
    which back-to-back runs of seconds each catch on one server and not the next.

    Each round gives each server `seconds` of turns. Per server and round: "rps" (answers
    completed in the round over the time of its turns), "total", "ok", p50/p99/p99.9 of the
    requests sent and answered within one turn, and with cpu_time (name -> the server's CPU
    seconds so far) "cpu_us", its CPU time a request."""
    names = list(urls)
    cycles = max(1, round(seconds / turn))
    results: dict[str, list[dict]] = {name: [] for name in names}
    paused: dict[str, _Paused] = {}
    try:
        for name, url in urls.items():
            paused[name] = _start_paused(
                [*_hey_args(hey, body, concurrency, cpus), "-z", "24h", url]
            )
        begins, spent = [], []
        for _ in range(rounds):
            used = {name: cpu_time(name) for name in names} if cpu_time else {}
            begins.append(time.time())
            for cycle in range(cycles):
                for name in names[cycle % len(names) :] + names[: cycle % len(names)]:
                    _run_turn(paused[name], turn)
            time.sleep(0.02)  # the last turn's requests in flight are answered
            spent.append(
                {name: cpu_time(name) - used[name] for name in used} if cpu_time is not None else {}
            )
        rows = _stop_and_read(paused)
    finally:
        for running in paused.values():
            running.process.kill()
    # A round's answers are those completed from its start to the next's (or for good): hey's
    # clock starts a few milliseconds after its first turn, so its times read that much early.
    ends = [*begins[1:], float("inf")]
    for name in names:
        turns = paused[name].turns
        for begun, ended, cpu in zip(begins, ends, spent, strict=True):
            results[name].append(_turns_result(rows[name], turns, begun, ended, cpu.get(name)))
    return results


def _hey_args(hey: str, body: Path, concurrency: int, cpus: str | None) -> list[str]:
    """hey's command up to its own options (the URL goes last: Go stops at the first argument
    that is not an option)."""
    args = ["taskset", "-c", cpus] if cpus else []
    return [
        *args,
        hey,
        "-c",
        str(concurrency),
        "-m",
        "POST",
        "-T",
        "application/json",
        "-D",
        str(body),
        "-o",
        "csv",
    ]


def _start_paused(args: list[str]) -> _Paused:
    # The shell stops itself before it execs hey, so not one request leaves before its turn.
    process = subprocess.Popen(
        ["sh", "-c", 'kill -STOP $$; exec "$@"', "sh", *args], stdout=subprocess.PIPE, text=True
    )
    while stat_fields(process.pid)[0] != "T":
        if process.poll() is not None:
            raise RuntimeError(f"{args[0]} exited before its first turn")
        time.sleep(0.001)
    return _Paused(process)


def _run_turn(paused: _Paused, seconds: float) -> None:
    begun = time.time()
    os.kill(paused.process.pid, signal.SIGCONT)
    time.sleep(seconds)
    os.kill(paused.process.pid, signal.SIGSTOP)
    paused.turns.append((begun, time.time()))
    if paused.process.poll() is not None:
        raise RuntimeError(
            f"the load generator exited during its turn (exit status {paused.process.returncode})"
        )


def _stop_and_read(paused: dict[str, _Paused]) -> dict[str, list[tuple[float, float, bool]]]:
    """Stop each hey (SIGINT: it reports what it has), and read its requests as (sent,
    answered, HTTP 200), in time.time(): hey's offsets count from its first turn."""
    for running in paused.values():
        running.process.send_signal(signal.SIGINT)
        os.kill(running.process.pid, signal.SIGCONT)
    rows = {}
    for name, running in paused.items():
        out, _ = running.process.communicate(timeout=60)
        start = running.turns[0][0]
        rows[name] = [
            (
                start + float(r["offset"]),
                start + float(r["offset"]) + float(r["response-time"]),
                r["status-code"] == "200",
            )
            for r in csv.DictReader(io.StringIO(out))
        ]
    return rows


def _turns_result(
    rows: list[tuple[float, float, bool]],
    turns: list[tuple[float, float]],
    begun: float,
    ended: float,
    cpu: float | None,
) -> dict:
    mine = [(a, b) for a, b in turns if begun <= a < ended]
    answered = [row for row in rows if begun <= row[1] < ended]
    if not answered:
        raise RuntimeError("hey got no answer in a round")
    starts = [a for a, _ in mine]
    within = []
    for sent, done, _ in answered:
        index = bisect.bisect_right(starts, sent) - 1
        if index >= 0 and done <= mine[index][1]:
            within.append(done - sent)
    result = {
        "rps": len(answered) / sum(b - a for a, b in mine),
        "total": len(answered),
        "ok": sum(1 for *_, ok in answered if ok),
        "lost": 0,
        **_quantiles(within or [done - sent for sent, done, _ in answered]),
    }
    if cpu is not None:
        result["cpu_us"] = cpu / len(answered) * 1e6
    return result


def _quantiles(seconds: Iterable[float]) -> dict[str, float]:
    """p50, p99 and p99.9 in milliseconds."""
    q = statistics.quantiles(sorted(s * 1000 for s in seconds), n=1000)
    return {"p50": q[499], "p99": q[989], "p999": q[998]}
