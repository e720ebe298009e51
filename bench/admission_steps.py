"""Where the webhook's time goes under load: the floor's handler with volcano-guard's steps added
one at a time, each served alone and driven closed-loop by hey (50 connections).

Steps: the floor (orjson decode, constant answer); + the AdmissionReview envelope parse, as the
webhook decodes (webhook.server.parse_review); + every policy, the answer and its encoding
(webhook.server.admit, caches fixed). Prints requests/s and the server's CPU time per request.

    .venv/bin/python -m bench.admission_steps [--seconds 5]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from bench.admission_load import pod_review, start
from bench.hey import ensure_hey, run_hey
from volcano_guard.certs.generate import generate
from volcano_guard_sandbox.processes import cpu_seconds, free_port

STEPS = {
    "floor": "floor (orjson decode, constant answer)",
    "envelope": "+ the AdmissionReview envelope parse",
    "admit": "+ every policy, the answer and its encoding",
}

SERVER = r"""
import ssl, sys
import orjson
from aiohttp import web
from volcano_guard.webhook.caches import Caches
from volcano_guard.webhook.config import config_from_dict
from volcano_guard.webhook.policies.base import PolicyContext
from volcano_guard.webhook.policies.node_name import NODES
from volcano_guard.webhook.policies.pod_groups import PODGROUPS
from volcano_guard.webhook.server import admit, parse_review

step = sys.argv[4]
caches = Caches.fixed({NODES: {f"node-{i}": {} for i in range(100)}, PODGROUPS: {}})
context = PolicyContext(config_from_dict({}), caches.snapshots())

async def handle(request):
    body = await request.read()
    if step == "admit":
        answer = admit("validate", body, context)
    else:
        if step == "floor":
            uid = orjson.loads(body)["request"]["uid"]
        else:
            uid = parse_review(body).uid
        answer = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                  "response": {"uid": uid, "allowed": True}}
    return web.Response(body=orjson.dumps(answer), content_type="application/json")

context_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
context_tls.load_cert_chain(sys.argv[2], sys.argv[3])
app = web.Application(client_max_size=8 * 1024 * 1024)
app.router.add_post("/validate", handle)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), ssl_context=context_tls, print=None,
            access_log=None)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    hey = ensure_hey()
    with tempfile.TemporaryDirectory() as tmp:
        made = generate("volcano-guard", "volcano-guard", tmp)
        body = Path(tmp) / "pod.json"
        body.write_text(json.dumps(pod_review()))
        print(f"{'handler':<46}{'req/s':>8}{'server CPU per request':>25}")
        for step, label in STEPS.items():
            port = free_port()
            with ExitStack() as stack:
                proc = start(
                    stack,
                    [
                        sys.executable,
                        "-c",
                        SERVER,
                        str(port),
                        str(made.cert_file),
                        str(made.key_file),
                        step,
                    ],
                    port,
                )
                url = f"https://127.0.0.1:{port}/validate"
                run_hey(hey, url, body, 2, 10, None)  # warm up
                cpu_before, started = cpu_seconds(proc.pid), time.monotonic()
                result = run_hey(hey, url, body, args.seconds, 50, None)
                cpu = cpu_seconds(proc.pid) - cpu_before
                busy = cpu / (time.monotonic() - started)
            print(
                f"{label:<46}{result['rps']:>8,.0f}{cpu / result['total'] * 1e6:>19,.0f} us"
                f"   ({busy:.2f} cores)"
            )


if __name__ == "__main__":
    main()
