"""The coalescer's rules over plain data: intent, ownership, flush plans, outcomes."""

import pytest
from yarl import URL

from volcano_guard.sidecar.coalescer import (
    DELETE,
    Backpressure,
    BadWrite,
    Coalescer,
    FlushPlan,
    ObjectKey,
    Passthrough,
    Settled,
    StatusWrite,
)
from volcano_guard.sidecar.routes import classify, object_path

KEY = ObjectKey("scheduling.volcano.sh/v1beta1/queues", "", "q1")


def queue(rv, status, uid="uid-1"):
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": "q1", "uid": uid, "resourceVersion": str(rv)},
        "spec": {"weight": 1},
        "status": status,
    }


def put(rv, status, uid="uid-1"):
    return StatusWrite(KEY, "put", queue(rv, status, uid))


def flush(c, now=10.0, code=200, server=None):
    """Plan the flush for KEY and complete it as the server would answer."""
    plan = c.plan(KEY)
    if isinstance(plan, Settled):
        return plan, None
    applied = server if server is not None else plan.patch["status"]
    return plan, c.complete(plan, code, applied, now)


def server_after(c, rv, plan):
    """The object the server returns after applying plan's merge patch to the known state."""
    status = dict(c.view(KEY, {})["status"] if c.view(KEY, {}).get("status") else {})
    for name, value in plan.patch["status"].items():
        if value is None:
            status.pop(name, None)
        else:
            status[name] = value
    return queue(rv, status)


@pytest.fixture
def c():
    coalescer = Coalescer(flush_interval=1.0, max_pending=100)
    coalescer.observe(KEY, queue(10, {"state": "Open", "pending": 1, "allocated": {"cpu": "1"}}))
    return coalescer


def test_unknown_base_and_nothing_owned_is_forwarded_unchanged():
    fresh = Coalescer(flush_interval=1.0, max_pending=10)
    with pytest.raises(Passthrough):
        fresh.absorb(put(5, {"pending": 2}), now=0)


def test_an_unknown_base_changing_a_field_the_writer_does_not_own_goes_to_the_server(c):
    """Taken, only the owned fields would be, and the controller closing the queue (state,
    never owned by this writer) answered 200 and dropped; forwarded, the API server's answer
    (a 409 for a stale base) makes the writer read again."""
    c.absorb(put(10, {"state": "Open", "pending": 2, "allocated": {"cpu": "1"}}), now=0)
    with pytest.raises(Passthrough):
        c.absorb(put(3, {"state": "Closed", "pending": 2, "allocated": {"cpu": "1"}}), now=0.1)
    c.absorb(put(3, {"state": "Open", "pending": 5, "allocated": {"cpu": "1"}}), now=0.2)
    assert c.plan(KEY).patch["status"] == {"pending": 5}  # owned, and nothing else changed


def test_put_intent_owns_only_the_fields_it_changed_relative_to_its_base(c):
    c.absorb(put(10, {"state": "Open", "pending": 1, "allocated": {"cpu": "2"}}), now=0)
    plan = c.plan(KEY)
    assert isinstance(plan, FlushPlan)
    assert plan.patch == {"metadata": {"uid": "uid-1"}, "status": {"allocated": {"cpu": "2"}}}


def test_stale_copy_of_another_writers_field_is_never_sent(c):
    # Another writer moved pending 1 -> 7 on the server; this writer's cache is stale.
    c.observe(KEY, queue(11, {"state": "Open", "pending": 7, "allocated": {"cpu": "1"}}))
    c.absorb(put(10, {"state": "Open", "pending": 1, "allocated": {"cpu": "3"}}), now=0)
    assert c.plan(KEY).patch["status"] == {"allocated": {"cpu": "3"}}


def test_a_null_stale_copy_of_an_absent_field_is_not_a_change():
    # Volcano's v1beta1 QueueStatus.allocated has no omitempty: a writer whose base has no
    # allocated sends null, which the API server prunes. It must not take the field over.
    c = Coalescer(flush_interval=1.0, max_pending=10)
    c.observe(KEY, queue(10, {}))
    c.absorb(put(10, {"allocated": None, "pending": 3}), now=0)
    assert c.plan(KEY).patch["status"] == {"pending": 3}


def test_a_to_b_to_a_is_not_lost(c):
    """The prototype without ownership lost this: A -> B flushed, then B -> A from a stale
    base equal to A looks like 'no change' unless allocated is owned."""
    c.absorb(put(10, {"state": "Open", "pending": 1, "allocated": {"cpu": "2"}}), now=0)
    plan = c.plan(KEY)
    c.complete(plan, 200, server_after(c, 11, plan), now=0.1)
    # The writer's informer still shows rv 10 (allocated cpu 1) and it writes A again.
    c.absorb(put(10, {"state": "Open", "pending": 1, "allocated": {"cpu": "1"}}), now=1.5)
    again = c.plan(KEY)
    assert isinstance(again, FlushPlan)
    assert again.patch["status"] == {"allocated": {"cpu": "1"}}


def test_many_writes_merge_into_one_patch_newest_value_wins(c):
    for n in range(1000):
        c.absorb(put(10, {"state": "Open", "pending": 1, "allocated": {"cpu": str(n)}}), now=0)
    assert c.pending_count == 1
    assert c.plan(KEY).patch["status"] == {"allocated": {"cpu": "999"}}
    assert c.counters.absorbed == 1000


def test_nothing_changed_means_no_write(c):
    c.absorb(put(10, {"state": "Open", "pending": 1, "allocated": {"cpu": "2"}}), now=0)
    c.observe(KEY, queue(12, {"state": "Open", "pending": 1, "allocated": {"cpu": "2"}}))
    settled = c.plan(KEY)
    assert isinstance(settled, Settled) and settled.outcome == "noop"
    assert c.pending_count == 0 and c.counters.noop_skipped == 1


def test_removed_owned_field_is_sent_as_null(c):
    c.absorb(put(10, {"state": "Open", "pending": 1}), now=0)  # allocated removed
    assert c.plan(KEY).patch["status"] == {"allocated": None}


def test_a_key_removed_from_a_nested_map_is_sent_as_null_not_merged_back(c):
    """A merge patch merges nested objects: allocated {cpu} over the server's {cpu, gpu}
    would keep the GPUs, so the patch names them null."""
    c.observe(KEY, queue(11, {"state": "Open", "allocated": {"cpu": "1", "nvidia.com/gpu": "2"}}))
    c.absorb(put(11, {"state": "Open", "allocated": {"cpu": "1"}}), now=0)
    assert c.plan(KEY).patch["status"] == {"allocated": {"cpu": "1", "nvidia.com/gpu": None}}


@pytest.mark.parametrize(
    "body",
    [
        [],
        "x",
        None,
        {"status": "oops"},
        {"metadata": {"resourceVersion": "10"}, "status": []},
        {"metadata": [], "status": {}},
        {"metadata": {"name": "another", "resourceVersion": "10"}, "status": {}},
    ],
)
def test_a_body_not_shaped_as_the_queue_is_forwarded_for_the_server_to_refuse(c, body):
    """Read as an empty status, it would delete every owned field and answer 200, or own
    every field of its base (another writer's)."""
    c.absorb(put(10, {"state": "Open", "pending": 2, "allocated": {"cpu": "1"}}), now=0)
    for kind in ("put", "apply"):
        with pytest.raises(Passthrough):
            c.absorb(StatusWrite(KEY, kind, body), now=0.1)
    assert c.plan(KEY).patch["status"] == {"pending": 2}


def test_merge_patch_is_intent_as_it_is_and_owns_its_fields(c):
    c.absorb(
        StatusWrite(KEY, "merge", {"status": {"allocated": {"memory": "1Gi"}, "pending": None}}),
        now=0,
    )
    assert c.plan(KEY).patch["status"] == {
        "allocated": {"cpu": "1", "memory": "1Gi"},
        "pending": None,
    }


def test_a_merge_patch_of_a_null_status_removes_every_field_after_the_pending_ones(c):
    """Forwarded at once, it was overtaken by the older intent flushed after it."""
    c.absorb(StatusWrite(KEY, "merge", {"status": {"state": "Closed"}}), now=0)
    c.absorb(StatusWrite(KEY, "merge", {"status": None}), now=0.1)
    assert c.plan(KEY).patch["status"] == {"state": None, "pending": None, "allocated": None}


def test_json_patch_is_applied_to_the_base_first(c):
    c.absorb(
        StatusWrite(KEY, "json", [{"op": "replace", "path": "/status/pending", "value": 3}]), now=0
    )
    assert c.plan(KEY).patch["status"] == {"pending": 3}


def test_json_patch_that_does_not_apply_is_a_bad_write(c):
    with pytest.raises(BadWrite):
        c.absorb(StatusWrite(KEY, "json", [{"op": "remove", "path": "/status/nope"}]), now=0)


def test_json_patch_that_replaces_the_whole_object_with_null_is_a_bad_write(c):
    # Found by the fuzz test below: the patched document was no longer an object.
    with pytest.raises(BadWrite, match="non-object"):
        c.absorb(StatusWrite(KEY, "json", [{"op": "add", "path": "", "value": None}]), now=0)


def test_server_side_apply_newest_per_manager_wins_and_dropped_fields_are_removed(c):
    def apply(status):
        return StatusWrite(KEY, "apply", {"status": status}, "controller")

    c.observe(KEY, queue(11, {"state": "Open", "pending": 1, "running": 1}))
    c.absorb(apply({"pending": 4, "running": 2}), now=0)
    c.absorb(apply({"pending": 5}), now=0)
    assert c.plan(KEY).patch["status"] == {"pending": 5, "running": None}


def test_a_window_collects_writes_and_flushes_at_its_end_then_one_per_interval(c):
    c.absorb(put(10, {"state": "Open", "pending": 1, "allocated": {"cpu": "2"}}), now=0)
    assert c.due(0.5) == []
    assert c.due(1.0) == [KEY]
    plan = c.plan(KEY)
    c.complete(plan, 200, server_after(c, 11, plan), now=1.0)
    c.absorb(put(11, {"state": "Open", "pending": 1, "allocated": {"cpu": "3"}}), now=1.5)
    assert c.due(2.0) == []
    assert c.next_due_at() == pytest.approx(2.5)
    assert c.due(2.5) == [KEY]


def test_writes_during_a_flight_are_kept_for_the_next_flush(c):
    c.absorb(put(10, {"state": "Open", "pending": 1, "allocated": {"cpu": "2"}}), now=0)
    plan = c.plan(KEY)
    c.absorb(put(10, {"state": "Open", "pending": 1, "allocated": {"cpu": "5"}}), now=0.05)
    assert c.due(0.05) == []  # one flight at a time per object
    c.complete(
        plan,
        200,
        server_after(c, 11, plan)
        | {"status": {"state": "Open", "pending": 1, "allocated": {"cpu": "2"}}},
        now=0.1,
    )
    assert c.pending_count == 1
    assert c.plan(KEY).patch["status"] == {"allocated": {"cpu": "5"}}


@pytest.mark.parametrize("code", [404, 409])
def test_uid_precondition_failure_or_404_drops_the_pending_state(c, code):
    c.absorb(put(10, {"state": "Open", "pending": 1, "allocated": {"cpu": "2"}}), now=0, waiter="w")
    plan = c.plan(KEY)
    settled = c.complete(plan, code, None, now=0.1)
    assert settled.outcome == "stale" and settled.waiters == ("w",)
    assert c.pending_count == 0 and c.counters.stale_dropped == 1


def test_write_for_a_new_incarnation_drops_the_old_intent(c):
    c.absorb(put(10, {"state": "Open", "pending": 1, "allocated": {"cpu": "2"}}), now=0)
    c.observe(KEY, queue(20, {"state": "Open"}, uid="uid-2"))
    c.absorb(
        StatusWrite(KEY, "merge", {"metadata": {"uid": "uid-2"}, "status": {"pending": 9}}), now=0.1
    )
    plan = c.plan(KEY)
    assert plan.uid == "uid-2"
    assert plan.patch["status"] == {"pending": 9}
    assert c.counters.stale_dropped == 1


def test_the_old_incarnations_sync_writers_are_answered_409_when_a_new_one_is_written(c):
    c.absorb(put(10, {"state": "Open", "pending": 1, "allocated": {"cpu": "2"}}), now=0, waiter="w")
    c.observe(KEY, queue(20, {"state": "Open"}, uid="uid-2"))
    new = StatusWrite(KEY, "merge", {"metadata": {"uid": "uid-2"}, "status": {"pending": 9}})
    superseded = c.absorb(new, now=0.1).superseded
    assert superseded is not None and superseded.waiters == ("w",)
    assert superseded.code == 409 and superseded.obj["reason"] == "Conflict"


def test_a_new_incarnations_write_while_the_old_ones_flush_is_in_flight_goes_to_the_server(c):
    """One flight a key: the new write is not held behind, or beside, the old one's."""
    c.absorb(put(10, {"state": "Open", "pending": 1, "allocated": {"cpu": "2"}}), now=0, waiter="w")
    plan = c.plan(KEY)
    c.observe(KEY, queue(20, {"state": "Open"}, uid="uid-2"))
    new = StatusWrite(KEY, "merge", {"metadata": {"uid": "uid-2"}, "status": {"pending": 9}})
    with pytest.raises(Passthrough):
        c.absorb(new, now=0.1)
    settled = c.complete(plan, 200, queue(11, {"state": "Open", "pending": 1}), now=0.2)
    assert settled.waiters == ("w",) and c.pending_count == 0
    assert c.view(KEY, {})["metadata"]["uid"] == "uid-2"  # the late answer is the old one's


@pytest.mark.parametrize("code", [0, 429, 500, 503])
def test_retryable_answers_back_off_and_keep_the_newest_intent(c, code):
    c.absorb(
        put(10, {"state": "Open", "pending": 1, "allocated": {"cpu": "2"}}), now=0, waiter="w1"
    )
    plan = c.plan(KEY)
    c.absorb(
        put(10, {"state": "Open", "pending": 1, "allocated": {"cpu": "4"}}), now=0.01, waiter="w2"
    )
    settled = c.complete(plan, code, None, now=0.1, retry_after=3 if code == 429 else None)
    assert settled.outcome == "retry" and settled.waiters == ()
    next_at = c.next_due_at()
    assert next_at >= 0.1 + (3 if code == 429 else 1.0)
    retry = c.plan(KEY)
    assert retry.patch["status"] == {"allocated": {"cpu": "4"}}  # newest, never the older 2
    assert set(retry.waiters) == {"w1", "w2"}


def test_backoff_grows_exponentially_with_jitter_and_is_capped(c):
    delays = [c.backoff(n) for n in range(1, 12)]
    assert 1.0 <= delays[0] <= 2.0
    assert 4.0 <= delays[2] <= 8.0
    assert all(d <= 30.0 for d in delays)


def test_backoff_draws_from_the_upper_half_of_its_ceiling_as_documented(c):
    for attempts in range(1, 10):
        ceiling = min(1.0 * 2**attempts, 30.0)
        for _ in range(50):
            assert ceiling / 2 <= c.backoff(attempts) <= ceiling


def test_a_write_that_lands_makes_every_backed_off_write_due_at_once():
    """After a long outage each object's backoff nears 30 s; the first write that lands (a
    probe) says the upstream is back, and every other backed-off write goes now."""
    c = Coalescer(flush_interval=1.0, max_pending=100)
    keys = [ObjectKey(KEY.resource, "", f"q{n}") for n in range(3)]
    for key in keys:
        c.observe(
            key,
            {**queue(10, {}), "metadata": {"name": key.name, "uid": "u", "resourceVersion": "10"}},
        )
        c.absorb(StatusWrite(key, "merge", {"status": {"pending": 1}}), now=0)
    now = 0.0
    for _ in range(8):  # an outage: every attempt fails
        for key in keys:
            c.complete(c.plan(key), 503, None, now)
        now += 40.0
    assert c.backing_off() == keys
    assert c.next_due_at() > now - 40.0 + 10.0  # far in the future
    probe = c.plan(keys[0])
    c.complete(
        probe,
        200,
        {
            **queue(11, {"pending": 1}),
            "metadata": {"name": "q0", "uid": "u", "resourceVersion": "11"},
        },
        now,
    )
    assert c.backing_off() == []
    assert c.due(now) == keys[1:]


def test_backpressure_beyond_max_pending_objects():
    c = Coalescer(flush_interval=1.0, max_pending=2)
    for name in ("a", "b", "c"):
        key = ObjectKey("g/v/queues", "", name)
        c.observe(
            key, queue(1, {}) | {"metadata": {"name": name, "uid": name, "resourceVersion": "1"}}
        )
        write = StatusWrite(key, "merge", {"status": {"pending": 1}})
        if name == "c":
            with pytest.raises(Backpressure):
                c.absorb(write, now=0)
        else:
            c.absorb(write, now=0)
    # An object already pending still takes writes.
    c.absorb(StatusWrite(ObjectKey("g/v/queues", "", "a"), "merge", {"status": {"x": 1}}), now=0)


def test_an_apply_refused_with_429_takes_nothing_so_its_retry_still_removes_fields():
    """The refused apply once recorded its fields as the manager's newest: the retry then
    found nothing to remove, and `allocated` stayed."""
    c = Coalescer(flush_interval=1.0, max_pending=1)
    c.observe(KEY, queue(11, {"state": "Open", "allocated": {"cpu": "1"}}))

    def apply(status):
        return StatusWrite(KEY, "apply", {"status": status}, "controller")

    c.absorb(apply({"state": "Open", "allocated": {"cpu": "1"}}), now=0)
    flush(c, server=queue(12, {"state": "Open", "allocated": {"cpu": "1"}}))
    other = ObjectKey(KEY.resource, "", "other")
    c.observe(
        other, queue(13, {}) | {"metadata": {"name": "other", "uid": "o", "resourceVersion": "13"}}
    )
    c.absorb(StatusWrite(other, "merge", {"status": {"pending": 1}}), now=0)
    with pytest.raises(Backpressure):
        c.absorb(apply({"state": "Open"}), now=0)
    c.complete(c.plan(other), 200, None, now=1)  # room again
    c.absorb(apply({"state": "Open"}), now=1)
    assert c.plan(KEY).patch["status"] == {"allocated": None}


def test_absorbed_answer_is_the_object_as_the_server_will_hold_it(c):
    answer = c.absorb(put(10, {"state": "Open", "pending": 1, "allocated": {"cpu": "2"}}), now=0)
    assert answer.obj["metadata"]["resourceVersion"] == "10"
    assert answer.obj["status"] == {"state": "Open", "pending": 1, "allocated": {"cpu": "2"}}


def test_view_applies_deletions(c):
    c.absorb(StatusWrite(KEY, "merge", {"status": {"pending": None}}), now=0)
    assert "pending" not in c.view(KEY, {})["status"]
    assert DELETE is not None


def _json_strategy():
    from hypothesis import strategies as st

    return st.recursive(
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=False)
        | st.text(max_size=6),
        lambda children: (
            st.lists(children, max_size=3)
            | st.dictionaries(st.text(max_size=6), children, max_size=3)
        ),
        max_leaves=12,
    )


def test_arbitrary_status_writes_are_absorbed_passed_through_or_refused_never_crash():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    values = _json_strategy()
    metadata = st.fixed_dictionaries(
        {},
        optional={
            "uid": st.sampled_from(["uid-1", "uid-2", ""]) | values,
            "resourceVersion": st.sampled_from(["10", "11", "x"]) | values,
        },
    )
    bodies = values | st.fixed_dictionaries(
        {}, optional={"metadata": metadata | values, "status": values}
    )

    @settings(max_examples=300, deadline=None)
    @given(
        kind=st.sampled_from(["put", "merge", "json", "apply"]),
        body=bodies,
        patch=st.lists(
            st.fixed_dictionaries(
                {
                    "op": st.sampled_from(["add", "remove", "replace", "test", "move", "copy"]),
                    "path": st.sampled_from(["/status", "/status/a", "/status/a/b", "", "/x"]),
                },
                optional={"value": values, "from": st.sampled_from(["/status", "/spec"])},
            ),
            max_size=3,
        ),
    )
    def check(kind, body, patch):
        c = Coalescer(flush_interval=1.0, max_pending=10)
        c.observe(KEY, queue(10, {"state": "Open", "a": {"b": 1}}))
        write = StatusWrite(KEY, kind, patch if kind == "json" else body, "manager")
        try:
            c.absorb(write, now=0, waiter="w")
        except (Passthrough, Backpressure, BadWrite):
            return
        if c.pending_count:
            plan = c.plan(KEY)
            if isinstance(plan, FlushPlan):
                c.complete(plan, 200, queue(11, {"state": "Open"}), now=1)

    check()


def test_a_json_patch_past_kube_apiservers_bounds_is_refused_as_it_would_refuse_it(c):
    doubling = [
        {"op": "add", "path": "/status/x", "value": ["y" * 100]},
        *({"op": "copy", "from": "/status/x", "path": "/status/x/-"} for _ in range(60)),
    ]
    with pytest.raises(BadWrite) as refused:
        c.absorb(StatusWrite(KEY, "json", doubling), now=0)
    assert refused.value.code == 422 and "3,145,728 bytes" in str(refused.value)
    many = [{"op": "test", "path": "/kind", "value": "Queue"}] * 10_001
    with pytest.raises(BadWrite) as refused:
        c.absorb(StatusWrite(KEY, "json", many), now=0)
    assert refused.value.code == 413
    assert c.pending_count == 0


@pytest.mark.parametrize("name", ["a?b", "a#b", "a b", "a%2Fb"])
def test_a_flush_goes_to_the_object_it_was_written_for_whatever_its_name(name):
    """Names come decoded from the client's URL; the flush's URL encodes them again, or `a?b`
    would be queue a's main resource with a query."""
    path = object_path(ObjectKey(KEY.resource, "", name), "status")
    url = URL("https://api" + path)
    assert url.path == f"/apis/scheduling.volcano.sh/v1beta1/queues/{name}/status"
    assert not url.query_string


@pytest.mark.parametrize("name", [".", ".."])
def test_a_dot_name_is_not_coalesced_but_left_to_the_server(name):
    path = f"/apis/scheduling.volcano.sh/v1beta1/queues/{name}/status"
    assert classify(path, False, frozenset({KEY.resource})) is None


def test_a_deleted_queue_leaves_nothing_behind(c):
    c.absorb(StatusWrite(KEY, "apply", {"status": {"pending": 3}}, "controller"), now=0)
    flush(c, server=queue(11, {"state": "Open", "pending": 3}))
    c.forget(KEY)
    assert (c._known, c._last_flush, c._applied, c._pending) == ({}, {}, {}, {})
