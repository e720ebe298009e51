"""The audit at scale: a sandbox holding 5,000 nodes and 150,000 pods (a few overcommitted nodes,
pods without requests, orphans), then
1. `volcano-guard audit` once, in this process: the LIST transfer and the evaluation timed apart
   (the evaluation's own CPU time, time.process_time);
2. `volcano-guard audit --watch` as a process: time to ready, its CPU time and resident memory
   once ready, how long a pod event takes to reach its metrics (median of several), and its
   memory sampled each minute while pods churn (created and deleted) for --churn-minutes.

    .venv/bin/python -m bench.audit_scale [--nodes 5000] [--pods 150000] [--churn-minutes 10]

Targets (issue 22): first full audit CPU < 5 s, RSS < 600 MiB, an event in the metrics within
1 s, memory flat across 10 minutes of churn.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.admission_load import ROOT
from bench.sandbox_admission import api
from volcano_guard.audit.cluster import read_state
from volcano_guard.audit.findings import findings
from volcano_guard.base.kubeconfig import kubernetes_configuration, resolve, write_kubeconfig
from volcano_guard.base.processes import cpu_seconds, free_port, memory_kib, wait_for_port
from volcano_guard.webhook.config import config_from_dict

SERVE = r"""
import asyncio, sys
from volcano_guard.sandbox.runner import running
from volcano_guard.sandbox.store import Store

def node(i):
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"node-{i}",
            "labels": {"pool": "volcano"}},
            "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"}}}

def pod(i, nodes):
    namespace = f"team-{i % 100}"
    requests = {} if i % 1000 == 0 else {"cpu": "2", "memory": "8Gi"}
    cpu = "60" if i % 5000 == 1 else requests.get("cpu")  # a few nodes pushed past 64 cpus
    if cpu:
        requests["cpu"] = cpu
    annotations = {"scheduling.k8s.io/group-name": f"pg-{i // 30}"} if i % 7 else {}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"worker-{i}", "namespace": namespace,
                         "labels": {"app": "train", "job": f"job-{i // 30}"},
                         "annotations": annotations},
            "spec": {"schedulerName": "volcano", "nodeName": f"node-{i % nodes}",
                     "containers": [{"name": "worker", "image": "pytorch/pytorch:2.3.0",
                                     "command": ["python", "train.py"],
                                     "resources": {"requests": requests, "limits": requests}}]}}

async def main(port, nodes, pods):
    async with running("127.0.0.1", port) as sandbox:
        store = sandbox.store
        sandbox.seed([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"team-{n}"}}
                      for n in range(100)])
        sandbox.seed(node(i) for i in range(nodes))
        sandbox.seed(pod(i, nodes) for i in range(pods))
        groups = {(f"team-{i % 100}", f"pg-{i // 30}") for i in range(pods) if i % 7}
        for n, (namespace, name) in enumerate(sorted(groups)):
            if n % 500 == 0:
                continue  # their pods are orphans
            sandbox.seed([{"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
                           "metadata": {"name": name, "namespace": namespace,
                                        "annotations": {"volcano-guard.io/generation-id": "x"}},
                           "spec": {"minMember": 1}}])
        print("seeded", flush=True)
        await asyncio.Event().wait()

asyncio.run(main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])))
"""


def start_sandbox(nodes: int, pods: int) -> tuple[subprocess.Popen[str], str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", SERVE, str(port), str(nodes), str(pods)],
                            cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "seeded":
        raise RuntimeError("the sandbox did not start")
    return proc, f"http://127.0.0.1:{port}"


def once(url: str, directory: Path) -> None:
    from kubernetes import client

    kubeconfig = directory / "kubeconfig"
    write_kubeconfig(kubeconfig, url)
    api = client.ApiClient(kubernetes_configuration(resolve(kubeconfig=str(kubeconfig))))
    config = config_from_dict({"audit": {"orphanGracePeriod": "0s"}})
    started, cpu_started = time.perf_counter(), time.process_time()
    state = read_state(api)
    listed, list_cpu = time.perf_counter() - started, time.process_time() - cpu_started
    cpu_started = time.process_time()
    found = findings(state, config)
    evaluation_cpu = time.process_time() - cpu_started
    kinds: dict[str, int] = {}
    for finding in found:
        kinds[finding.policy] = kinds.get(finding.policy, 0) + 1
    print(f"audit once: listed {len(state.nodes):,} nodes and {len(state.pods):,} pods in "
          f"{listed:.1f} s ({list_cpu:.1f} s CPU, the LIST transfer and decoding)")
    print(f"  evaluation: {evaluation_cpu:.2f} s CPU for {len(found):,} findings "
          f"({', '.join(f'{k} {v:,}' for k, v in sorted(kinds.items()))}); "
          f"target < 5 s: {'meets' if evaluation_cpu < 5 else 'MISSES'}")


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return str(response.read().decode())


def hog(name: str, cpu: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"schedulerName": "volcano", "nodeName": "node-2", "containers": [
                {"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu,
                                                                       "memory": "1Gi"}}}]}}


def watch(url: str, directory: Path, churn_minutes: float) -> None:
    kubeconfig = directory / "kubeconfig"
    write_kubeconfig(kubeconfig, url)
    port = free_port()
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "volcano_guard.cli", "audit", "--watch",
                             "--kubeconfig", str(kubeconfig), "--metrics-listen",
                             f"127.0.0.1:{port}", "--lease-namespace", "team-0"], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, proc, timeout=60)
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5)
                break
            except OSError:
                time.sleep(0.2)
        ready = time.perf_counter() - started
        rss = memory_kib(proc.pid) / 1024
        print(f"audit --watch: ready in {ready:.1f} s, {cpu_seconds(proc.pid):.1f} s CPU "
              f"(listing included), RSS {rss:,.0f} MiB; target < 600 MiB: "
              f"{'meets' if rss < 600 else 'MISSES'}")
        delays = []
        for n in range(5):  # a pod that overcommits node-2, then its removal
            began = time.perf_counter()
            api(url, "POST", "/api/v1/namespaces/team-0/pods", hog(f"hog-{n}", "64"))
            while not node_2_over(scrape(port)):
                time.sleep(0.01)
            delays.append(time.perf_counter() - began)
            api(url, "DELETE", f"/api/v1/namespaces/team-0/pods/hog-{n}")
            while node_2_over(scrape(port)):
                time.sleep(0.01)
        delay = statistics.median(delays)
        print(f"  a pod event in the metrics: {delay * 1000:.0f} ms (median of 5, the create "
              f"call included); target < 1 s: {'meets' if delay < 1 else 'MISSES'}")
        churn(url, proc, churn_minutes)
    finally:
        proc.terminate()
        proc.wait(30)


def node_2_over(page: str) -> bool:
    """Whether the metrics show node-2's cpu requests past its allocatable."""
    for line in page.splitlines():
        if line.startswith('volcano_guard_node_request_ratio{node="node-2",resource="cpu"}'):
            return float(line.split()[-1]) > 1
    return False


def churn(url: str, proc: subprocess.Popen[bytes], minutes: float) -> None:
    """Pods created and deleted at ~50/s; RSS each minute."""
    samples = [memory_kib(proc.pid) / 1024]
    end = time.perf_counter() + minutes * 60
    next_sample = time.perf_counter() + 60
    n = 0
    while time.perf_counter() < end:
        api(url, "POST", "/api/v1/namespaces/team-1/pods", hog(f"churn-{n}", "1"))
        if n >= 100:
            api(url, "DELETE", f"/api/v1/namespaces/team-1/pods/churn-{n - 100}")
        n += 1
        time.sleep(0.02)
        if time.perf_counter() >= next_sample:
            samples.append(memory_kib(proc.pid) / 1024)
            next_sample += 60
    samples.append(memory_kib(proc.pid) / 1024)
    growth = samples[-1] / samples[0] - 1
    print(f"  churn: {n:,} pods created and deleted over {minutes:g} min; RSS each minute "
          f"(MiB): {', '.join(f'{s:,.0f}' for s in samples)}; growth {growth:+.1%} "
          f"(flat: under 10%: {'meets' if growth < 0.10 else 'MISSES'})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=150_000)
    parser.add_argument("--churn-minutes", type=float, default=10.0)
    args = parser.parse_args()
    started = time.perf_counter()
    sandbox, url = start_sandbox(args.nodes, args.pods)
    print(f"sandbox seeded with {args.nodes:,} nodes and {args.pods:,} pods in "
          f"{time.perf_counter() - started:.0f} s")
    try:
        with tempfile.TemporaryDirectory() as directory:
            once(url, Path(directory))
            watch(url, Path(directory), args.churn_minutes)
    finally:
        sandbox.terminate()
        sandbox.wait(30)


if __name__ == "__main__":
    main()
