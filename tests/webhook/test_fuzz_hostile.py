"""Hostile input, fuzzed: realistic AdmissionReviews with one value mangled anywhere (wrong
types at every level, huge strings, deep nesting, unicode) against /validate and /mutate with
every policy on, and arbitrary status writes against the sidecar. Never a 5xx, never a hang,
and the server still answers properly afterwards."""

from __future__ import annotations

import copy
import json
import re
import time
from dataclasses import dataclass
from typing import Any

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.builders import container, pod, review, volcano_job
from tests.conftest import SyncWebhook
from tests.threaded import on_thread
from volcano_guard.base.jsonbody import MAX_DEPTH, PARSER_MAX_DEPTH
from volcano_guard.base.kubeconfig import Cluster
from volcano_guard.sidecar.service import SidecarSettings
from volcano_guard.sidecar.service import running as sidecar_running
from volcano_guard.webhook.caches import Caches
from volcano_guard.webhook.config import config_from_dict
from volcano_guard.webhook.policies.node_name import NODES
from volcano_guard_sandbox.apiserver.runner import SandboxThread

pytestmark = pytest.mark.reliability

Path = tuple[str | int, ...]


def _podgroup(operation: str) -> dict[str, Any]:
    group = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {
            "name": "mnist",
            "namespace": "team-a",
            "uid": "9b2e",
            "annotations": {"volcano-guard.io/generation-id": "019a"},
        },
        "spec": {"minMember": 2},
    }
    body = review(group, operation=operation)
    if operation == "DELETE":
        body["request"]["oldObject"] = body["request"].pop("object")
        body["request"]["options"] = {"apiVersion": "meta.k8s.io/v1", "kind": "DeleteOptions"}
    return body


def _pod_on_node() -> dict[str, Any]:
    obj = pod(container("c", requests={"cpu": "1", "memory": "1Gi"}))
    obj["spec"]["nodeName"] = "node-1"
    obj["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                ]
            }
        }
    }
    return review(obj)


def _injected_pod() -> dict[str, Any]:
    obj = pod(container("c", requests={"cpu": "1", "memory": "1Gi"}))
    obj["metadata"]["labels"] = {"volcano-guard.io/inject": "true"}
    obj["metadata"]["annotations"] = {
        "volcano-guard.io/flush-interval": "2s",
        "scheduling.k8s.io/group-name": "mnist",
    }
    return review(obj)


def _binding() -> dict[str, Any]:
    body = review(
        {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": "train-0", "namespace": "team-a"},
            "target": {"apiVersion": "v1", "kind": "Node", "name": "node-1"},
        }
    )
    body["request"]["subResource"] = "binding"
    return body


REVIEWS = [
    review(pod(container("c", requests={"cpu": "1"}), init=(container("i"),))),
    _pod_on_node(),
    _injected_pod(),
    review(volcano_job({"worker": [container("w", requests={"cpu": "2", "memory": "1Gi"})]})),
    _podgroup("CREATE"),
    _podgroup("DELETE"),
    _binding(),
]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=12,
)
unicode_text = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=40)
huge_strings = st.sampled_from([10_000, 300_000, 1_500_000]).map(lambda n: "ü" * (n // 2))


@dataclass(frozen=True)
class Deep:
    """A value nested `depth` arrays deep, written out by encode(): json.dumps itself would
    hit Python's recursion limit long before the parser's 1,024 levels."""

    depth: int


# Around every limit that matters: the sidecar's MAX_DEPTH, orjson's encoder (254) and parser
# (1,024), and Python's recursion limit (1,000).
deep_nesting = st.one_of(
    *(
        st.integers(limit - 10, limit + 10).map(Deep)
        for limit in (MAX_DEPTH, 254, 1000, PARSER_MAX_DEPTH)
    )
)


def encode(document: Any, **options: Any) -> bytes:
    text = json.dumps(document, default=lambda deep: f"@deep{deep.depth}@", **options)
    return re.sub(
        r'"@deep(\d+)@"', lambda m: "[" * int(m[1]) + "1" + "]" * int(m[1]), text
    ).encode()


hostile = json_values | unicode_text | huge_strings | deep_nesting


def paths(value: Any, prefix: Path = ()) -> list[Path]:
    """Every place in a document, containers included, at every depth."""
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += paths(item, (*prefix, index))
    return found


@st.composite
def mangled_reviews(draw: st.DrawFn) -> dict[str, Any]:
    body = copy.deepcopy(draw(st.sampled_from(REVIEWS)))
    where = draw(st.sampled_from(paths(body)[1:]))
    parent = body
    for token in where[:-1]:
        parent = parent[token]
    action = draw(st.sampled_from(["replace", "delete", "add"]))
    if action == "delete" and isinstance(parent, dict):
        del parent[where[-1]]
    elif action == "add" and isinstance(parent, dict):
        parent[draw(unicode_text)] = draw(hostile)
    else:
        parent[where[-1]] = draw(hostile)
    return body


@pytest.fixture(scope="module")
def server(certs):
    config = config_from_dict(
        {
            "policies": {
                "resourceRequests": {"defaults": {"cpu": "100m"}},
                "nodeName": {"action": "rewrite", "bindingGuard": {"mode": "enforce"}},
            }
        }
    )
    caches = Caches.fixed({NODES: {"node-1": {"volcano.sh/role": "train"}}})
    with SyncWebhook(config, certs, caches) as served:
        yield served


def assert_answered(server: SyncWebhook, path: str, body: bytes) -> None:
    status, payload = server.post(path, body)  # SyncWebhook times out: a hang fails here
    assert status in (200, 400, 413, 422), (status, payload[:300])
    document = json.loads(payload)
    if status == 200:
        assert document["kind"] == "AdmissionReview" and "uid" in document["response"]
        # An internal error (a policy raised) is answered with code 500 inside the review.
        assert document["response"].get("status", {}).get("code") != 500, document
    else:
        assert document["kind"] == "Status" and document["message"]


FUZZ = settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)


@pytest.mark.slow  # an attack fuzz run
@FUZZ
@given(body=mangled_reviews(), path=st.sampled_from(["/validate", "/mutate"]))
def test_mangled_reviews_never_get_a_5xx(server, body, path):
    assert_answered(server, path, encode(body, ensure_ascii=False))


@pytest.mark.slow  # an attack fuzz run
@FUZZ
@given(body=mangled_reviews(), cut=st.integers(0, 200), noise=st.binary(min_size=1, max_size=8))
def test_mangled_bytes_never_get_a_5xx(server, body, cut, noise):
    encoded = encode(body)  # \\u escapes: lone surrogates can be written
    at = len(encoded) * cut // 200
    assert_answered(server, "/validate", encoded[:at] + noise + encoded[at:])


def _with_memory_request(value: Any) -> bytes:
    body = copy.deepcopy(REVIEWS[0])
    body["request"]["object"]["spec"]["containers"][0]["resources"]["requests"]["memory"] = value
    return encode(body)


@pytest.mark.parametrize(
    ("value", "status", "needle"),
    [
        ("1" * 1_500_000, 200, b"longer than 128 characters"),  # a huge quantity: denied, named
        (Deep(500), 200, b"expected a quantity string or number"),
        # Past the decoder's limit (Python's recursion limit, less the stack it is called on).
        (Deep(PARSER_MAX_DEPTH), 400, b"nested too deeply"),
        ("\u202e1Gi\u0000", 200, b"not a Kubernetes quantity"),
    ],
)
def test_huge_deep_and_odd_values_get_a_named_answer(server, value, status, needle):
    got, payload = server.post("/validate", _with_memory_request(value))
    assert (got, needle in payload) == (status, True), payload[:300]


@pytest.mark.parametrize(
    ("depth", "status", "needle"),
    [
        (200, 200, b'"patchType"'),  # the user's affinity is copied into the patch as it is
        (300, 400, b"cannot be patched"),  # too deep to encode: a named refusal, not a 500
    ],
)
def test_a_node_name_rewrite_with_deep_affinity_gets_a_named_answer(server, depth, status, needle):
    body = copy.deepcopy(REVIEWS[1])
    body["request"]["object"]["spec"]["affinity"]["podAntiAffinity"] = {"x": Deep(depth)}
    got, payload = server.post("/mutate", encode(body))
    assert (got, needle in payload) == (status, True), payload[:300]


def test_lone_surrogates_are_refused_with_a_reason(server):
    body = json.dumps(REVIEWS[0]).replace('"train-0"', '"\\ud800"').encode()
    status, payload = server.post("/validate", body)
    assert status == 400 and b"surrogate" in payload


def test_webhook_answers_properly_after_the_fuzz(server):
    status, payload = server.post("/validate", json.dumps(REVIEWS[1]).encode())
    assert status == 200
    answer = json.loads(payload)["response"]
    assert answer["allowed"] is False and "node-1" in answer["status"]["message"]


# -- the sidecar's status writes --------------------------------------------------------------

QUEUE = "/apis/scheduling.volcano.sh/v1beta1/queues/q1"
CONTENT_TYPES = [
    "application/json",
    "application/merge-patch+json",
    "application/json-patch+json",
    "application/apply-patch+yaml",
    "application/strategic-merge-patch+json",
    "text/plain",
]


@pytest.fixture(scope="module")
def sidecar():
    with SandboxThread() as sandbox:
        sandbox.seed(
            [
                {
                    "apiVersion": "scheduling.volcano.sh/v1beta1",
                    "kind": "Queue",
                    "metadata": {"name": "q1"},
                    "spec": {"weight": 1},
                }
            ]
        )
        settings = SidecarSettings(listen_port=0, metrics_port=0, flush_interval=0.05)
        with on_thread(lambda: sidecar_running(Cluster(sandbox.url), settings)) as running:
            session = requests.Session()
            session.get(f"{running.url}{QUEUE}", timeout=10).raise_for_status()  # a known base
            yield running.url, session


status_bodies = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {},
        optional={
            "metadata": st.fixed_dictionaries(
                {},
                optional={
                    "uid": json_values,
                    "resourceVersion": st.sampled_from(["1", "x"]) | json_values,
                    "name": json_values,
                },
            )
            | json_values,
            "status": json_values | st.dictionaries(st.text(max_size=5), hostile, max_size=3),
        },
    ),
    st.lists(
        st.fixed_dictionaries(
            {
                "op": st.sampled_from(["add", "replace", "remove", "x"]),
                "path": st.sampled_from(["/status", "/status/a", "", "~"]),
            },
            optional={"value": hostile},
        ),
        max_size=3,
    ),
)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    method=st.sampled_from(["PUT", "PATCH"]),
    content_type=st.sampled_from(CONTENT_TYPES),
    body=status_bodies,
    garbage=st.booleans(),
)
def test_arbitrary_status_writes_never_get_a_5xx_from_the_sidecar(
    sidecar, method, content_type, body, garbage
):
    url, session = sidecar
    data = encode(body)
    if garbage:
        data = data[: len(data) // 2] + b"\xff{"
    response = session.request(
        method,
        f"{url}{QUEUE}/status",
        data=data,
        timeout=10,
        headers={"Content-Type": content_type},
    )
    assert response.status_code < 500, (response.status_code, response.text[:300])


def test_sidecar_still_coalesces_after_the_fuzz(sidecar):
    url, session = sidecar
    current = session.get(f"{url}{QUEUE}", timeout=10).json()
    current["status"] = {"pending": 42}
    response = session.put(f"{url}{QUEUE}/status", json=current, timeout=10)
    assert response.status_code == 200
    for _ in range(100):  # up to 5 s: a write flushes within one 0.05 s interval, or backs off
        # a fuzzed write may have left `status: null` behind
        if (session.get(f"{url}{QUEUE}", timeout=10).json().get("status") or {}).get(
            "pending"
        ) == 42:
            break
        time.sleep(0.05)
    assert session.get(f"{url}{QUEUE}", timeout=10).json()["status"]["pending"] == 42


@pytest.mark.parametrize(
    "content_type", ["application/apply-patch+yaml", "application/merge-patch+json"]
)
def test_a_status_write_nested_1000_deep_is_refused_with_400(sidecar, content_type):
    url, session = sidecar
    body = encode({"status": {"pending": Deep(1000)}})
    response = session.patch(
        f"{url}{QUEUE}/status", data=body, timeout=10, headers={"Content-Type": content_type}
    )
    assert response.status_code == 400 and "nested deeper" in response.text, response.text
