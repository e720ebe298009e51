"""The sidecar in front of the sandbox: pass-through, coalescing, ownership, UID guard,
backoff, backpressure, sync acks, streaming and concurrency, over real HTTP."""

import asyncio
import json

import aiohttp
import pytest

from volcano_guard.base.kubeconfig import Cluster
from volcano_guard.sidecar.service import SidecarSettings
from volcano_guard.sidecar.service import running as sidecar_running
from volcano_guard_sandbox.apiserver.faults import FaultRule
from volcano_guard_sandbox.apiserver.runner import running as sandbox_running

Q = "/apis/scheduling.volcano.sh/v1beta1/queues"


def settings(**changes):
    base = dict(listen_port=0, metrics_port=0, flush_interval=0.2, drain_timeout=5)
    return SidecarSettings(**{**base, **changes})


def queue_body(name):
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {"weight": 1},
    }


class Env:
    def __init__(self, sandbox, sidecar, session):
        self.sandbox, self.sidecar, self.session = sandbox, sidecar, session

    async def request(self, method, url, body=None, content_type="application/json"):
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": content_type} if data else {}
        async with self.session.request(method, url, data=data, headers=headers) as response:
            return response.status, await response.json(content_type=None), response.headers

    async def via(self, method, path, body=None, **kw):
        return await self.request(method, self.sidecar.url + path, body, **kw)

    async def direct(self, method, path, body=None, **kw):
        return await self.request(method, self.sandbox.url + path, body, **kw)

    def writes(self):
        return self.sandbox.stats.writes.get("queues/status", 0)

    async def settle(self, seconds=0.6):
        await asyncio.sleep(seconds)


@pytest.fixture
async def make_env():
    stack = []

    async def make(**changes):
        sandbox_cm = sandbox_running()
        sandbox = await sandbox_cm.__aenter__()
        sidecar_cm = sidecar_running(Cluster(sandbox.url), settings(**changes))
        sidecar = await sidecar_cm.__aenter__()
        session = aiohttp.ClientSession()
        stack.append((sandbox_cm, sidecar_cm, session))
        sandbox.seed([queue_body("q1")])
        return Env(sandbox, sidecar, session)

    yield make
    for sandbox_cm, sidecar_cm, session in reversed(stack):
        await session.close()
        await sidecar_cm.__aexit__(None, None, None)
        await sandbox_cm.__aexit__(None, None, None)


async def test_reads_and_other_writes_pass_through_unchanged(make_env):
    env = await make_env()
    status, created, _ = await env.via("POST", Q, queue_body("q2"))
    assert status == 201 and created["metadata"]["uid"]
    status, listed, _ = await env.via("GET", Q)
    assert [q["metadata"]["name"] for q in listed["items"]] == ["q1", "q2"]
    status, got, _ = await env.via("GET", f"{Q}/q2")
    assert got == created
    status, _, _ = await env.via("DELETE", f"{Q}/q2")
    assert status == 200
    status, missing, _ = await env.via("GET", f"{Q}/q2")
    assert status == 404 and missing["reason"] == "NotFound"
    status, conflict, _ = await env.via(
        "PUT",
        f"{Q}/q1",
        {**got, "metadata": {**got["metadata"], "name": "q1", "resourceVersion": "1"}},
    )
    # Spec writes are not coalesced: the API server's own answer comes back as it is.
    assert status == 409 and conflict["reason"] == "Conflict"


@pytest.mark.slow  # a storm
async def test_a_thousand_stale_puts_become_a_handful_of_writes_with_the_final_value(make_env):
    env = await make_env()
    _, base, _ = await env.via("GET", f"{Q}/q1")  # the sidecar now knows this version
    for n in range(1000):
        body = {**base, "status": {"allocated": {"cpu": str(n)}, "state": "Open"}}
        status, answer, _ = await env.via("PUT", f"{Q}/q1/status", body)
        assert status == 200
        assert answer["status"]["allocated"] == {"cpu": str(n)}
    await env.settle()
    _, final, _ = await env.direct("GET", f"{Q}/q1")
    assert final["status"] == {"allocated": {"cpu": "999"}, "state": "Open"}
    assert 1 <= env.writes() <= 10, env.writes()
    assert env.sandbox.stats.conflicts.get("queues/status", 0) == 0


async def test_two_writers_owning_different_fields_never_clobber_each_other(make_env):
    env = await make_env()
    # One sidecar per writer, as deployed: the scheduler and the controller.
    sched_cm = sidecar_running(Cluster(env.sandbox.url), settings())
    ctrl_cm = sidecar_running(Cluster(env.sandbox.url), settings())
    scheduler, controller = await sched_cm.__aenter__(), await ctrl_cm.__aenter__()
    try:
        _, base, _ = await env.request("GET", f"{scheduler.url}{Q}/q1")
        await env.request("GET", f"{controller.url}{Q}/q1")
        for n in range(1, 30):
            # Each resends its stale copy of the other's field from the same old base, which
            # has no status, as Go serialises it: pending (omitempty) left out, allocated
            # (no omitempty in v1beta1) null.
            await env.request(
                "PUT",
                f"{scheduler.url}{Q}/q1/status",
                {**base, "status": {"allocated": {"cpu": str(n)}}},
            )
            await env.request(
                "PUT",
                f"{controller.url}{Q}/q1/status",
                {**base, "status": {"allocated": None, "pending": n}},
            )
            await asyncio.sleep(0.01)
        await env.settle()
        _, final, _ = await env.direct("GET", f"{Q}/q1")
        assert final["status"] == {"allocated": {"cpu": "29"}, "pending": 29}
        assert env.sandbox.stats.conflicts.get("queues/status", 0) == 0
    finally:
        await ctrl_cm.__aexit__(None, None, None)
        await sched_cm.__aexit__(None, None, None)


async def test_a_to_b_to_a_reaches_the_server(make_env):
    env = await make_env()
    _, base, _ = await env.via("GET", f"{Q}/q1")
    await env.via("PUT", f"{Q}/q1/status", {**base, "status": {"state": "Closed"}})
    await env.settle(0.4)
    await env.via("PUT", f"{Q}/q1/status", {**base, "status": {}})  # back to A, stale base
    await env.settle(0.4)
    _, final, _ = await env.direct("GET", f"{Q}/q1")
    assert final.get("status", {}) == {}


async def test_uid_guard_never_writes_onto_a_recreated_object(make_env):
    env = await make_env(flush_interval=0.5)
    _, old, _ = await env.via("GET", f"{Q}/q1")
    await env.via("PUT", f"{Q}/q1/status", {**old, "status": {"state": "Open"}})
    await env.via("PUT", f"{Q}/q1/status", {**old, "status": {"state": "Closed"}})  # pending
    await env.direct("DELETE", f"{Q}/q1")
    await env.direct("POST", Q, queue_body("q1"))
    await env.settle(0.8)
    _, new, _ = await env.direct("GET", f"{Q}/q1")
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    assert "status" not in new  # the old incarnation's intent did not land
    assert env.sandbox.stats.conflicts.get("queues/status", 0) == 1


@pytest.mark.slow  # a fault run
async def test_backoff_under_injected_503_and_429_then_the_final_value_lands(make_env):
    env = await make_env(flush_interval=0.05)
    _, base, _ = await env.via("GET", f"{Q}/q1")
    env.sandbox.set_faults(
        FaultRule(verbs=frozenset({"patch"}), error_rate=0.5, error_code=503),
        FaultRule(verbs=frozenset({"patch"}), throttle_rate=0.3, retry_after=0),
    )
    for n in range(20):
        await env.via("PUT", f"{Q}/q1/status", {**base, "status": {"pending": n}})
        await asyncio.sleep(0.02)
    await env.settle(1.0)
    env.sandbox.set_faults()
    await env.settle(1.5)
    _, final, _ = await env.direct("GET", f"{Q}/q1")
    assert final["status"] == {"pending": 19}
    injected = env.sandbox.stats.injected
    assert injected[503] + injected[429] >= 1


async def test_backpressure_at_max_pending_objects(make_env):
    env = await make_env(max_pending=2, flush_interval=5)
    for name in ("q2", "q3"):
        await env.direct("POST", Q, queue_body(name))
    answers = []
    for name in ("q1", "q2", "q3"):
        _, obj, _ = await env.via("GET", f"{Q}/{name}")
        answers.append(await env.via("PUT", f"{Q}/{name}/status", {**obj, "status": {"x": 1}}))
        answers.append(await env.via("PUT", f"{Q}/{name}/status", {**obj, "status": {"x": 2}}))
    codes = [status for status, _, _ in answers]
    assert codes[:4] == [200, 200, 200, 200]
    assert codes[5] == 429
    assert answers[5][2]["Retry-After"] == "5"


async def test_sync_ack_returns_the_real_response_and_writers_share_one_write(make_env):
    env = await make_env(ack="sync", flush_interval=0.3)
    _, base, _ = await env.via("GET", f"{Q}/q1")
    await env.via("PUT", f"{Q}/q1/status", {**base, "status": {"pending": 0}})  # opens window
    before = env.writes()
    results = await asyncio.gather(
        *(
            env.via("PUT", f"{Q}/q1/status", {**base, "status": {"pending": n}})
            for n in range(1, 11)
        )
    )
    assert all(status == 200 for status, _, _ in results)
    versions = {answer["metadata"]["resourceVersion"] for _, answer, _ in results}
    assert len(versions) == 1  # one upstream write answered them all
    assert env.writes() - before == 1
    _, final, _ = await env.direct("GET", f"{Q}/q1")
    assert final["metadata"]["resourceVersion"] in versions


async def test_json_and_merge_patches_are_coalesced(make_env):
    env = await make_env()
    await env.via("GET", f"{Q}/q1")
    await env.via(
        "PATCH",
        f"{Q}/q1/status",
        {"status": {"running": 2}},
        content_type="application/merge-patch+json",
    )
    await env.via(
        "PATCH",
        f"{Q}/q1/status",
        [{"op": "add", "path": "/status/pending", "value": 4}],
        content_type="application/json-patch+json",
    )
    await env.settle()
    _, final, _ = await env.direct("GET", f"{Q}/q1")
    assert final["status"] == {"running": 2, "pending": 4}


async def test_bad_status_writes_get_400_and_422(make_env):
    env = await make_env()
    await env.via("GET", f"{Q}/q1")
    async with env.session.put(
        f"{env.sidecar.url}{Q}/q1/status",
        data=b"{nope",
        headers={"Content-Type": "application/json"},
    ) as response:
        assert response.status == 400
    status, answer, _ = await env.via(
        "PATCH",
        f"{Q}/q1/status",
        [{"op": "remove", "path": "/status/nope"}],
        content_type="application/json-patch+json",
    )
    assert status == 422 and answer["kind"] == "Status"


async def test_upgrade_requests_get_a_clear_501(make_env):
    env = await make_env()
    async with env.session.get(
        f"{env.sidecar.url}/api/v1/namespaces/a/pods/p/exec",
        headers={"Connection": "Upgrade", "Upgrade": "SPDY/3.1"},
    ) as r:
        assert r.status == 501
        assert "exec" in (await r.json())["message"]


async def test_watch_events_stream_through_one_by_one(make_env):
    env = await make_env()
    async with env.session.get(f"{env.sidecar.url}{Q}?watch=1") as response:
        first = json.loads(await asyncio.wait_for(response.content.readline(), 5))
        assert first["type"] == "ADDED"
        await env.direct("POST", Q, queue_body("q9"))
        second = json.loads(await asyncio.wait_for(response.content.readline(), 5))
        assert (second["type"], second["object"]["metadata"]["name"]) == ("ADDED", "q9")


@pytest.mark.slow  # a stress run
async def test_many_writers_on_many_objects_converge_exactly(make_env):
    env = await make_env(flush_interval=0.05, max_upstream_qps=500)
    names = [f"s{i}" for i in range(40)]
    for name in names:
        await env.direct("POST", Q, queue_body(name))
    bases = {name: (await env.via("GET", f"{Q}/{name}"))[1] for name in names}
    last = {}

    async def writer(w):
        for n in range(25):
            name = names[(w * 7 + n) % len(names)]
            value = str(w * 1000 + n)  # unique, and a quantity, as the CRD requires
            await env.via(
                "PUT",
                f"{Q}/{name}/status",
                {**bases[name], "status": {"allocated": {"cpu": value}}},
            )
            last[name] = value

    await asyncio.gather(*(writer(w) for w in range(20)))
    await env.settle(1.0)
    for name in names:
        _, obj, _ = await env.direct("GET", f"{Q}/{name}")
        assert obj["status"]["allocated"]["cpu"] == last[name], name
    assert env.sandbox.stats.conflicts.get("queues/status", 0) == 0


async def test_server_side_apply_of_status_is_coalesced_newest_per_manager(make_env):
    env = await make_env()
    await env.via("GET", f"{Q}/q1")
    apply = "application/apply-patch+yaml"
    path = f"{Q}/q1/status?fieldManager=volcano-controller&force=true"
    async with env.session.patch(
        env.sidecar.url + path,
        headers={"Content-Type": apply},
        data="status:\n  pending: 3\n  running: 1\n",
    ) as response:
        assert response.status == 200
    async with env.session.patch(
        env.sidecar.url + path, headers={"Content-Type": apply}, data="status:\n  pending: 4\n"
    ) as response:
        assert response.status == 200
    await env.settle()
    _, final, _ = await env.direct("GET", f"{Q}/q1")
    assert final["status"] == {"pending": 4}  # running dropped by the newer apply


async def test_a_resource_gone_from_allocated_is_gone_from_the_server(make_env):
    env = await make_env()
    allocated = {"cpu": "1", "nvidia.com/gpu": "2"}
    await env.direct(
        "PUT", f"{Q}/q1/status", {**queue_body("q1"), "status": {"allocated": allocated}}
    )
    _, base, _ = await env.via("GET", f"{Q}/q1")
    await env.via("PUT", f"{Q}/q1/status", {**base, "status": {"allocated": {"cpu": "1"}}})
    await env.settle()
    _, final, _ = await env.direct("GET", f"{Q}/q1")
    assert final["status"]["allocated"] == {"cpu": "1"}


async def test_a_metadata_only_list_is_not_taken_for_the_queues_status(make_env):
    """A PartialObjectMetadataList carries each Queue's resourceVersion and no status: taken as
    the Queue's, it made its version's status empty, and a writer's PUT from that version then
    owned every field, another writer's included."""
    env = await make_env()
    status = {"allocated": {"cpu": "4"}, "state": "Open"}
    await env.direct("PUT", f"{Q}/q1/status", {**queue_body("q1"), "status": status})
    _, full, _ = await env.via("GET", f"{Q}/q1")
    metadata_only = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
    async with env.session.get(env.sidecar.url + Q, headers={"Accept": metadata_only}) as r:
        assert r.status == 200
    await env.via("PUT", f"{Q}/q1/status", {**full, "status": {**status, "state": "Closed"}})
    assert env.sidecar.proxy.coalescer._owned[Q.strip("/").removeprefix("apis/")] == {"state"}


async def test_an_apply_in_yaml_is_read_as_kubernetes_reads_it_never_a_500(make_env):
    """An unquoted date in YAML is a string to Kubernetes' decoder (go-yaml v2 into
    interface{}), not a timestamp; a value JSON has no form for is the client's error."""
    env = await make_env()
    await env.via("GET", f"{Q}/q1")
    path = f"{env.sidecar.url}{Q}/q1/status?fieldManager=volcano-controller&force=true"
    headers = {"Content-Type": "application/apply-patch+yaml"}
    async with env.session.patch(
        path, headers=headers, data="status:\n  reservation: {nodes: [2026-01-01]}\n"
    ) as r:
        assert r.status == 200, await r.text()
    async with env.session.patch(path, headers=headers, data="status:\n  pending: .nan\n") as r:
        assert r.status == 400 and "JSON cannot" in (await r.json())["message"]
    await env.settle()
    _, final, _ = await env.direct("GET", f"{Q}/q1")
    assert final["status"]["reservation"] == {"nodes": ["2026-01-01"]}  # a node so named


async def test_volcano_1_11_writers_the_schedulers_stale_put_and_the_controllers_apply_both_land(
    make_env,
):
    """Volcano >= 1.11, each writer in its own pod with its own sidecar: the scheduler PUTs its
    whole, possibly stale, Queue to /status with a new `allocated` (pkg/scheduler/cache/cache.go
    UpdateQueueStatus); the queue controller server-side applies `status.state` alone as field
    manager queue-controller (pkg/controllers/queue/queue_controller_action.go, ApplyStatus of
    QueueStatus().WithState)."""
    env = await make_env()  # the scheduler's sidecar
    await env.direct("PUT", f"{Q}/q1/status", {**queue_body("q1"), "status": {"state": "Open"}})
    _, stale, _ = await env.via("GET", f"{Q}/q1")  # the scheduler's cached copy: Open
    apply = {
        "kind": "Queue",
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "metadata": {"name": "q1"},
        "status": {"state": "Closed"},
    }
    async with sidecar_running(Cluster(env.sandbox.url), settings()) as controllers:
        await env.request("GET", f"{controllers.url}{Q}/q1")  # its informer's copy
        async with env.session.patch(
            f"{controllers.url}{Q}/q1/status?fieldManager=queue-controller",
            headers={"Content-Type": "application/apply-patch+yaml"},
            data=json.dumps(apply),
        ) as response:
            assert response.status == 200
        for cpu in ("1", "2", "3"):
            status, _, _ = await env.via(
                "PUT",
                f"{Q}/q1/status",
                {**stale, "status": {**stale["status"], "allocated": {"cpu": cpu}}},
            )
            assert status == 200
        await env.settle()
    _, final, _ = await env.direct("GET", f"{Q}/q1")
    assert final["status"]["state"] == "Closed"  # the stale copy's state never lands
    assert final["status"]["allocated"] == {"cpu": "3"}
    assert env.sandbox.stats.conflicts.get("queues/status", 0) == 0
    assert env.sandbox.stats.writes.get("queues/status", 0) <= 3  # the seed, one each


def test_volcano_1_10_and_older_writes_queue_counts_with_put():
    """The storm's shape: up to 1.10 the queue controller PUTs state and the counts with the
    resourceVersion it read (UpdateStatus) on every sync; the other tests replay it."""
    from tests.upstream import volcano_file

    controller = volcano_file("pkg/controllers/queue/queue_controller_action.go", "v1.10.0")
    assert "queueStatus.Pending++" in controller
    assert "Queues().UpdateStatus(context.TODO(), newQueue, metav1.UpdateOptions{})" in controller
    assert "ApplyStatus" not in controller
    in_1_11 = volcano_file("pkg/controllers/queue/queue_controller_action.go", "v1.11.0")
    assert "ApplyStatus" in in_1_11 and "Queues().UpdateStatus(" not in in_1_11


def test_volcanos_source_still_writes_queue_status_these_ways():
    from tests.upstream import go_function, volcano_file

    controller = volcano_file("pkg/controllers/queue/queue_controller_action.go")
    assert "v1beta1apply.QueueStatus().WithState(" in controller
    assert (
        "Queues().ApplyStatus(context.TODO(), queueApply, metav1.ApplyOptions{FieldManager: "
        "controllerName})"
    ) in controller
    assert 'controllerName = "queue-controller"' in volcano_file(
        "pkg/controllers/queue/queue_controller_util.go"
    )
    scheduler = go_function(volcano_file("pkg/scheduler/cache/cache.go"), "UpdateQueueStatus")
    assert "Queues().UpdateStatus(context.TODO(), newQueue, metav1.UpdateOptions{})" in scheduler
    # ... only for a queue whose allocated changed (framework/session.go, updateQueueStatus).
    session = volcano_file("pkg/scheduler/framework/session.go")
    assert (
        "equality.Semantic.DeepEqual(ssn.Queues[queueID].Queue.Status.Allocated, "
        "queueStatus)" in session
    )
