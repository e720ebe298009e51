"""Webhook load over HTTPS with keep-alive on loopback: volcano-guard, the floor and a kopf peer.

In one run, side by side:
- the floor: a bare aiohttp HTTPS handler that parses the JSON body (with orjson, as
  volcano-guard does) and answers a constant allowed review: the fastest this stack goes;
- volcano-guard's webhook with every policy on (its caches fed by a sandbox API server), with
  --workers 1 and, when asked, more worker processes (the floor then runs as many);
- the peer: the same resourceRequests rule as a kopf validating webhook (bench/kopf_peer.py),
  served by kopf's own server, pointed at the sandbox for discovery.

Each gets a closed-loop maximum (50 connections, no rate limit) and an open-loop 1,000
requests/s with a ~4 KB Volcano pod; then the floor and volcano-guard get closed-loop runs with
a Volcano Job and a PodGroup DELETE (the guarded path: no UID precondition, so the webhook lists
the namespace's pods from the sandbox). `hey` (Debian package) and kopf (`pip install
'.[bench]'`) are installed if missing; per-request latencies come from hey's CSV output.

    .venv/bin/python bench/admission_load.py [--seconds 10] [--workers 2]
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from certs.generate import generate
from volcano_guard.kubeconfig import write_kubeconfig
from volcano_guard.processes import free_port, wait_for_port

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
            access_log=None)
"""


def pod_review() -> dict:
    """A ~4 KB AdmissionReview of a Volcano worker pod, as the API server sends it on CREATE
    (the object carries the managedFields the API server records before admission)."""
    env = [{"name": f"VAR_{i}", "value": "x" * 30} for i in range(20)]
    container = {"name": "worker", "image": "pytorch/pytorch:2.3.0",
                 "command": ["python", "train.py"], "env": env,
                 "resources": {"requests": {"cpu": "4", "memory": "16Gi"},
                               "limits": {"cpu": "4", "memory": "16Gi"}}}
    fields = {"f:metadata": {"f:annotations": {".": {}, "f:scheduling.k8s.io/group-name": {}},
                             "f:labels": {".": {}, "f:volcano.sh/job-name": {},
                                          "f:volcano.sh/task-spec": {}},
                             "f:ownerReferences": {".": {}, 'k:{"uid":"5d1c"}': {}}},
              "f:spec": {"f:containers": {'k:{"name":"worker"}': {
                  ".": {}, "f:command": {}, "f:env": {".": {}, **{
                      f'k:{{"name":"VAR_{i}"}}': {".": {}, "f:name": {}, "f:value": {}}
                      for i in range(20)}},
                  "f:image": {}, "f:name": {}, "f:resources": {
                      ".": {}, "f:limits": {".": {}, "f:cpu": {}, "f:memory": {}},
                      "f:requests": {".": {}, "f:cpu": {}, "f:memory": {}}}}},
                  "f:restartPolicy": {}, "f:schedulerName": {}}}
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "mnist-worker-0", "namespace": "team-a",
                        "labels": {"volcano.sh/job-name": "mnist",
                                   "volcano.sh/task-spec": "worker"},
                        "annotations": {"scheduling.k8s.io/group-name": "mnist"},
                        "ownerReferences": [{"apiVersion": "batch.volcano.sh/v1alpha1",
                                             "kind": "Job", "name": "mnist", "uid": "5d1c",
                                             "controller": True,
                                             "blockOwnerDeletion": True}],
                        "managedFields": [{"manager": "vc-controller-manager",
                                           "operation": "Update", "apiVersion": "v1",
                                           "time": "2026-11-22T01:00:00Z",
                                           "fieldsType": "FieldsV1", "fieldsV1": fields}]},
           "spec": {"schedulerName": "volcano", "containers": [container],
                    "restartPolicy": "Never"}}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "3f0c-load", "operation": "CREATE", "namespace": "team-a",
                        "kind": {"group": "", "version": "v1", "kind": "Pod"},
                        "resource": {"group": "", "version": "v1", "resource": "pods"},
                        "userInfo": {"username": "system:serviceaccount:volcano-system:"
                                                 "volcano-controllers"},
                        "object": pod}}


def ensure_hey() -> str:
    if shutil.which("hey") is None:
        subprocess.run(["apt-get", "install", "-y", "-qq", "hey"], check=False)
    path = shutil.which("hey")
    if path is None:
        sys.exit("hey is not installed and could not be installed (apt-get install hey)")
    return path


def run_hey(hey: str, url: str, body: Path, seconds: float, concurrency: int,
            rate_per_worker: float | None) -> dict:
    args = [hey, "-z", f"{seconds}s", "-c", str(concurrency), "-m", "POST", "-T",
            "application/json", "-D", str(body), "-o", "csv"]
    if rate_per_worker:
        args += ["-q", str(rate_per_worker)]
    out = subprocess.run([*args, url], capture_output=True, text=True, check=True).stdout
    rows = list(csv.DictReader(io.StringIO(out)))
    latencies = sorted(float(r["response-time"]) * 1000 for r in rows)
    ok = sum(1 for r in rows if r["status-code"] == "200")
    q = statistics.quantiles(latencies, n=1000)
    return {"rps": len(rows) / seconds, "ok": ok, "total": len(rows), "p50": q[499],
            "p99": q[989], "p999": q[998]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    hey = ensure_hey()
    with tempfile.TemporaryDirectory() as tmp:
        made = generate("volcano-guard", "volcano-guard", tmp)
        body = Path(tmp) / "review.json"
        body.write_text(json.dumps(pod_review()))
        print(f"AdmissionReview body: {body.stat().st_size:,} bytes")
        procs = []
        try:
            floor_port = free_port()
            procs.append(subprocess.Popen([sys.executable, "-c", FLOOR, str(floor_port),
                                           str(made.cert_file), str(made.key_file)]))
            wait_for_port(floor_port, procs[-1])
            sandbox_port = free_port()
            nodes = Path(tmp) / "nodes.yaml"
            nodes.write_text("\n---\n".join(json.dumps(
                {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"node-{i}"}})
                for i in range(100)))
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "volcano_guard.cli", "sandbox", "--listen",
                 f"127.0.0.1:{sandbox_port}", "--load", str(nodes)], cwd=ROOT,
                stderr=subprocess.DEVNULL))
            wait_for_port(sandbox_port, procs[-1])
            kubeconfig = Path(tmp) / "kubeconfig"
            write_kubeconfig(str(kubeconfig), f"http://127.0.0.1:{sandbox_port}")
            guard_port, metrics_port = free_port(), free_port()
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "volcano_guard.cli", "webhook", "--listen",
                 f"127.0.0.1:{guard_port}", "--metrics-listen", f"127.0.0.1:{metrics_port}",
                 "--tls-cert", str(made.cert_file), "--tls-key", str(made.key_file),
                 "--kubeconfig", str(kubeconfig)], cwd=ROOT, stderr=subprocess.DEVNULL))
            wait_for_port(guard_port, procs[-1])
            targets = {"floor": f"https://127.0.0.1:{floor_port}/validate",
                       "volcano-guard": f"https://127.0.0.1:{guard_port}/validate"}
            results = {}
            for name, url in targets.items():
                run_hey(hey, url, body, 2, 10, None)  # warm up
                results[name] = (run_hey(hey, url, body, args.seconds, 50, None),
                                 run_hey(hey, url, body, args.seconds, 10, 100))
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(10)
    floor_max, floor_open = results["floor"]
    print(f"{'server':<15}{'max req/s':>11}{'x floor':>9}{'p50 ms':>9}{'p99 ms':>9}"
          f"{'p99.9 ms':>10}   at 1,000 req/s: {'p50':>6}{'p99':>8}{'x floor p99':>13}")
    for name, (closed, opened) in results.items():
        print(f"{name:<15}{closed['rps']:>11,.0f}{closed['rps'] / floor_max['rps']:>9.2f}"
              f"{closed['p50']:>9.2f}{closed['p99']:>9.2f}{closed['p999']:>10.2f}   "
              f"{'':>16}{opened['p50']:>6.2f}{opened['p99']:>8.2f}"
              f"{opened['p99'] / floor_open['p99']:>13.2f}")
        if closed["ok"] != closed["total"] or opened["ok"] != opened["total"]:
            print(f"  {name}: {closed['total'] - closed['ok'] + opened['total'] - opened['ok']} "
                  "answers were not 200")


if __name__ == "__main__":
    main()
