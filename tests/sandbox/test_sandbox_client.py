"""The sandbox driven by the `kubernetes` Python client, as a controller would drive an
apiserver: conflicts, preconditions, status isolation, patches, watches, selectors, faults."""

import threading
import time

import pytest
from kubernetes import client, watch

from tests.sandbox_fixtures import pod, queue
from volcano_guard_sandbox.apiserver.faults import FaultRule

GROUP, VERSION = "scheduling.volcano.sh", "v1beta1"


def test_create_assigns_uid_timestamps_generation_and_increasing_resource_versions(core):
    first = core.create_namespaced_pod("team-a", pod("a"))
    second = core.create_namespaced_pod("team-a", pod("b"))
    assert first.metadata.uid and first.metadata.uid != second.metadata.uid
    assert first.metadata.creation_timestamp is not None
    assert first.metadata.generation == 1
    assert int(second.metadata.resource_version) > int(first.metadata.resource_version)
    assert first.spec.scheduler_name == "default-scheduler"  # defaulted as the apiserver does
    assert first.status.phase == "Pending"


def test_generate_name_makes_a_unique_name(core):
    body = pod()
    body["metadata"] = {"generateName": "worker-", "namespace": "team-a"}
    made = {core.create_namespaced_pod("team-a", body).metadata.name for _ in range(5)}
    assert len(made) == 5 and all(name.startswith("worker-") for name in made)


def test_limits_are_copied_into_missing_requests_on_create(core):
    body = pod()
    body["spec"]["containers"][0]["resources"] = {
        "limits": {"cpu": "2", "memory": "1Gi"},
        "requests": {"cpu": "1"},
    }
    created = core.create_namespaced_pod("team-a", body)
    assert created.spec.containers[0].resources.requests == {"cpu": "1", "memory": "1Gi"}


def test_create_in_a_missing_namespace_is_404(core):
    with pytest.raises(client.ApiException) as info:
        core.create_namespaced_pod("nope", pod(namespace="nope"))
    assert info.value.status == 404
    assert 'namespaces \\"nope\\" not found' in info.value.body


def test_create_twice_is_409_already_exists(core):
    core.create_namespaced_pod("team-a", pod())
    with pytest.raises(client.ApiException) as info:
        core.create_namespaced_pod("team-a", pod())
    assert info.value.status == 409 and "AlreadyExists" in info.value.body


def test_stale_update_is_409_conflict_in_the_apiservers_words(custom):
    created = custom.create_cluster_custom_object(GROUP, VERSION, "queues", queue())
    fresh = dict(created, spec={"weight": 2})
    custom.replace_cluster_custom_object(GROUP, VERSION, "queues", "q1", fresh)
    stale = dict(created, spec={"weight": 3})
    with pytest.raises(client.ApiException) as info:
        custom.replace_cluster_custom_object(GROUP, VERSION, "queues", "q1", stale)
    assert info.value.status == 409
    assert (
        "the object has been modified; please apply your changes to the latest version "
        "and try again"
    ) in info.value.body
    assert '"reason":"Conflict"' in info.value.body.replace(" ", "")


def test_update_without_resource_version_is_unconditional(custom):
    custom.create_cluster_custom_object(GROUP, VERSION, "queues", queue())
    body = queue(weight=9)
    updated = custom.replace_cluster_custom_object(GROUP, VERSION, "queues", "q1", body)
    assert updated["spec"]["weight"] == 9
    assert updated["metadata"]["generation"] == 2


def test_status_subresource_changes_only_status_and_main_resource_ignores_status(custom):
    created = custom.create_cluster_custom_object(
        GROUP, VERSION, "queues", {**queue(), "status": {"state": "Open"}}
    )
    assert "status" not in created  # status on create is ignored where /status exists
    body = dict(created, spec={"weight": 5}, status={"state": "Closed"})
    after_status = custom.replace_cluster_custom_object_status(GROUP, VERSION, "queues", "q1", body)
    assert after_status["status"] == {"state": "Closed"}
    assert after_status["spec"] == {"weight": 1, "dequeueStrategy": "traverse"}
    body = dict(after_status, spec={"weight": 6}, status={"state": "Open"})
    after_main = custom.replace_cluster_custom_object(GROUP, VERSION, "queues", "q1", body)
    assert after_main["spec"] == {"weight": 6, "dequeueStrategy": "traverse"}
    assert after_main["status"] == {"state": "Closed"}


def test_podgroup_has_no_status_subresource_so_status_is_written_with_the_object(custom):
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PodGroup",
        "metadata": {"name": "pg"},
        "spec": {"minMember": 1},
        "status": {"phase": "Pending"},
    }
    created = custom.create_namespaced_custom_object(GROUP, VERSION, "team-a", "podgroups", body)
    assert created["status"] == {"phase": "Pending"}
    with pytest.raises(client.ApiException) as info:
        custom.get_namespaced_custom_object_status(GROUP, VERSION, "team-a", "podgroups", "pg")
    assert info.value.status == 404


def test_noop_update_keeps_the_resource_version(custom):
    created = custom.create_cluster_custom_object(GROUP, VERSION, "queues", queue())
    again = custom.replace_cluster_custom_object(GROUP, VERSION, "queues", "q1", created)
    assert again["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


def test_merge_and_json_patch_results(custom):
    custom.create_cluster_custom_object(GROUP, VERSION, "queues", queue(reclaimable=True))
    merged = custom.patch_cluster_custom_object(
        GROUP, VERSION, "queues", "q1", {"spec": {"weight": 4, "reclaimable": None}}
    )
    assert merged["spec"] == {"weight": 4, "dequeueStrategy": "traverse"}
    patched = custom.patch_cluster_custom_object(
        GROUP,
        VERSION,
        "queues",
        "q1",
        [
            {"op": "add", "path": "/spec/capability", "value": {"cpu": "8"}},
            {"op": "replace", "path": "/spec/weight", "value": 2},
        ],
        _content_type="application/json-patch+json",
    )
    assert patched["spec"] == {
        "weight": 2,
        "capability": {"cpu": "8"},
        "dequeueStrategy": "traverse",
    }


def test_strategic_merge_patch_merges_containers_by_name(core):
    body = pod()
    body["spec"]["containers"].append({"name": "side", "image": "old"})
    core.create_namespaced_pod("team-a", body)
    patched = core.patch_namespaced_pod(
        "p1", "team-a", {"spec": {"containers": [{"name": "side", "image": "new"}]}}
    )
    images = {c.name: c.image for c in patched.spec.containers}
    assert images == {"c": "busybox", "side": "new"}


def test_custom_resources_refuse_strategic_merge_patch_with_415(custom):
    custom.create_cluster_custom_object(GROUP, VERSION, "queues", queue())
    with pytest.raises(client.ApiException) as info:
        custom.patch_cluster_custom_object(
            GROUP,
            VERSION,
            "queues",
            "q1",
            {"spec": {}},
            _content_type="application/strategic-merge-patch+json",
        )
    assert info.value.status == 415


def test_patch_with_another_uid_fails_the_precondition(custom):
    created = custom.create_cluster_custom_object(GROUP, VERSION, "queues", queue())
    with pytest.raises(client.ApiException) as info:
        custom.patch_cluster_custom_object_status(
            GROUP,
            VERSION,
            "queues",
            "q1",
            {"metadata": {"uid": "not-the-uid"}, "status": {"state": "Open"}},
        )
    assert info.value.status == 409
    assert (
        f"Precondition failed: UID in precondition: not-the-uid, UID in object meta: "
        f"{created['metadata']['uid']}"
    ) in info.value.body


def test_delete_honours_uid_and_resource_version_preconditions(core):
    created = core.create_namespaced_pod("team-a", pod())
    for preconditions in ({"uid": "other"}, {"resource_version": "1"}):
        with pytest.raises(client.ApiException) as info:
            core.delete_namespaced_pod(
                "p1",
                "team-a",
                body=client.V1DeleteOptions(preconditions=client.V1Preconditions(**preconditions)),
            )
        assert info.value.status == 409 and "Precondition failed" in info.value.body
    core.delete_namespaced_pod(
        "p1",
        "team-a",
        body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=created.metadata.uid)),
    )
    with pytest.raises(client.ApiException) as info:
        core.read_namespaced_pod("p1", "team-a")
    assert info.value.status == 404 and "NotFound" in info.value.body


def test_finalizers_hold_a_delete_until_removed(custom):
    custom.create_cluster_custom_object(
        GROUP, VERSION, "queues", {**queue(), "metadata": {"name": "q1", "finalizers": ["keep"]}}
    )
    custom.delete_cluster_custom_object(GROUP, VERSION, "queues", "q1")
    held = custom.get_cluster_custom_object(GROUP, VERSION, "queues", "q1")
    assert held["metadata"]["deletionTimestamp"]
    custom.patch_cluster_custom_object(
        GROUP, VERSION, "queues", "q1", {"metadata": {"finalizers": None}}
    )
    with pytest.raises(client.ApiException) as info:
        custom.get_cluster_custom_object(GROUP, VERSION, "queues", "q1")
    assert info.value.status == 404


@pytest.mark.parametrize("endpoint", ["bindings", "pods/binding"])
def test_binding_sets_node_name_once(core, endpoint):
    core.create_namespaced_pod("team-a", pod())
    binding = client.V1Binding(
        metadata=client.V1ObjectMeta(name="p1"),
        target=client.V1ObjectReference(kind="Node", name="node-1"),
    )
    bind = (
        core.create_namespaced_binding
        if endpoint == "bindings"
        else lambda ns, body, **kw: core.create_namespaced_pod_binding("p1", ns, body, **kw)
    )
    bind("team-a", binding, _preload_content=False)
    bound = core.read_namespaced_pod("p1", "team-a")
    assert bound.spec.node_name == "node-1"
    assert bound.status.conditions[0].type == "PodScheduled"
    with pytest.raises(client.ApiException) as info:
        bind("team-a", binding, _preload_content=False)
    assert info.value.status == 409


def test_label_and_field_selectors(core, sandbox):
    core.create_namespaced_pod("team-a", pod("a", app="x", tier="1"))
    core.create_namespaced_pod("team-a", pod("b", app="y"))
    body = pod("c", app="x")
    body["spec"]["schedulerName"] = "volcano"
    core.create_namespaced_pod("team-a", body)

    def names(**query):
        return sorted(p.metadata.name for p in core.list_namespaced_pod("team-a", **query).items)

    assert names(label_selector="app=x") == ["a", "c"]
    assert names(label_selector="app!=x") == ["b"]
    assert names(label_selector="app in (x,y),!tier") == ["b", "c"]
    assert names(label_selector="tier") == ["a"]
    assert names(field_selector="spec.schedulerName=volcano") == ["c"]
    assert names(field_selector="metadata.name!=a,status.phase=Pending") == ["b", "c"]
    with pytest.raises(client.ApiException) as info:
        core.list_namespaced_pod("team-a", field_selector="spec.bogus=1")
    assert info.value.status == 400


def test_list_returns_the_current_resource_version(core):
    created = core.create_namespaced_pod("team-a", pod())
    listed = core.list_namespaced_pod("team-a")
    assert listed.metadata.resource_version == created.metadata.resource_version


def test_watch_streams_events_in_order_and_resumes_from_a_resource_version(core):
    start = core.list_namespaced_pod("team-a").metadata.resource_version

    def writes():
        time.sleep(0.2)
        core.create_namespaced_pod("team-a", pod("w"))
        core.patch_namespaced_pod("w", "team-a", {"metadata": {"labels": {"x": "1"}}})
        core.delete_namespaced_pod("w", "team-a")

    writer = threading.Thread(target=writes)
    writer.start()
    seen = []
    stream = watch.Watch()
    for event in stream.stream(
        core.list_namespaced_pod, "team-a", resource_version=start, timeout_seconds=2
    ):
        seen.append((event["type"], event["object"].metadata.resource_version))
        if len(seen) == 3:
            stream.stop()
    writer.join()
    assert [kind for kind, _ in seen] == ["ADDED", "MODIFIED", "DELETED"]
    versions = [int(rv) for _, rv in seen]
    assert versions == sorted(versions)
    resumed = [
        event["type"]
        for event in watch.Watch().stream(
            core.list_namespaced_pod, "team-a", resource_version=str(versions[0]), timeout_seconds=1
        )
    ]
    assert resumed == ["MODIFIED", "DELETED"]


def test_watch_from_a_resource_version_older_than_the_window_is_410(core):
    start = core.list_namespaced_pod("team-a").metadata.resource_version
    for i in range(60):  # the fixture's event window holds 50
        core.create_namespaced_pod("team-a", pod(f"p{i}"))
    with pytest.raises(client.ApiException) as info:
        list(
            watch.Watch().stream(
                core.list_namespaced_pod, "team-a", resource_version=start, timeout_seconds=1
            )
        )
    assert info.value.status == 410


def test_watch_with_a_selector_sees_objects_leave_it_as_deleted(core):
    core.create_namespaced_pod("team-a", pod("a", app="x"))
    start = core.list_namespaced_pod("team-a").metadata.resource_version
    core.patch_namespaced_pod("a", "team-a", {"metadata": {"labels": {"app": "y"}}})
    events = [
        e["type"]
        for e in watch.Watch().stream(
            core.list_namespaced_pod,
            "team-a",
            label_selector="app=x",
            resource_version=start,
            timeout_seconds=1,
        )
    ]
    assert events == ["DELETED"]


def test_injected_503_then_429_with_retry_after(sandbox):
    configuration = client.Configuration(host=sandbox.url)
    configuration.retries = False  # see the raw answers, not urllib3's retries of them
    core = client.CoreV1Api(client.ApiClient(configuration))
    sandbox.set_faults(
        FaultRule(
            verbs=frozenset({"list"}), resources=frozenset({"pods"}), error_rate=1.0, error_code=503
        )
    )
    with pytest.raises(client.ApiException) as info:
        core.list_namespaced_pod("team-a")
    assert info.value.status == 503
    core.create_namespaced_pod("team-a", pod())  # other verbs are untouched
    sandbox.set_faults(FaultRule(throttle_rate=1.0, retry_after=7))
    with pytest.raises(client.ApiException) as info:
        core.read_namespaced_pod("p1", "team-a")
    assert info.value.status == 429
    assert info.value.headers["Retry-After"] == "7"
    sandbox.set_faults()
    assert core.read_namespaced_pod("p1", "team-a").metadata.name == "p1"
    assert sandbox.stats()["injected"] == {"429": 1, "503": 1}


def test_injected_latency_delays_matching_requests(core, sandbox):
    sandbox.set_faults(FaultRule(verbs=frozenset({"list"}), latency=0.3))
    started = time.monotonic()
    core.list_namespaced_pod("team-a")
    assert time.monotonic() - started >= 0.3


def test_stats_count_requests_writes_and_conflicts(custom, sandbox):
    created = custom.create_cluster_custom_object(GROUP, VERSION, "queues", queue())
    custom.replace_cluster_custom_object_status(
        GROUP, VERSION, "queues", "q1", dict(created, status={"state": "Open"})
    )
    with pytest.raises(client.ApiException):
        custom.replace_cluster_custom_object_status(
            GROUP, VERSION, "queues", "q1", dict(created, status={"state": "Closed"})
        )
    stats = sandbox.stats()
    assert stats["requests"]["update queues/status"] == 2
    assert stats["writes"] == {"queues": 1, "queues/status": 1}  # seeding bypasses HTTP
    assert stats["conflicts"] == {"queues/status": 1}


def test_a_watcher_that_stops_reading_is_dropped_past_its_buffer_bound():
    """As the apiserver drops a watcher that does not keep up: its backlog of events must not
    hold the server's memory (MAX_QUEUED_BYTES), and other clients carry on."""
    import socket

    from volcano_guard_sandbox.apiserver.resources import find
    from volcano_guard_sandbox.apiserver.runner import SandboxThread
    from volcano_guard_sandbox.apiserver.store import MAX_QUEUED_BYTES

    queues = find("scheduling.volcano.sh", "v1beta1", "queues")
    big = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": "q1", "annotations": {"note": "x" * 100_000}},
        "spec": {"weight": 1},
    }
    with SandboxThread() as sandbox:
        sandbox.seed([big])
        host, port = sandbox.url.removeprefix("http://").split(":")
        stalled = socket.socket()
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)  # no 32 MB autotuning
        stalled.connect((host, int(port)))
        stalled.sendall(
            b"GET /apis/scheduling.volcano.sh/v1beta1/queues?watch=true HTTP/1.1\r\nHost: x\r\n\r\n"
        )
        while not sandbox.call(lambda box: box.store.open_watches):
            time.sleep(0.01)
        sent = 0
        while sandbox.call(lambda box: box.store.open_watches) and sent < 4 * MAX_QUEUED_BYTES:
            sandbox.call(
                lambda box, n=sent: box.store.update(
                    queues, "", "q1", {**big, "spec": {"weight": n + 2}}, None
                )
            )
            sent += 100_000
        assert sandbox.call(lambda box: box.store.open_watches) == 0, "the watcher was kept"
        assert sent < 2 * MAX_QUEUED_BYTES  # dropped near its bound, not long after
        stalled.close()
