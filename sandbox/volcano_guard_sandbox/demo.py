"""`volcano-guard demo`: the guard end to end, with no cluster.

1. The webhook on throwaway certificates, fed the bundled examples: every AdmissionReview goes
   through the chain the API server runs, POST /mutate over real TLS (verified against the
   generated CA, hostname included), the returned JSON patch applied, then POST /validate.
2. The guard registered in the sandbox API server as in a cluster (guarded_sandbox: the
   deploy/base webhook configurations and admission policies, caBundle injected, the webhook
   process behind them) and the kubectl commands a user would type, with what kubectl
   prints; then the same commands on a fresh sandbox with the webhook process stopped, an
   outage. Needs kubectl.
3. The Queue status write storm against the sandbox API server, direct and through the
   coalescing sidecar, as a table of upstream writes, conflicts, backlog and memory.
"""

from __future__ import annotations

import base64
import copy
import json
import logging
import re
import shlex
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from volcano_guard.base.files import FileProblem, read_text, yaml_documents
from volcano_guard.base.jsonpatch import apply_patch
from volcano_guard.base.listen import Listen
from volcano_guard.base.tls import client_context, server_context
from volcano_guard.certs.generate import generate
from volcano_guard.webhook.caches import Caches
from volcano_guard.webhook.config import load_config
from volcano_guard.webhook.policies.node_name import NODES
from volcano_guard.webhook.server import running
from volcano_guard_sandbox import REPO_ROOT
from volcano_guard_sandbox.guarded_sandbox import NAMESPACE, SERVICE, guarded_sandbox, kubectl_path
from volcano_guard_sandbox.storm import StormSettings, format_results, run_storm

EXAMPLES = REPO_ROOT / "examples"
LOOPBACK = "127.0.0.1"
# The cluster the demo's admissions are decided against (its node cache, without a cluster).
DEMO_NODES = {"gpu-1": {"volcano.sh/role": "train"}, "web-1": {"role": "web"}}


@dataclass(frozen=True)
class Row:
    example: str
    summary: str
    mutate: str
    validate: str
    detail: str


@dataclass(frozen=True)
class Example:
    """One example admission: its file's stem, its first comment line, the review."""

    name: str
    summary: str
    review: dict[str, Any]


def load_examples(path: Path) -> list[Example]:
    """The AdmissionReviews in path (a file, or a directory's *.yaml); FileProblem naming a
    file that is not one."""
    if path.is_dir():
        files = sorted(path.glob("*.yaml"))
        if not files:
            raise FileProblem(f"--examples {path}: holds no example admissions (*.yaml)")
    elif path.exists():
        files = [path]
    else:
        raise FileProblem(f"--examples {path}: no such file or directory")
    examples = []
    for file in files:
        text = read_text(file)
        documents = [d for d in yaml_documents(text, str(file)) if d is not None]
        if (
            len(documents) != 1
            or not isinstance(documents[0], dict)
            or documents[0].get("kind") != "AdmissionReview"
            or not isinstance(documents[0].get("request"), dict)
        ):
            raise FileProblem(
                f"{file}: not one AdmissionReview (a document of kind "
                "AdmissionReview with a request)"
            )
        examples.append(Example(file.stem, text.splitlines()[0].lstrip("# ").strip(), documents[0]))
    return examples


async def run(examples_dir: str | None = None) -> int:
    examples = load_examples(Path(examples_dir) if examples_dir else EXAMPLES / "admissions")
    config = load_config(EXAMPLES / "demo-config.yaml")
    with tempfile.TemporaryDirectory(prefix="volcano-guard-demo-") as tmp:
        made = generate(SERVICE, NAMESPACE, tmp, days=1)
        tls = server_context(made.cert_file, made.key_file)
        caches = Caches.fixed({NODES: DEMO_NODES})
        async with running(
            config, Listen(LOOPBACK, 0), Listen(LOOPBACK, 0), tls, caches=caches
        ) as ports:
            print(
                f"webhook up on https://{LOOPBACK}:{ports[0]} (certificate for "
                f"{made.dns_names[2]}, CA {made.ca_file.name} generated in a temp dir)\n"
            )
            connector = aiohttp.TCPConnector(ssl=client_context(made.ca_file))
            async with aiohttp.ClientSession(connector=connector) as session:
                client = _Client(session, f"https://{LOOPBACK}:{ports[0]}", made.dns_names[2])
                rows = [await _replay(client, example) for example in examples]
                metrics = await _scrape(session, f"http://{LOOPBACK}:{ports[1]}/metrics")
    _print_table(rows)
    print("\nvolcano_guard_admission_requests_total, as scraped from /metrics:")
    for line in metrics:
        print(f"  {line}")
    print("\nwebhook shut down cleanly")
    _kubectl_session()
    await _storm()
    return 0


# What a user types once the guard is registered: kubectl's arguments, file names relative to
# the repository (printed as typed).
KUBECTL_SESSION = (
    "create namespace team-a",
    "get validatingwebhookconfigurations",
    "apply -f examples/kubectl/pod-without-requests.yaml",
    "apply -f examples/kubectl/pod-with-requests.yaml",
    "apply -f examples/kubectl/pod-on-a-node.yaml",
    "run web -n team-a --image=nginx",
    "create -f examples/kubectl/podgroup.yaml",
    "get podgroup pg-train -n team-a -o jsonpath={.metadata.annotations}",
    "delete podgroup pg-train -n team-a",
    "apply -f examples/kubectl/queues.yaml",
    "apply -f examples/kubectl/queue-over-parent.yaml",
    """patch queue research --type=merge -p '{"spec":{"parent":"research-vision"}}'""",
)
SANDBOX_SEED = [
    {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}
    for name, labels in DEMO_NODES.items()
]


OUTAGE = (
    "\nThe same commands on a fresh sandbox with the webhook process stopped (a guard "
    "outage): the ValidatingAdmissionPolicies deploy/base installed in the API server "
    "still refuse what the guard would; the registrations they cover fail open, so the "
    "rest goes in. PodGroup and Queue writes wait for the guard.\n"
)


def _kubectl_session() -> None:
    print(
        "\nThe guard registered in the sandbox API server, as in a cluster: deploy/base's "
        "webhook configurations and admission policies applied, caBundle set by "
        "`volcano-guard certs inject`, the webhook behind them. Then kubectl:\n"
    )
    if kubectl_path() is None:
        print("  (skipped: kubectl is not installed)")
        return
    _replay_kubectl(stop_webhook=False)
    print(OUTAGE)
    # What kubectl prints is the demo; the sandbox's log of each failed call is the API
    # server's, which a user does not see.
    sandbox_log = logging.getLogger("volcano_guard_sandbox.apiserver")
    level = sandbox_log.level
    sandbox_log.setLevel(logging.ERROR)
    try:
        _replay_kubectl(stop_webhook=True)
    finally:
        sandbox_log.setLevel(level)


def _replay_kubectl(stop_webhook: bool) -> None:
    with (
        tempfile.TemporaryDirectory(prefix="volcano-guard-demo-") as tmp,
        guarded_sandbox(Path(tmp), SANDBOX_SEED) as cluster,
    ):
        if stop_webhook:
            cluster.stop_webhook()
        for command in KUBECTL_SESSION:
            print(f"$ kubectl {command}")
            result = cluster.kubectl(*shlex.split(command), check=False, cwd=REPO_ROOT)
            print(textwrap.indent((result.stdout + result.stderr).strip(), "  "))


async def _storm() -> None:
    """The Queue status write storm, direct and through the sidecar, shortened for a demo."""
    settings = StormSettings(queues=10, seconds=8.0, pod_lifetime=2.0)
    print(
        f"\nQueue status write storm against the sandbox API server: {settings.queues} "
        f"queues, {settings.pods_per_minute:,.0f} pods/min for {settings.seconds:.0f}s, "
        "Volcano's controller and scheduler writing status (the full run: "
        "bench/queue_storm.py)\n"
    )
    results = [
        await run_storm(settings, through_sidecar=False),
        await run_storm(settings, through_sidecar=True),
    ]
    print(format_results(results))
    direct, sidecar = results
    print(
        f"\nthrough the sidecar: {direct.upstream_writes / max(1, sidecar.upstream_writes):.1f}x "
        f"fewer upstream writes, 409s {direct.conflicts:,} -> {sidecar.conflicts}, retry "
        f"backlog {direct.max_backlog:,} -> {sidecar.max_backlog}"
    )


class _Client:
    """POSTs AdmissionReviews to the webhook as the API server would."""

    def __init__(self, session: aiohttp.ClientSession, base: str, hostname: str) -> None:
        self.session, self.base, self.hostname = session, base, hostname

    async def post(self, path: str, review: dict[str, Any]) -> dict[str, Any]:
        async with self.session.post(
            self.base + path, json=review, server_hostname=self.hostname
        ) as response:
            body = await response.json()
            if response.status != 200:
                raise RuntimeError(f"{path} answered HTTP {response.status}: {body}")
            return body["response"]


async def _replay(client: _Client, example: Example) -> Row:
    review = copy.deepcopy(example.review)
    mutated = await client.post("/mutate", review)
    mutate = _verdict(mutated)
    if "patch" in mutated:
        patch = json.loads(base64.b64decode(mutated["patch"]))
        review["request"]["object"] = apply_patch(review["request"]["object"], patch)
    validated = await client.post("/validate", review) if mutated["allowed"] else mutated
    detail = validated.get("status", {}).get("message", "")
    if not detail and "patch" in mutated:
        detail = "patched: " + ", ".join(f"{op['op']} {op['path']}" for op in patch)
    return Row(example.name, example.summary, mutate, _verdict(validated), detail)


def _verdict(response: dict[str, Any]) -> str:
    if not response["allowed"]:
        return "DENIED"
    return "PATCHED" if "patch" in response else "allowed"


async def _scrape(session: aiohttp.ClientSession, url: str) -> list[str]:
    async with session.get(url) as response:
        text = await response.text()
    pattern = re.compile(r"^volcano_guard_admission_requests_total\{.*\} [1-9]")
    return [line for line in text.splitlines() if pattern.match(line)]


def _print_table(rows: list[Row]) -> None:
    width = max(len(row.example) for row in rows)
    print(f"{'example':<{width}}  {'/mutate':<8} {'/validate':<9}  what the webhook said")
    print(f"{'-' * width}  {'-' * 8} {'-' * 9}  {'-' * 60}")
    for row in rows:
        lines = textwrap.wrap(row.detail or row.summary, 90) or [""]
        print(f"{row.example:<{width}}  {row.mutate:<8} {row.validate:<9}  {lines[0]}")
        for line in lines[1:]:
            print(f"{'':<{width}}  {'':<8} {'':<9}  {line}")
