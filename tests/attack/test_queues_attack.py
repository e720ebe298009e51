"""A tenant who may create Queues, and a stranger who may POST reviews, against the queues
policy's cost: many resources a queue, wide and deep hierarchies, `check` of thousands of
Queues, Queue reviews among 100,000 cached queues while pods are reviewed, and an absurd image
tag. On the code as merged (514ca44) every test here failed: the hierarchy walks counted each
queue's resources once a resource (cubic), every decision copied and sorted the whole cache,
each Queue summed all its siblings and walked its whole chain, a Queue was judged on the event
loop (pods waited for it), and a 5,000-digit tag ended `check` in a traceback."""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from typing import Any

import pytest

from tests.builders import container, pod, review
from tests.conftest import Webhook, start_webhook
from tests.processes import run_here
from tests.webhook.queue_cases import queue, res
from tests.webhook.test_queues import judged, refusals
from volcano_guard.base.informer import static_snapshot
from volcano_guard.webhook.caches import Caches
from volcano_guard.webhook.config import config_from_dict
from volcano_guard.webhook.policies.queues import QUEUES, queue_record

pytestmark = pytest.mark.slow


def cached(*queues: dict[str, Any]) -> dict[str, Any]:
    return {q["metadata"]["name"]: queue_record(q) for q in queues}


def timed(obj: dict[str, Any], cache: dict[str, Any], old: dict[str, Any] | None = None):
    started = time.perf_counter()
    evaluation = judged(obj, static_snapshot(cache), old)
    return time.perf_counter() - started, evaluation


def resources(prefix: str, count: int, amount: str) -> dict[str, str]:
    return {f"example.com/{prefix}{i}": amount for i in range(count)}


def test_many_resources_under_many_queues_each_naming_many_cost_their_size_not_its_cube():
    """120 resources a queue, 120 queues: the merged code took ~13 s a decision (each
    ancestor's and descendant's list counted once a resource); now ~10 ms."""
    count, own, other = 120, resources("r", 120, "2"), resources("o", 120, "1")
    chain = cached(*(queue(f"q{i}", f"q{i - 1}" if i else "root", other) for i in range(count)))
    elapsed, evaluation = timed(queue("new", f"q{count - 1}", own), chain)
    assert evaluation.decision.allowed
    assert elapsed < 1.0, f"{elapsed:.2f} s under a chain"
    below = cached(
        queue("p", "root"),
        *(queue(f"c{i}", f"c{i - 1}" if i else "p", other) for i in range(count)),
    )
    elapsed, evaluation = timed(queue("p", "root", own), below, old=queue("p", "root"))
    assert evaluation.decision.allowed
    assert elapsed < 1.0, f"{elapsed:.2f} s over a subtree"


def test_queue_requests_among_100k_queues_do_not_copy_the_cache_each():
    """The merged code copied and sorted the 100,000 queues on every decision (~100 ms each);
    the index is now built once a snapshot."""
    queues = cached(queue("team", "root", res("1000000")))
    queues.update(cached(*(queue(f"q{i}", "team", res("1"), res("1")) for i in range(100_000))))
    snapshot = static_snapshot(queues)
    judged(queue("warm", "root", res("1")), snapshot)  # the index: once for this snapshot
    started = time.perf_counter()
    for i in range(40):
        evaluation = judged(queue(f"new{i}", "team", res("1"), res("1")), snapshot)
        assert not evaluation.decision.allowed  # the siblings' deserved past the parent's none
    elapsed = time.perf_counter() - started
    assert elapsed < 2.0, f"{elapsed:.2f} s for 40 Queue CREATEs among 100,000 queues"
    (message, *_) = refusals(evaluation)["queues"]
    assert "deserved of cpu summing to 100001, while the parent sets no deserved" in message


def test_check_of_3000_queues_stays_near_linear(tmp_path):
    """Every Queue summed its siblings: 3,000 under one parent took ~35 s (5,000: 95 s)."""
    docs = [queue("team", "root", res("100000"))] + [
        queue(f"q{i}", "team", res("1"), res("1"), res("1")) for i in range(3_000)
    ]
    manifest = tmp_path / "queues.yaml"
    manifest.write_text("\n---\n".join(json.dumps(doc) for doc in docs))
    started = time.perf_counter()
    run = run_here("check", "-f", str(manifest))
    elapsed = time.perf_counter() - started
    assert run.returncode == 1, run.stderr
    assert run.stdout.endswith("3001 documents checked, 6002 violations\n")
    assert elapsed < 10, f"{elapsed:.1f} s"


def test_check_of_a_chain_4000_deep_walks_it_once(tmp_path):
    """Each Queue walked its whole parent chain for a loop and its whole subtree for the
    largest capability: a chain 4,000 deep took 23 s (quadratic), now ~3 s."""
    docs = [queue(f"q{i}", f"q{i - 1}" if i else "root", res("1")) for i in range(4_000)]
    manifest = tmp_path / "chain.yaml"
    manifest.write_text("\n---\n".join(json.dumps(doc) for doc in docs))
    started = time.perf_counter()
    run = run_here("check", "-f", str(manifest))
    elapsed = time.perf_counter() - started
    assert run.returncode == 0, run.stdout[-2_000:]
    assert run.stdout.endswith("4000 documents checked, 0 violations\n")
    assert elapsed < 10, f"{elapsed:.1f} s"


POD = review(pod(container("c", requests={"cpu": "1", "memory": "1Gi"})))
TEAM = queue("team", "root", res("1000000"))


async def parent_update(webhook: Webhook) -> dict[str, Any]:
    """The parent of 100,000 queues made smaller: the whole hierarchy below it is read."""
    body = review(queue("team", "root", res("1")), "UPDATE", old=TEAM)
    response = await webhook.post("/validate", json=body)
    answer: dict[str, Any] = (await response.json())["response"]
    return answer


async def pod_waits(webhook: Webhook, until: asyncio.Future[Any]) -> list[float]:
    """How long each pod review took, one every 10 ms, until until is done."""
    waited = []
    while not until.done():
        started = time.perf_counter()
        response = await webhook.post("/validate", json=POD)
        assert response.status == 200
        waited.append(time.perf_counter() - started)
        await asyncio.sleep(0.01)
    return waited


def assert_prompt(waited: list[float]) -> None:
    """Pod reviews judged beside Queue walks: a walk on the loop made each wait for all of it
    (about a second); off it, a review may wait for the GIL or a collection now and then, on
    shared cores for longer, never for a walk."""
    assert statistics.median(waited) < 0.1, f"pod reviews waited {statistics.median(waited):.2f} s"
    assert max(waited) < 1.0, f"a pod review waited {max(waited):.2f} s"


async def test_a_queue_review_among_100k_queues_does_not_stall_pod_reviews(certs):
    """An UPDATE of a parent of 100,000 queues costs about a second of Python; judged on the
    loop (merged), every pod review waited for it."""
    queues = cached(TEAM)
    queues.update(cached(*(queue(f"q{i}", "team", res("1"), res("1")) for i in range(100_000))))
    config = config_from_dict({"policies": {"resourceRequests": {"defaults": {"memory": "1Gi"}}}})
    async for webhook in start_webhook(config, certs, Caches.fixed({QUEUES: queues})):
        await webhook.post("/validate", json=POD)  # a connection and the first decision
        updates = asyncio.gather(*(parent_update(webhook) for _ in range(3)))
        waited = await pod_waits(webhook, updates)
        answers = await updates
        assert [answer["allowed"] for answer in answers] == [False] * 3
        assert answers[0]["status"]["message"].startswith(
            'Queue "team": its child queues have a deserved of cpu summing to 100000, while it '
            "sets no deserved of cpu"
        )
        assert len(waited) >= 10, waited
        assert_prompt(waited)


def test_check_of_a_volcano_deployment_with_an_absurd_tag_says_version_unknown(tmp_path):
    """A tag of 5,000 digits passed int()'s limit: `check` (and the audit) ended in a
    ValueError traceback."""
    image = "volcanosh/vc-scheduler:v" + "1" * 5_000 + ".0.0"
    labels = {"app": "volcano-scheduler"}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "volcano-scheduler", "namespace": "volcano-system"},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "scheduler", "image": image}]},
            },
        },
    }
    manifest = tmp_path / "volcano.json"
    manifest.write_text(json.dumps(deployment))
    run = run_here("check", "-f", str(manifest))
    assert "Traceback" not in run.stderr
    assert run.returncode in (0, 1), run.stderr
    assert "version unknown" in run.stdout, run.stdout


async def forged_status(webhook: Webhook) -> int:
    body = review(queue("team", "root", res("1")), "UPDATE", old=TEAM)
    return (await webhook.post("/validate", json=body)).status


async def test_a_flood_of_forged_queue_reviews_is_judged_one_at_a_time_the_rest_told_busy(certs):
    """A stranger may POST Queue reviews straight to the webhook: 30 at once, each ~1 s of
    walk. They take turns (one core at most), those still waiting after the API server's
    timeout get 429, and pod reviews meanwhile stay prompt."""
    queues = cached(TEAM)
    queues.update(cached(*(queue(f"q{i}", "team", res("1"), res("1")) for i in range(100_000))))
    config = config_from_dict({"policies": {"resourceRequests": {"defaults": {"memory": "1Gi"}}}})
    async for webhook in start_webhook(config, certs, Caches.fixed({QUEUES: queues})):
        await webhook.post("/validate", json=POD)
        flood = asyncio.gather(*(forged_status(webhook) for _ in range(30)))
        waited = await pod_waits(webhook, flood)
        statuses = await flood
        assert statuses.count(200) >= 2 and statuses.count(429) >= 10, statuses
        assert set(statuses) <= {200, 429}
        assert_prompt(waited)
