"""What the admission chain costs a sandbox write: pod creates with no webhook registered; with
the guard's webhook registrations alone (`volcano-guard manifests` with
`validatingAdmissionPolicies: false`, caBundle set) and the guard's webhook process behind
them; as shipped (the registrations and the ValidatingAdmissionPolicies, which the sandbox runs
in-process as kube-apiserver does); and with the policies alone (every Validating and
MutatingAdmissionPolicy and binding manifests prints for the version, no webhook registration).
Rounds alternate (none, webhook, shipped, policies, none...) so all are measured in the same
moments of the machine; what a mode registers is deleted and created between rounds. Then the
CEL time of each policy alone: one pod's validation, repeated, in this process.

The sandbox plays --kubernetes-version (1.30 to 1.36, default 1.36), and the registrations are
what `volcano-guard manifests --kubernetes-version` prints for it, whatever kinds that is
(MutatingAdmissionPolicies at 1.36 once manifests prints them). Per mode, the guard webhook's
request counter (volcano_guard_admission_requests_total, from its /metrics) and the sandbox's
apiserver_admission_webhook_request_total over the one-at-a-time creates: with no pod CREATE
sent to the webhook, both stay at 0.

Volcano pods (with requests, so the guard allows them) are created by generateName: one at a
time over one kept-alive connection (the latency a write gains), then by hey over 10 kept-alive
connections, closed loop (the writes/s the sandbox sustains). The sandbox and the webhook are
processes of their own. Prints both per mode and the overhead: the difference of the medians.
Then as shipped against the policies alone once more, in alternating blocks of 100 writes
(--blocks a mode) with the policies registered throughout: the steadier figure of the two.

    .venv/bin/python -m bench.sandbox_admission [--seconds 5] [--rounds 3] [--writes 500]
        [--blocks 20]
        [--kubernetes-version 1.36] [--runtime-config GROUP/VERSION=true]
        [--modes "no webhook,webhook only,as shipped,policies only"]
"""

from __future__ import annotations

import argparse
import base64
import collections
import http.client
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from bench.admission_load import start
from bench.hey import ensure_hey, run_hey
from volcano_guard.base.kubeconfig import write_kubeconfig
from volcano_guard.certs.generate import generate
from volcano_guard_sandbox.guarded_sandbox import NAMESPACE, SERVICE, shipped_config
from volcano_guard_sandbox.processes import free_port

PODS = "/api/v1/namespaces/team-a/pods"
NONE, WEBHOOK, SHIPPED, POLICIES = "no webhook", "webhook only", "as shipped", "policies only"
MODES = (NONE, WEBHOOK, SHIPPED, POLICIES)
GUARD_REQUESTS = "volcano_guard_admission_requests_total"
APISERVER_WEBHOOK_REQUESTS = "apiserver_admission_webhook_request_total"
SEED = [
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}},
    {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"}},
]


def volcano_pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "worker-", "namespace": "team-a", "labels": {"app": "train"}},
        "spec": {
            "schedulerName": "volcano",
            "containers": [
                {
                    "name": "worker",
                    "image": "pytorch/pytorch:2.3.0",
                    "resources": {"requests": {"cpu": "1", "memory": "2Gi"}},
                }
            ],
        },
    }


def manifests(tmp: Path, config: dict[str, Any], version: str) -> list[dict[str, Any]]:
    """What `volcano-guard manifests` prints for config and Kubernetes version."""
    path = tmp / "manifests-config.yaml"
    path.write_text(yaml.safe_dump(config))
    command = [sys.executable, "-m", "volcano_guard.cli", "manifests", "--config", str(path)]
    printed = subprocess.run(
        [*command, "--kubernetes-version", version],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [doc for doc in yaml.safe_load_all(printed) if doc]


def registrations(
    tmp: Path, ca_file: Path, config: dict[str, Any], version: str
) -> list[dict[str, Any]]:
    """What manifests prints for config, caBundle set as certs inject leaves it."""
    bundle = base64.b64encode(ca_file.read_bytes()).decode()
    documents = manifests(tmp, config, version)
    for document in documents:
        for webhook in document.get("webhooks", ()):
            webhook["clientConfig"]["caBundle"] = bundle
    return documents


def api(url: str, method: str, path: str, body: Any = None) -> None:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        url + path, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10):
        pass


def collection(document: dict[str, Any]) -> str:
    """The REST path of a printed object's collection, from its apiVersion and kind."""
    kind = document["kind"].lower()
    plural = f"{kind[:-1]}ies" if kind.endswith("y") else f"{kind}s"
    api_version = document["apiVersion"]
    prefix = f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"
    namespace = document["metadata"].get("namespace")
    return f"{prefix}/namespaces/{namespace}/{plural}" if namespace else f"{prefix}/{plural}"


def register(url: str, documents: list[dict[str, Any]], on: bool) -> None:
    for document in documents:
        path = collection(document)
        if on:
            api(url, "POST", path, document)
        else:
            api(url, "DELETE", f"{path}/{document['metadata']['name']}")


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--writes", type=int, default=500, help="writes one at a time per round (default 500)"
    )
    parser.add_argument(
        "--blocks",
        type=int,
        default=20,
        help="alternating blocks of 100 writes a mode for as shipped / policies only "
        "(default 20; 0: none)",
    )
    parser.add_argument(
        "--kubernetes-version",
        default="1.36",
        metavar="1.MINOR",
        help="the version the sandbox plays and manifests prints for, 1.30 to 1.36 (default "
        "%(default)s)",
    )
    parser.add_argument(
        "--runtime-config",
        default="",
        metavar="GROUP/VERSION=true,...",
        help="passed to the sandbox (e.g. admissionregistration.k8s.io/v1beta1=true at 1.34)",
    )
    parser.add_argument(
        "--modes",
        default=",".join(MODES),
        help=f"comma-separated, of: {', '.join(MODES)} (default: all)",
    )
    args = parser.parse_args()
    args.modes = [mode.strip() for mode in args.modes.split(",") if mode.strip()]
    if unknown := sorted(set(args.modes) - set(MODES)):
        parser.error(f"--modes: {unknown[0]!r} is not one of {', '.join(MODES)}")
    if not re.fullmatch(r"1\.3[0-6]", args.kubernetes_version):
        parser.error(f"--kubernetes-version: {args.kubernetes_version!r} is not 1.30 to 1.36")
    return args


def main() -> None:
    args = arguments()
    version = args.kubernetes_version
    hey = ensure_hey()
    with tempfile.TemporaryDirectory() as directory, ExitStack() as stack:
        tmp = Path(directory)
        certs = generate(SERVICE, NAMESPACE, tmp / "guard", days=1)
        seed = tmp / "seed.yaml"
        seed.write_text(yaml.safe_dump_all(SEED))
        sandbox_port, webhook_port, guard_metrics_port = free_port(), free_port(), free_port()
        cli = [sys.executable, "-m", "volcano_guard.cli"]
        runtime = ["--runtime-config", args.runtime_config] if args.runtime_config else []
        start(
            stack,
            [
                *cli,
                "sandbox",
                "--listen",
                f"127.0.0.1:{sandbox_port}",
                "--load",
                str(seed),
                "--service",
                f"{NAMESPACE}/{SERVICE}:443=127.0.0.1:{webhook_port}",
                "--kubernetes-version",
                version,
                *runtime,
            ],
            sandbox_port,
        )
        url = f"http://127.0.0.1:{sandbox_port}"
        kubeconfig = tmp / "kubeconfig"
        write_kubeconfig(kubeconfig, url)
        config = tmp / "config.yaml"
        config.write_text(yaml.safe_dump(shipped_config()))
        start(
            stack,
            [
                *cli,
                "webhook",
                "--listen",
                f"127.0.0.1:{webhook_port}",
                "--metrics-listen",
                f"127.0.0.1:{guard_metrics_port}",
                "--tls-cert",
                str(certs.cert_file),
                "--tls-key",
                str(certs.key_file),
                "--kubeconfig",
                str(kubeconfig),
                "--config",
                str(config),
            ],
            webhook_port,
        )
        shipped = registrations(tmp, certs.ca_file, shipped_config(), version)
        without_policies = {**shipped_config(), "validatingAdmissionPolicies": False}
        registered = {
            NONE: [],
            WEBHOOK: registrations(tmp, certs.ca_file, without_policies, version),
            SHIPPED: shipped,
            POLICIES: [doc for doc in shipped if "AdmissionPolicy" in doc["kind"]],
        }
        print(f"Kubernetes {version}: as shipped registers " + kinds(shipped))
        body = tmp / "pod.json"
        body.write_text(json.dumps(volcano_pod()))
        target = url + PODS
        counters = {
            "guard": f"http://127.0.0.1:{guard_metrics_port}/metrics",
            "apiserver": f"{url}/metrics",
        }
        runs: dict[str, list[dict[str, dict]]] = {mode: [] for mode in args.modes}
        for index in range(len(runs) * args.rounds + 1):  # a first, unmeasured round warms up
            mode = list(runs)[index % len(runs)]
            register(url, registered[mode], on=True)
            before = webhook_requests(counters)
            one_at_a_time = sequential(sandbox_port, body.read_bytes(), args.writes)
            calls = {k: v - before[k] for k, v in webhook_requests(counters).items()}
            closed = run_hey(hey, target, body, args.seconds, 10, None)
            register(url, registered[mode], on=False)
            if index > 0:
                runs[mode].append({"closed": closed, "one": one_at_a_time, "calls": calls})
        report(runs, args.rounds, args.writes)
        if SHIPPED in registered and POLICIES in registered and args.blocks:
            interleaved(url, sandbox_port, body.read_bytes(), shipped, args.blocks)
        if POLICIES in registered:
            cel_time(registered[POLICIES])


def kinds(documents: list[dict[str, Any]]) -> str:
    counted = collections.Counter(f"{d['kind']} ({d['apiVersion']})" for d in documents)
    return ", ".join(f"{n} {kind}" for kind, n in counted.items())


def webhook_requests(urls: dict[str, str]) -> dict[str, float]:
    """The guard webhook's request counter and the sandbox's count of webhook calls, each
    summed over its labels."""
    names = {"guard": GUARD_REQUESTS, "apiserver": APISERVER_WEBHOOK_REQUESTS}
    totals = {}
    for source, metrics_url in urls.items():
        with urllib.request.urlopen(metrics_url, timeout=10) as response:
            text = response.read().decode()
        totals[source] = sum(
            sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == names[source]
        )
    return totals


def cel_time(documents: list[dict[str, Any]], repeats: int = 2000) -> None:
    """Each pod policy's validation of one Volcano pod, alone, in this process (CEL compiled
    once, as the sandbox keeps it)."""
    from volcano_guard_sandbox.apiserver.policy_validation import PolicyInputs, validate

    pod = {**volcano_pod(), "metadata": {"name": "worker-1", "namespace": "team-a"}}
    inputs = PolicyInputs(
        pod,
        None,
        {
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "namespace": "team-a",
            "name": "worker-1",
            "operation": "CREATE",
            "userInfo": {"username": "alice"},
        },
    )
    print(f"CEL time of each policy for one Volcano pod (median of {repeats}, in process):")
    for policy in (
        d for d in documents if d["kind"] == "ValidatingAdmissionPolicy" and _judges_pods(d)
    ):
        validate(policy["spec"], inputs)  # compiled and cached
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            validate(policy["spec"], inputs)
            times.append((time.perf_counter() - started) * 1e6)
        print(f"  {policy['metadata']['name']:<36}{statistics.median(times):>8.1f} us")


def _judges_pods(policy: dict[str, Any]) -> bool:
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    return any({"pods", "pods/binding"} & set(rule["resources"]) for rule in rules)


def sequential(port: int, body: bytes, writes: int) -> dict[str, float]:
    """p50 and p99 (ms) of writes sent one at a time over one kept-alive connection."""
    return percentiles(write_times(port, body, writes))


def write_times(port: int, body: bytes, writes: int) -> list[float]:
    """Each write's time (ms), sent one at a time over one kept-alive connection."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    times = []
    for _ in range(writes):
        started = time.perf_counter()
        connection.request("POST", PODS, body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        response.read()
        if response.status != 201:
            raise RuntimeError(f"create answered {response.status}")
        times.append((time.perf_counter() - started) * 1000)
    connection.close()
    return times


def percentiles(times: list[float]) -> dict[str, float]:
    quantiles = statistics.quantiles(times, n=100)
    return {"p50": quantiles[49], "p99": quantiles[98]}


def interleaved(
    url: str, port: int, body: bytes, shipped: list[dict[str, Any]], blocks: int
) -> None:
    """As shipped against the policies alone, in alternating blocks of 100 writes: the policies
    stay registered and only what as shipped adds (the webhook configurations) comes and goes,
    so both modes share the machine's moments and the sandbox's state; the pooled times of each
    mode give the figure the rounds above give with more noise."""
    added = [doc for doc in shipped if "AdmissionPolicy" not in doc["kind"]]
    register(url, [doc for doc in shipped if doc not in added], on=True)
    times: dict[str, list[float]] = {SHIPPED: [], POLICIES: []}
    for block in range(2 * blocks + 1):  # the first block warms up
        mode = (SHIPPED, POLICIES)[block % 2]
        if mode == SHIPPED:
            register(url, added, on=True)
        block_times = write_times(port, body, 100)
        if mode == SHIPPED:
            register(url, added, on=False)
        if block > 0:
            times[mode] += block_times
    shipped_times, alone = percentiles(times[SHIPPED]), percentiles(times[POLICIES])
    print(
        f"{SHIPPED} / {POLICIES}, {blocks} alternating blocks of 100 writes each: "
        + "; ".join(
            f"{q} {shipped_times[q]:.2f} / {alone[q]:.2f} ms = {shipped_times[q] / alone[q]:.2f}x"
            for q in ("p50", "p99")
        )
    )


def report(runs: dict[str, list[dict[str, dict]]], rounds: int, writes: int) -> None:
    def median(mode: str, loop: str, key: str) -> float:
        return statistics.median(run[loop][key] for run in runs[mode])

    print(f"Pod CREATE through the sandbox, medians of {rounds} rounds")
    print(
        f"{'mode':<18}{'one at a time: p50 ms':>22}{'p99 ms':>8}"
        f"{'   10 connections: writes/s':>28}{'p50 ms':>8}{'p99 ms':>8}"
        f"{f'   webhook requests / {writes} creates: guard':>44}{'apiserver':>10}"
    )
    for mode in runs:
        print(
            f"{mode:<18}{median(mode, 'one', 'p50'):>22.2f}{median(mode, 'one', 'p99'):>8.2f}"
            f"{median(mode, 'closed', 'rps'):>28,.0f}{median(mode, 'closed', 'p50'):>8.2f}"
            f"{median(mode, 'closed', 'p99'):>8.2f}"
            f"{max(run['calls']['guard'] for run in runs[mode]):>44,.0f}"
            f"{max(run['calls']['apiserver'] for run in runs[mode]):>10,.0f}"
        )
    if NONE in runs:
        for mode in (m for m in (WEBHOOK, SHIPPED, POLICIES) if m in runs):
            print(
                f"{mode}: overhead a write "
                f"{median(mode, 'one', 'p50') - median(NONE, 'one', 'p50'):.2f} ms (p50), "
                f"{median(mode, 'one', 'p99') - median(NONE, 'one', 'p99'):.2f} ms (p99); "
                f"writes/s {median(mode, 'closed', 'rps') / median(NONE, 'closed', 'rps'):.2f}x "
                "of none"
            )
    if SHIPPED in runs and POLICIES in runs:
        ratios = {
            quantile: [
                shipped["one"][quantile] / alone["one"][quantile]
                for shipped, alone in zip(runs[SHIPPED], runs[POLICIES], strict=True)
            ]
            for quantile in ("p50", "p99")
        }
        print(
            f"{SHIPPED} / {POLICIES}, one at a time, per round: "
            + "; ".join(
                f"{q} {statistics.median(r):.2f}x ({min(r):.2f}-{max(r):.2f})"
                for q, r in ratios.items()
            )
        )


if __name__ == "__main__":
    main()
