"""The sandbox's HTTP surface, edge by edge, with a plain aiohttp client in the same loop."""

import asyncio
import json

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from volcano_guard_sandbox.apiserver.runner import resource_for, running, seed
from volcano_guard_sandbox.apiserver.server import SandboxSettings
from volcano_guard_sandbox.apiserver.store import Store

Q = "/apis/scheduling.volcano.sh/v1beta1/queues"
PODS = "/api/v1/namespaces/team-a/pods"


@pytest.fixture
async def box():
    async with running(settings=SandboxSettings(bookmark_interval=0.2)) as sandbox:
        sandbox.seed([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}])
        async with aiohttp.ClientSession(sandbox.url) as session:
            sandbox.http = session
            yield sandbox


async def call(box, method, path, body=None, content_type="application/json", **kw):
    data = body if isinstance(body, bytes) else (None if body is None else json.dumps(body))
    headers = {"Content-Type": content_type} if data is not None else {}
    async with box.http.request(method, path, data=data, headers=headers, **kw) as response:
        return response.status, await response.json(content_type=None)


def queue(name="q1"):
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {"weight": 1},
    }


async def test_discovery_lists_groups_resources_and_subresources(box):
    status, groups = await call(box, "GET", "/apis")
    assert status == 200
    assert {g["name"] for g in groups["groups"]} == {
        "scheduling.volcano.sh",
        "batch.volcano.sh",
        "flow.volcano.sh",
        "admissionregistration.k8s.io",
        "coordination.k8s.io",
        "wgpolicyk8s.io",
        "apps",
        "batch",
        "policy",
        "rbac.authorization.k8s.io",
        "apiextensions.k8s.io",
        "networking.k8s.io",
        "monitoring.coreos.com",
    }
    _, core = await call(box, "GET", "/api/v1")
    names = {r["name"]: r for r in core["resources"]}
    assert names["pods"]["namespaced"] and not names["nodes"]["namespaced"]
    assert "pods/status" in names and "pods/binding" in names
    assert names["bindings"]["verbs"] == ["create"]
    _, scheduling = await call(box, "GET", "/apis/scheduling.volcano.sh/v1beta1")
    names = {r["name"] for r in scheduling["resources"]}
    assert names == {"queues", "queues/status", "podgroups"}
    _, version = await call(box, "GET", "/version")
    assert version["major"] == "1"


async def test_openapi_v3_declares_field_validation_on_each_kinds_patch(box):
    _, index = await call(box, "GET", "/openapi/v3")
    url = index["paths"]["apis/scheduling.volcano.sh/v1beta1"]["serverRelativeURL"]
    _, document = await call(box, "GET", url)
    patch = document["paths"]["/apis/scheduling.volcano.sh/v1beta1/queues/{name}"]["patch"]
    assert patch["x-kubernetes-group-version-kind"]["kind"] == "Queue"
    assert any(p["name"] == "fieldValidation" for p in patch["parameters"])
    status, _ = await call(box, "GET", "/openapi/v3/apis/nope/v1")
    assert status == 404


@pytest.mark.parametrize(
    ("method", "path", "body", "content_type", "code", "needle"),
    [
        ("POST", Q, b"{not json", "application/json", 400, "not valid JSON"),
        ("POST", Q, [1], "application/json", 400, "not a Queue"),
        ("POST", Q, {**queue(), "kind": "Pod"}, "application/json", 400, "does not match"),
        (
            "POST",
            Q,
            {**queue(), "metadata": {"name": "Bad_Name"}},
            "application/json",
            422,
            "RFC 1123",
        ),
        ("POST", Q, {"spec": {}}, "application/json", 422, "name or generateName is required"),
        (
            "POST",
            Q,
            {**queue(), "metadata": {"name": "x", "labels": {"a": 1}}},
            "application/json",
            422,
            "map of strings",
        ),
        (
            "POST",
            PODS,
            {"metadata": {"name": "p"}, "spec": {}},
            "application/json",
            422,
            "spec.containers",
        ),
        (
            "POST",
            "/api/v1/namespaces/nope/pods",
            {"metadata": {"name": "p"}},
            "application/json",
            404,
            'namespaces "nope" not found',
        ),
        ("GET", f"{Q}/missing", None, "application/json", 404, "not found"),
        ("GET", "/apis/scheduling.volcano.sh/v1beta1/widgets", None, "", 404, "could not find"),
        ("PATCH", f"{Q}/missing", {}, "application/merge-patch+json", 404, "not found"),
        ("PUT", Q, queue(), "application/json", 405, "does not allow"),
        ("OPTIONS", Q, None, "", 405, "does not allow"),
        ("GET", f"{PODS}?labelSelector=a+in+(b", None, "", 400, "unable to parse"),
        ("GET", f"{PODS}?watch=1&resourceVersion=abc", None, "", 400, "resourceVersion"),
        ("POST", f"{Q}?dryRun=Some", queue(), "application/json", 422, "dryRun"),
    ],
)
async def test_errors_are_status_objects_with_fitting_codes(
    box, method, path, body, content_type, code, needle
):
    status, answer = await call(box, method, path, body, content_type)
    assert status == code, answer
    assert answer["kind"] == "Status" and answer["code"] == code
    assert needle in answer["message"]


async def test_apply_patch_without_field_manager_and_bad_json_patch_are_422(box):
    await call(box, "POST", Q, queue())
    status, answer = await call(
        box, "PATCH", f"{Q}/q1", b"spec: {}", "application/apply-patch+yaml"
    )
    assert status == 422 and "fieldManager: Required value" in answer["message"]
    status, answer = await call(
        box, "PATCH", f"{Q}/q1", [{"op": "remove", "path": "/nope"}], "application/json-patch+json"
    )
    assert status == 422


async def test_an_apply_in_yaml_is_read_as_kubernetes_reads_it_never_a_500(box):
    """An unquoted date stays a string (Kubernetes' go-yaml v2 into interface{}); a value
    JSON has no form for is a bad request, where it used to be a 500."""
    configmap = "/api/v1/namespaces/team-a/configmaps/c?fieldManager=me"
    apply = "application/apply-patch+yaml"
    body = b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {day: 2026-01-01}\n"
    status, answer = await call(box, "PATCH", configmap, body, apply)
    assert status == 201 and answer["data"] == {"day": "2026-01-01"}, answer
    status, answer = await call(
        box, "PATCH", configmap, body.replace(b"2026-01-01", b".nan"), apply
    )
    assert status == 400 and "JSON cannot" in answer["message"], answer


async def test_watch_sends_bookmarks_when_allowed_and_ends_on_timeout(box):
    async with box.http.get(f"{Q}?watch=1&allowWatchBookmarks=true&timeoutSeconds=1") as resp:
        lines = [json.loads(line) async for line in resp.content]
    assert lines and all(event["type"] == "BOOKMARK" for event in lines)
    assert lines[-1]["object"]["metadata"]["resourceVersion"]


async def test_watch_path_form_and_initial_added_events(box):
    await call(box, "POST", Q, queue("a"))
    async with box.http.get(
        "/apis/scheduling.volcano.sh/v1beta1/watch/queues", params={"timeoutSeconds": "1"}
    ) as resp:
        events = [json.loads(line) async for line in resp.content]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "a")]


async def test_open_watches_end_cleanly_on_shutdown():
    async with aiohttp.ClientSession() as session:
        async with running() as sandbox:
            response = await session.get(f"{sandbox.url}{Q}?watch=1")
            reader = asyncio.ensure_future(response.content.read())
            await asyncio.sleep(0.1)
            started = asyncio.get_running_loop().time()
        assert asyncio.get_running_loop().time() - started < 1.5, "shutdown waited for a watch"
        body = await asyncio.wait_for(reader, 5)
    assert body == b""  # the stream ended cleanly: no error event, no reset


async def test_fault_rules_over_http_and_stats(box):
    status, answer = await call(
        box,
        "POST",
        "/sandbox/faults",
        {"rules": [{"verbs": ["create"], "errorRate": 1.0, "errorCode": 500}]},
    )
    assert status == 200
    status, _ = await call(box, "POST", Q, queue())
    assert status == 500
    status, answer = await call(box, "POST", "/sandbox/faults", {"rules": [{"errorRate": 2}]})
    assert status == 400 and "errorRate" in answer["message"]
    await call(box, "DELETE", "/sandbox/faults")
    assert (await call(box, "POST", Q, queue()))[0] == 201
    _, stats = await call(box, "GET", "/sandbox/stats")
    assert stats["injected"] == {"500": 1}
    assert stats["objects"]["queues"] == 1
    assert stats["writes"] == {"queues": 1}


async def test_many_concurrent_writers_each_conflict_or_land_and_the_final_state_is_exact(box):
    await call(box, "POST", Q, queue())

    async def writer(i):
        for _ in range(20):
            _, current = await call(box, "GET", f"{Q}/q1")
            current["spec"]["weight"] = current["spec"]["weight"] + 1
            status, _ = await call(box, "PUT", f"{Q}/q1", current)
            if status == 200:
                return 1
            assert status == 409
        return 0

    landed = sum(await asyncio.gather(*(writer(i) for i in range(40))))
    _, final = await call(box, "GET", f"{Q}/q1")
    assert final["spec"]["weight"] == 1 + landed
    assert final["metadata"]["generation"] == 1 + landed


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=6),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=15,
)


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    body=json_values | st.fixed_dictionaries({"metadata": json_values, "spec": json_values}),
    method_path=st.sampled_from(
        [
            ("POST", Q),
            ("POST", PODS),
            ("PUT", f"{Q}/q1"),
            ("PATCH", f"{Q}/q1"),
            ("DELETE", f"{Q}/q1"),
        ]
    ),
    content_type=st.sampled_from(
        ["application/json", "application/merge-patch+json", "application/json-patch+json"]
    ),
)
def test_arbitrary_bodies_never_get_a_5xx(body, method_path, content_type):
    async def scenario():
        async with running() as sandbox, aiohttp.ClientSession(sandbox.url) as session:
            sandbox.seed(
                [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}, queue()]
            )
            method, path = method_path
            async with session.request(
                method, path, data=json.dumps(body), headers={"Content-Type": content_type}
            ) as response:
                assert response.status < 500, await response.text()
                await response.json(content_type=None)
            async with session.get(f"{Q}/q1") as response:
                assert response.status in (200, 404)

    asyncio.run(scenario())


async def test_a_secrets_string_data_is_stored_as_base64_data(box):
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "s"},
        "data": {"kept": "eA=="},
        "stringData": {"token": "abc"},
    }
    status, created = await call(box, "POST", "/api/v1/namespaces/team-a/secrets", secret)
    assert status == 201 and "stringData" not in created
    assert created["data"] == {"kept": "eA==", "token": "YWJj"}


async def test_every_namespace_carries_its_name_as_a_label(box):
    status, created = await call(
        box,
        "POST",
        "/api/v1/namespaces",
        {"metadata": {"name": "team-b", "labels": {"tier": "gold"}}},
    )
    assert status == 201
    assert created["metadata"]["labels"] == {
        "tier": "gold",
        "kubernetes.io/metadata.name": "team-b",
    }


def test_generate_name_tries_another_name_when_one_is_taken():
    store = Store()
    seed(store, [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}}])
    pods = resource_for({"apiVersion": "v1", "kind": "Pod"})
    body = {"metadata": {"generateName": "w-"}, "spec": {"containers": [{"name": "c"}]}}
    names = {store.create(pods, "a", body).fields["metadata.name"] for _ in range(5000)}
    assert len(names) == 5000
    assert all(
        len(name) == 7 and set(name[2:]) <= set("bcdfghjklmnpqrstvwxz2456789") for name in names
    )


async def test_a_node_keeps_the_status_it_is_created_with(box):
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n1"},
        "status": {"allocatable": {"cpu": "4"}},
    }
    status, created = await call(box, "POST", "/api/v1/nodes", node)
    assert status == 201 and created["status"] == {"allocatable": {"cpu": "4"}}
    _, queue_created = await call(box, "POST", Q, {**queue("q9"), "status": {"state": "Open"}})
    assert "status" not in queue_created  # a custom resource's /status is the server's


async def test_a_list_is_paged_with_limit_and_continue(box):
    for i in range(5):
        await call(
            box,
            "POST",
            PODS,
            {"metadata": {"name": f"p{i}"}, "spec": {"containers": [{"name": "c"}]}},
        )
    status, first = await call(box, "GET", f"{PODS}?limit=2")
    assert status == 200 and [p["metadata"]["name"] for p in first["items"]] == ["p0", "p1"]
    names, token = [], first["metadata"]["continue"]
    while token:
        _, page = await call(box, "GET", f"{PODS}?limit=2&continue={token}")
        assert page["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
        names += [p["metadata"]["name"] for p in page["items"]]
        token = page["metadata"].get("continue")
    assert names == ["p2", "p3", "p4"]
    status, _ = await call(box, "GET", f"{PODS}?limit=2&continue=garbage")
    assert status == 400
