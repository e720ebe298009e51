"""Webhook load over HTTPS with keep-alive on loopback: volcano-guard, the floor and a kopf peer.

In one run, side by side:
- the floor: a bare aiohttp HTTPS handler that parses the JSON body (with orjson, as
  volcano-guard does) and answers a constant allowed review: the fastest this stack goes;
- volcano-guard's webhook with every policy on (its caches fed by a sandbox API server), with
  --workers 1 and, when asked, more worker processes (the floor then runs as many);
- the peer: the same resourceRequests rule as a kopf validating webhook (bench/kopf_peer.py),
  served by kopf's own server, pointed at the sandbox for discovery.

Each gets a closed-loop maximum (50 connections, no rate limit) and an open-loop 1,000
requests/s with a ~4 KB Volcano pod, hey sharing the two cores with the server. Every round
starts every server anew (fresh_rounds): identical server processes differ by a few percent,
each keeping its own speed, so one process per server would tie all rounds to one draw. The
closed loops run in turns (bench/hey.py run_hey_in_turns): a paused hey per server, each let
run a quarter second at a time while the others wait, so every server is measured alone yet in
the same moments: this machine's speed swings by a third for seconds at a time, and
back-to-back runs of seconds each put one server in a fast spell, the next in a slow one.
Then the floor and volcano-guard run server-bound: each alone on CPU 1 with hey on CPU 0
(taskset), so throughput measures the server's own CPU time a request, also read from /proc.
Then the floor and volcano-guard get closed-loop runs with a Volcano Job and a PodGroup DELETE
(the guarded path: no UID precondition, so the webhook lists the namespace's pods from the
sandbox). `hey` (Debian package) and kopf (`pip install '.[bench]'`) are installed if missing;
per-request latencies come from hey's CSV output.

With --baseline-rev REV, volcano-guard as of that git revision (checked out in a temporary
worktree) runs beside the current one in the one-process table: a change measured before and
after in the same run.

    .venv/bin/python -m bench.admission_load [--seconds 5] [--rounds 3] [--workers 2]
                                             [--baseline-rev REV]
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import TypeVar

from bench.hey import ensure_hey, run_hey, run_hey_in_turns
from volcano_guard.base.kubeconfig import write_kubeconfig
from volcano_guard.certs.generate import generate
from volcano_guard_sandbox.processes import cpu_seconds, free_port, wait_for_port

ROOT = Path(__file__).resolve().parent.parent

FLOOR = r"""
import json, ssl, sys, orjson
from aiohttp import web
async def handle(request):
    review = orjson.loads(await request.read())
    return web.json_response({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                              "response": {"uid": review["request"]["uid"], "allowed": True}})
context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
context.load_cert_chain(sys.argv[2], sys.argv[3])
app = web.Application(client_max_size=8 * 1024 * 1024)
app.router.add_post("/validate", handle)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), ssl_context=context, print=None,
            access_log=None, reuse_port=True)
"""


CONTROLLER = "system:serviceaccount:volcano-system:volcano-controllers"


def pod_review() -> dict:
    """A ~4 KB AdmissionReview of a Volcano worker pod, as the API server sends it on CREATE
    (the object carries the managedFields the API server records before admission)."""
    env = [{"name": f"VAR_{i}", "value": "x" * 30} for i in range(20)]
    container = {
        "name": "worker",
        "image": "pytorch/pytorch:2.3.0",
        "command": ["python", "train.py"],
        "env": env,
        "resources": {
            "requests": {"cpu": "4", "memory": "16Gi"},
            "limits": {"cpu": "4", "memory": "16Gi"},
        },
    }
    fields = {
        "f:metadata": {
            "f:annotations": {".": {}, "f:scheduling.k8s.io/group-name": {}},
            "f:labels": {".": {}, "f:volcano.sh/job-name": {}, "f:volcano.sh/task-spec": {}},
            "f:ownerReferences": {".": {}, 'k:{"uid":"5d1c"}': {}},
        },
        "f:spec": {
            "f:containers": {
                'k:{"name":"worker"}': {
                    ".": {},
                    "f:command": {},
                    "f:env": {
                        ".": {},
                        **{
                            f'k:{{"name":"VAR_{i}"}}': {".": {}, "f:name": {}, "f:value": {}}
                            for i in range(20)
                        },
                    },
                    "f:image": {},
                    "f:name": {},
                    "f:resources": {
                        ".": {},
                        "f:limits": {".": {}, "f:cpu": {}, "f:memory": {}},
                        "f:requests": {".": {}, "f:cpu": {}, "f:memory": {}},
                    },
                }
            },
            "f:restartPolicy": {},
            "f:schedulerName": {},
        },
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "mnist-worker-0",
            "namespace": "team-a",
            "labels": {"volcano.sh/job-name": "mnist", "volcano.sh/task-spec": "worker"},
            "annotations": {"scheduling.k8s.io/group-name": "mnist"},
            "ownerReferences": [
                {
                    "apiVersion": "batch.volcano.sh/v1alpha1",
                    "kind": "Job",
                    "name": "mnist",
                    "uid": "5d1c",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "managedFields": [
                {
                    "manager": "vc-controller-manager",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": "2026-11-22T01:00:00Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": fields,
                }
            ],
        },
        "spec": {"schedulerName": "volcano", "containers": [container], "restartPolicy": "Never"},
    }
    return admission_review("CREATE", ("", "v1", "Pod", "pods"), CONTROLLER, object=pod)


def volcano_job_review() -> dict:
    """A Volcano Job CREATE: a PyTorch job with a master and a worker task."""

    def task(name: str, replicas: int, cpu: str, memory: str) -> dict:
        container = {
            "name": name,
            "image": "pytorch/pytorch:2.3.0",
            "command": ["torchrun", "--nnodes", str(replicas + 1), "train.py"],
            "env": [{"name": f"VAR_{i}", "value": "x" * 30} for i in range(8)],
            "resources": {
                "requests": {"cpu": cpu, "memory": memory, "nvidia.com/gpu": "1"},
                "limits": {"cpu": cpu, "memory": memory, "nvidia.com/gpu": "1"},
            },
        }
        return {
            "name": name,
            "replicas": replicas,
            "policies": [{"event": "PodEvicted", "action": "RestartJob"}],
            "template": {
                "metadata": {"labels": {"app": "mnist"}},
                "spec": {"containers": [container], "restartPolicy": "OnFailure"},
            },
        }

    job = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "mnist", "namespace": "team-a"},
        "spec": {
            "schedulerName": "volcano",
            "minAvailable": 3,
            "queue": "default",
            "plugins": {"pytorch": ["--master=master", "--worker=worker"]},
            "tasks": [task("master", 1, "4", "16Gi"), task("worker", 2, "8", "32Gi")],
        },
    }
    return admission_review(
        "CREATE", ("batch.volcano.sh", "v1alpha1", "Job", "jobs"), "alice", object=job
    )


def podgroup_delete_review() -> dict:
    """A PodGroup DELETE without a UID precondition: the guarded path, which lists the pods of
    the namespace from the API server (the benchmark's sandbox holds 20 finished ones)."""
    group = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {
            "name": "mnist",
            "namespace": "team-a",
            "uid": "9b2e",
            "creationTimestamp": "2026-11-22T01:00:00Z",
            "annotations": {
                "volcano-guard.io/generation-id": "019a4f6e-1c2d-7000-8000-000000000001"
            },
        },
        "spec": {"minMember": 3, "queue": "default"},
        "status": {"phase": "Completed"},
    }
    return admission_review(
        "DELETE",
        ("scheduling.volcano.sh", "v1beta1", "PodGroup", "podgroups"),
        CONTROLLER,
        oldObject=group,
        options={"apiVersion": "meta.k8s.io/v1", "kind": "DeleteOptions"},
    )


def admission_review(
    operation: str, kind: tuple[str, str, str, str], username: str, **objects: dict
) -> dict:
    """The AdmissionReview the API server sends, every field it fills in; kind is (group,
    version, kind, resource) and objects are request.object / oldObject / options."""
    group, version, kind_name, resource = kind
    metadata = (objects.get("object") or objects["oldObject"])["metadata"]
    gvk = {"group": group, "version": version, "kind": kind_name}
    gvr = {"group": group, "version": version, "resource": resource}
    groups = ["system:authenticated"]
    if username.startswith("system:serviceaccount:"):
        namespace = username.split(":")[2]
        groups = ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", *groups]
    options = {"apiVersion": "meta.k8s.io/v1", "kind": f"{operation.title()}Options"}
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": f"3f0c-{kind_name.lower()}",
            "kind": gvk,
            "resource": gvr,
            "requestKind": gvk,
            "requestResource": gvr,
            "name": metadata["name"],
            "namespace": metadata["namespace"],
            "operation": operation,
            "userInfo": {"username": username, "uid": "9c1f5d1e", "groups": groups},
            "object": None,
            "oldObject": None,
            "dryRun": False,
            "options": options,
            **objects,
        },
    }


def sandbox_objects() -> list[dict]:
    nodes = [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"node-{i}"}} for i in range(100)
    ]
    pods = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"mnist-worker-{i}",
                "namespace": "team-a",
                "annotations": {"scheduling.k8s.io/group-name": "mnist"},
            },
            "spec": {"containers": [{"name": "c", "image": "x"}]},
            "status": {"phase": "Succeeded"},
        }
        for i in range(20)
    ]
    return nodes + pods


def ensure_kopf() -> None:
    if importlib.util.find_spec("kopf") is None:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "kopf>=1.37"], check=False)
    if importlib.util.find_spec("kopf") is None:
        sys.exit("kopf is not installed and could not be installed (pip install '.[bench]')")


def start(
    stack: ExitStack, args: list[str], port: int, cwd: Path = ROOT, **options
) -> subprocess.Popen:
    """Start a server process, stopped when the stack closes; return it once port listens."""
    proc = subprocess.Popen(
        args, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **options
    )
    stack.callback(_stop, proc)
    wait_for_port(port, proc, timeout=60)
    return proc


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(40)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def floor_command(made, port: int) -> list[str]:
    return [sys.executable, "-c", FLOOR, str(port), str(made.cert_file), str(made.key_file)]


def guard_command(made, kubeconfig: Path, port: int, workers: int = 1) -> list[str]:
    return [
        sys.executable,
        "-m",
        "volcano_guard.cli",
        "webhook",
        "--listen",
        f"127.0.0.1:{port}",
        "--metrics-listen",
        f"127.0.0.1:{free_port()}",
        "--tls-cert",
        str(made.cert_file),
        "--tls-key",
        str(made.key_file),
        "--kubeconfig",
        str(kubeconfig),
        "--workers",
        str(workers),
    ]


def start_floor(stack: ExitStack, made, processes: int) -> str:
    port = free_port()
    for _ in range(processes):  # later ones may still be starting; measure() warms up first
        start(stack, floor_command(made, port), port)
    return f"https://127.0.0.1:{port}/validate"


def start_guard(stack: ExitStack, made, kubeconfig: Path, workers: int, root: Path = ROOT) -> str:
    """volcano-guard's webhook from the source tree at root (`python -m` imports it from
    there: the current tree, or a worktree of an earlier revision)."""
    port = free_port()
    start(stack, guard_command(made, kubeconfig, port, workers), port, cwd=root)
    return f"https://127.0.0.1:{port}/validate"


def worktree(stack: ExitStack, rev: str, tmp: str | Path) -> Path:
    """A checkout of rev in tmp (one directory a revision), removed when the stack closes."""
    path = Path(tmp) / f"rev-{rev.replace('/', '_')}"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(path), rev],
        check=True,
    )
    stack.callback(
        subprocess.run,
        ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)],
        check=False,
    )
    return path


def start_sandbox(stack: ExitStack, tmp: str) -> tuple[str, Path]:
    """The sandbox API server seeded with sandbox_objects(): its URL and a kubeconfig for it."""
    seed = Path(tmp) / "seed.json"
    seed.write_text("\n---\n".join(json.dumps(obj) for obj in sandbox_objects()))
    port = free_port()
    start(
        stack,
        [
            sys.executable,
            "-m",
            "volcano_guard.cli",
            "sandbox",
            "--listen",
            f"127.0.0.1:{port}",
            "--load",
            str(seed),
        ],
        port,
    )
    url = f"http://127.0.0.1:{port}"
    kubeconfig = Path(tmp) / "kubeconfig"
    write_kubeconfig(str(kubeconfig), url)
    return url, kubeconfig


def start_kopf(stack: ExitStack, made, sandbox_url: str) -> str:
    port = free_port()
    env = {
        **os.environ,
        "KOPF_PEER_SERVER": sandbox_url,
        "KOPF_PEER_PORT": str(port),
        "KOPF_PEER_CERT": str(made.cert_file),
        "KOPF_PEER_KEY": str(made.key_file),
    }
    start(
        stack,
        [
            sys.executable,
            "-m",
            "kopf",
            "run",
            "--quiet",
            "--standalone",
            "--all-namespaces",
            str(ROOT / "bench" / "kopf_peer.py"),
        ],
        port,
        env=env,
    )
    return f"https://127.0.0.1:{port}/resource-requests"


Runs = dict[str, list[dict]]  # server -> one {"closed": ..., "open": ...} per round
Started = TypeVar("Started")  # what a round's start_servers returns to its run_round
PINNED_SERVER_CPU, PINNED_HEY_CPU = "1", "0"  # the server-bound runs' CPUs (taskset lists)


def measure(
    hey: str,
    targets: dict[str, str],
    body: Path,
    seconds: float,
    rounds: int,
    *,
    open_loop: bool = True,
    hey_cpus: str | None = None,
    pids: dict[str, int] | None = None,
) -> Runs:
    """Each round: the closed-loop maxima, measured in turns (run_hey_in_turns: every server
    alone, yet in the same moments of the machine, `seconds` of turns each), then if asked
    the 1,000 req/s open loop of each server in turn (interleaved rounds: at a fifth of the
    floor's capacity the machine's swings move latency far less than they move throughput).
    hey runs on hey_cpus if given; with the servers' pids, closed loops also record each
    server's CPU time a request ("cpu_us")."""
    for url in targets.values():
        run_hey(hey, url, body, 2, 10, None, cpus=hey_cpus)  # warm up
    cpu_time = (lambda name: cpu_seconds(pids[name])) if pids else None
    closed = run_hey_in_turns(hey, targets, body, rounds, seconds, cpus=hey_cpus, cpu_time=cpu_time)
    runs: Runs = {name: [{"closed": result} for result in closed[name]] for name in targets}
    for index in range(rounds if open_loop else 0):
        for name, url in targets.items():
            runs[name][index]["open"] = run_hey(hey, url, body, seconds, 10, 100, cpus=hey_cpus)
    return runs


def start_pinned(stack: ExitStack, made, kubeconfig: Path) -> tuple[dict[str, str], dict[str, int]]:
    """The floor and volcano-guard (one process each) on CPU 1 only: their URLs and pids."""
    targets, pids = {}, {}
    for name, command in (
        ("floor", floor_command),
        ("volcano-guard", functools.partial(guard_command, kubeconfig=kubeconfig)),
    ):
        port = free_port()
        proc = start(stack, ["taskset", "-c", PINNED_SERVER_CPU, *command(made, port=port)], port)
        targets[name], pids[name] = f"https://127.0.0.1:{port}/validate", proc.pid
    return targets, pids


def measure_server_bound(
    hey: str, targets: dict[str, str], pids: dict[str, int], body: Path, seconds: float, rounds: int
) -> Runs:
    """Each pinned server alone on CPU 1, hey on CPU 0: the server is the bottleneck, so
    throughput is the inverse of its CPU time a request, also recorded. Closed loops in
    turns, as measure()."""
    return measure(
        hey, targets, body, seconds, rounds, open_loop=False, hey_cpus=PINNED_HEY_CPU, pids=pids
    )


def print_pinned(title: str, runs: Runs) -> None:
    """A table of the pinned servers: throughput and CPU time a request, each as a ratio to the
    floor's."""
    print(f"\n{title}; medians of {len(runs['floor'])} rounds, ratios per round (range)")
    print(
        f"{'server':<18}{'max req/s':>10}{'x floor':>21}{'CPU us/req':>12}{'floor CPU / CPU':>25}"
    )
    floor = runs["floor"]
    for name, rounds in runs.items():
        print(
            f"{name:<18}{median(rounds, 'closed', 'rps'):>10,.0f}"
            f"{ratio(rounds, floor, 'closed', 'rps'):>21}"
            f"{median(rounds, 'closed', 'cpu_us'):>12.1f}"
            f"{ratio(floor, rounds, 'closed', 'cpu_us'):>25}"
        )  # floor's over this one's
        report_failures(name, rounds)


def median(runs: list[dict], loop: str, key: str) -> float:
    return statistics.median(run[loop][key] for run in runs)


def ratio(runs: list[dict], floor: list[dict], loop: str, key: str) -> str:
    """Median of the per-round ratios to the floor, and their range."""
    ratios = sorted(run[loop][key] / base[loop][key] for run, base in zip(runs, floor, strict=True))
    # Three decimals: a target is a ratio (0.8x the floor), and two cannot tell 0.796 from it.
    return f"{statistics.median(ratios):.3f} ({ratios[0]:.3f}-{ratios[-1]:.3f})"


def print_table(title: str, runs: Runs, floor: str) -> None:
    print(f"\n{title}: medians of {len(runs[floor])} rounds, ratios per round (range)")
    print(
        f"{'server':<18}{'max req/s':>10}{'x floor':>21}{'p50 ms':>8}{'p99 ms':>8}"
        f"{'p99.9 ms':>10}   at 1,000 req/s:{'p50':>6}{'p99':>8}{'x floor p99':>25}"
    )
    for name, rounds in runs.items():
        print(
            f"{name:<18}{median(rounds, 'closed', 'rps'):>10,.0f}"
            f"{ratio(rounds, runs[floor], 'closed', 'rps'):>21}"
            f"{median(rounds, 'closed', 'p50'):>8.2f}{median(rounds, 'closed', 'p99'):>8.2f}"
            f"{median(rounds, 'closed', 'p999'):>10.2f}   {'':>15}"
            f"{median(rounds, 'open', 'p50'):>6.2f}{median(rounds, 'open', 'p99'):>8.2f}"
            f"{ratio(rounds, runs[floor], 'open', 'p99'):>25}"
        )
        report_failures(name, rounds)


def report_failures(name: str, rounds: list[dict]) -> None:
    failed = sum(run[loop]["total"] - run[loop]["ok"] for run in rounds for loop in run)
    if failed:
        print(f"  {name}: {failed} answers were not HTTP 200")


def fresh_rounds(
    rounds: int, start_servers: Callable[[ExitStack], Started], run_round: Callable[[Started], Runs]
) -> Runs:
    """`rounds` rounds, each against servers freshly started by start_servers and stopped after
    it: a process's speed depends on where its memory landed (identical servers differ by a
    few percent, process to process, and keep their difference), so one process per server
    would carry one draw of that luck into every round."""
    runs: Runs = {}
    for _ in range(rounds):
        with ExitStack() as stack:
            for name, results in run_round(start_servers(stack)).items():
                runs.setdefault(name, []).extend(results)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--seconds",
        type=float,
        default=5.0,
        help="per server and round: of turns, and of each open loop (default 5)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="rounds, each with fresh server processes; medians and per-round "
        "ratios are reported (default 3)",
    )
    parser.add_argument(
        "--baseline-rev",
        metavar="REV",
        help="also run volcano-guard as of this git revision in the one-process table",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=2,
        help="also run volcano-guard with this many worker processes, next to "
        "as many floor processes (1: skip)",
    )
    args = parser.parse_args()
    hey = ensure_hey()
    ensure_kopf()
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        made = generate("volcano-guard", "volcano-guard", tmp)
        bodies = {}
        for name, review in (
            ("pod", pod_review()),
            ("job", volcano_job_review()),
            ("delete", podgroup_delete_review()),
        ):
            bodies[name] = Path(tmp) / f"{name}.json"
            bodies[name].write_text(json.dumps(review))
        print(
            "AdmissionReview bodies: "
            + ", ".join(f"{name} {path.stat().st_size:,} bytes" for name, path in bodies.items())
        )
        sandbox_url, kubeconfig = start_sandbox(stack, tmp)
        baseline = worktree(stack, args.baseline_rev, tmp) if args.baseline_rev else None

        def start_one(round_stack: ExitStack) -> dict[str, str]:
            one = {
                "floor": start_floor(round_stack, made, 1),
                "volcano-guard": start_guard(round_stack, made, kubeconfig, 1),
                "kopf": start_kopf(round_stack, made, sandbox_url),
            }
            if baseline is not None:
                one[f"volcano-guard @{args.baseline_rev}"] = start_guard(
                    round_stack, made, kubeconfig, 1, baseline
                )
            return one

        def start_pair(round_stack: ExitStack, processes: int = 1) -> dict[str, str]:
            """The floor and volcano-guard, each as `processes` processes (" xN" when several)."""
            suffix = f" x{processes}" if processes > 1 else ""
            return {
                f"floor{suffix}": start_floor(round_stack, made, processes),
                f"volcano-guard{suffix}": start_guard(round_stack, made, kubeconfig, processes),
            }

        runs = fresh_rounds(
            args.rounds, start_one, lambda one: measure(hey, one, bodies["pod"], args.seconds, 1)
        )
        print_table("Pod CREATE (4 KB), one process each", runs, "floor")
        print(
            f"volcano-guard / kopf throughput: "
            f"{ratio(runs['volcano-guard'], runs['kopf'], 'closed', 'rps')}"
        )

        if (os.cpu_count() or 1) >= 2:
            pinned = fresh_rounds(
                args.rounds,
                lambda round_stack: start_pinned(round_stack, made, kubeconfig),
                lambda started: measure_server_bound(hey, *started, bodies["pod"], args.seconds, 1),
            )
            print_pinned(
                f"Pod CREATE, server-bound: each server alone on CPU {PINNED_SERVER_CPU}"
                f", hey on CPU {PINNED_HEY_CPU}, closed loop",
                pinned,
            )
        else:
            print("\n(server-bound runs skipped: they need two CPUs)")

        if args.workers > 1:
            many = fresh_rounds(
                args.rounds,
                functools.partial(start_pair, processes=args.workers),
                lambda urls: measure(hey, urls, bodies["pod"], args.seconds, 1),
            )
            print_table(
                f"Pod CREATE, {args.workers} processes each (volcano-guard --workers "
                f"{args.workers})",
                many,
                f"floor x{args.workers}",
            )

        print(
            f"\nOther bodies, closed loop (50 connections), one process each, medians of "
            f"{args.rounds} rounds"
        )
        print(
            f"{'body':<18}{'floor req/s':>12}{'guard req/s':>12}{'x floor':>21}"
            f"{'floor p99':>11}{'guard p99':>11}"
        )
        for name, label in (("job", "Volcano Job"), ("delete", "PodGroup DELETE")):

            def closed_loop(pair: dict[str, str], body: Path = bodies[name]) -> Runs:
                return measure(hey, pair, body, args.seconds, 1, open_loop=False)

            runs = fresh_rounds(args.rounds, start_pair, closed_loop)
            floor, guard = runs["floor"], runs["volcano-guard"]
            print(
                f"{label:<18}{median(floor, 'closed', 'rps'):>12,.0f}"
                f"{median(guard, 'closed', 'rps'):>12,.0f}"
                f"{ratio(guard, floor, 'closed', 'rps'):>21}"
                f"{median(floor, 'closed', 'p99'):>11.2f}{median(guard, 'closed', 'p99'):>11.2f}"
            )
            failed = sum(run["closed"]["total"] - run["closed"]["ok"] for run in guard)
            if failed:
                print(f"  volcano-guard: {failed} answers were not HTTP 200")


if __name__ == "__main__":
    main()
