"""What the admission chain costs a sandbox write: pod creates with no webhook registered; with
the guard's webhook registrations alone (`volcano-guard manifests` with
`validatingAdmissionPolicies: false`, caBundle set) and the guard's webhook process behind
them; as shipped (the registrations and the ValidatingAdmissionPolicies, which the sandbox runs
in-process as kube-apiserver does); and with the policies alone. Rounds alternate (none,
webhook, shipped, policies, none...) so all are measured in the same moments of the machine;
what a mode registers is deleted and created between rounds. Then the CEL time of each policy
alone: one pod's validation, repeated, in this process.

Volcano pods (with requests, so the guard allows them) are created by generateName: one at a
time over one kept-alive connection (the latency a write gains), then by hey over 10 kept-alive
connections, closed loop (the writes/s the sandbox sustains). The sandbox and the webhook are
processes of their own. Prints both per mode and the overhead: the difference of the medians.

    .venv/bin/python -m bench.sandbox_admission [--seconds 5] [--rounds 3]
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
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

from bench.admission_load import start
from bench.hey import ensure_hey, run_hey
from volcano_guard.base.kubeconfig import write_kubeconfig
from volcano_guard.certs.generate import generate
from volcano_guard_sandbox.guarded_sandbox import NAMESPACE, SERVICE, shipped_config
from volcano_guard_sandbox.processes import free_port

PODS = "/api/v1/namespaces/team-a/pods"
CONFIGURATIONS = {
    "MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
    "ValidatingWebhookConfiguration": "validatingwebhookconfigurations",
    "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
}
WEBHOOK, SHIPPED, POLICIES = "webhook only", "as shipped", "policies only"
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


def manifests(tmp: Path, config: dict[str, Any]) -> list[dict[str, Any]]:
    """What `volcano-guard manifests` prints for config."""
    path = tmp / "manifests-config.yaml"
    path.write_text(yaml.safe_dump(config))
    printed = subprocess.run(
        [sys.executable, "-m", "volcano_guard.cli", "manifests", "--config", str(path)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [doc for doc in yaml.safe_load_all(printed) if doc]


def registrations(tmp: Path, ca_file: Path, config: dict[str, Any]) -> list[dict[str, Any]]:
    """What manifests prints for config, caBundle set as certs inject leaves it."""
    bundle = base64.b64encode(ca_file.read_bytes()).decode()
    documents = manifests(tmp, config)
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


def register(url: str, documents: list[dict[str, Any]], on: bool) -> None:
    for document in documents:
        path = f"/apis/admissionregistration.k8s.io/v1/{CONFIGURATIONS[document['kind']]}"
        if on:
            api(url, "POST", path, document)
        else:
            api(url, "DELETE", f"{path}/{document['metadata']['name']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--writes", type=int, default=500, help="writes one at a time per round (default 500)"
    )
    args = parser.parse_args()
    hey = ensure_hey()
    with tempfile.TemporaryDirectory() as directory, ExitStack() as stack:
        tmp = Path(directory)
        certs = generate(SERVICE, NAMESPACE, tmp / "guard", days=1)
        seed = tmp / "seed.yaml"
        seed.write_text(yaml.safe_dump_all(SEED))
        sandbox_port, webhook_port = free_port(), free_port()
        cli = [sys.executable, "-m", "volcano_guard.cli"]
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
                f"127.0.0.1:{free_port()}",
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
        shipped = registrations(tmp, certs.ca_file, shipped_config())
        registered = {
            WEBHOOK: registrations(
                tmp, certs.ca_file, {**shipped_config(), "validatingAdmissionPolicies": False}
            ),
            SHIPPED: shipped,
            POLICIES: [doc for doc in shipped if "AdmissionPolicy" in doc["kind"]],
        }
        body = tmp / "pod.json"
        body.write_text(json.dumps(volcano_pod()))
        target = url + PODS
        runs: dict[str, list[dict[str, dict]]] = {
            "no webhook": [],
            **{mode: [] for mode in registered},
        }
        for index in range(len(runs) * args.rounds + 1):  # a first, unmeasured round warms up
            mode = list(runs)[index % len(runs)]
            register(url, registered.get(mode, []), on=True)
            one_at_a_time = sequential(sandbox_port, body.read_bytes(), args.writes)
            closed = run_hey(hey, target, body, args.seconds, 10, None)
            register(url, registered.get(mode, []), on=False)
            if index > 0:
                runs[mode].append({"closed": closed, "one": one_at_a_time})
        report(runs, args.rounds)
        cel_time(registered[POLICIES])


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
    quantiles = statistics.quantiles(times, n=100)
    return {"p50": quantiles[49], "p99": quantiles[98]}


def report(runs: dict[str, list[dict[str, dict]]], rounds: int) -> None:
    def median(mode: str, loop: str, key: str) -> float:
        return statistics.median(run[loop][key] for run in runs[mode])

    print(f"Pod CREATE through the sandbox, medians of {rounds} rounds")
    print(
        f"{'mode':<18}{'one at a time: p50 ms':>22}{'p99 ms':>8}"
        f"{'   10 connections: writes/s':>28}{'p50 ms':>8}{'p99 ms':>8}"
    )
    for mode in runs:
        print(
            f"{mode:<18}{median(mode, 'one', 'p50'):>22.2f}{median(mode, 'one', 'p99'):>8.2f}"
            f"{median(mode, 'closed', 'rps'):>28,.0f}{median(mode, 'closed', 'p50'):>8.2f}"
            f"{median(mode, 'closed', 'p99'):>8.2f}"
        )
    base = "no webhook"
    for mode in (WEBHOOK, SHIPPED, POLICIES):
        print(
            f"{mode}: overhead a write "
            f"{median(mode, 'one', 'p50') - median(base, 'one', 'p50'):.2f} ms (p50), "
            f"{median(mode, 'one', 'p99') - median(base, 'one', 'p99'):.2f} ms (p99); "
            f"writes/s {median(mode, 'closed', 'rps') / median(base, 'closed', 'rps'):.2f}x "
            "of none"
        )


if __name__ == "__main__":
    main()
