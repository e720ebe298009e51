"""The advisory table pinned to Volcano's source at the release tags: each row's affected and
fixed releases hold because the code that makes them true is (or is no longer) there. File reads
and regular expressions only."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.upstream import go_function, volcano_file
from volcano_guard.base.advisories import (
    ADMISSION,
    ADVISORIES,
    CONTROLLER,
    QUEUE_GUARANTEES_FINDING,
    QUEUE_STATUS_WRITERS,
    UPGRADE,
    Advisory,
    Version,
    advisories_for,
    image_version,
    parse_version,
    release,
    status_writers,
)
from volcano_guard.base.volcano import SCHEDULER

TAGS = [
    "v1.9.0",
    "v1.10.0",
    "v1.11.0",
    "v1.11.1",
    "v1.12.0",
    "v1.12.1",
    "v1.13.3",
    "v1.14.4",
    "v1.15.1",
]
LATEST = "v1.15.1"  # master (VOLCANO_COMMIT) is judged as the latest release
CACHE = "pkg/scheduler/cache/cache.go"
QUEUE_CONTROLLER = "pkg/controllers/queue/queue_controller_action.go"
PG_HANDLER = "pkg/controllers/podgroup/pg_controller_handler.go"
QUEUE_WEBHOOK = "pkg/webhooks/admission/queues/validate/validate_queue.go"


def row(key: str) -> Advisory:
    return next(a for a in ADVISORIES if a.key == key)


def affected(key: str, component: str) -> list[str]:
    """The tags the row says are affected for the component."""
    return [tag for tag in TAGS if row(key).affects(component, release(tag))]


def source(path: str, tag: str) -> str:
    return volcano_file(path, None if tag == "master" else tag)


def scheduler_writer(tag: str) -> str:
    """How the scheduler cache's UpdateQueueStatus writes: PUT or apply."""
    body = go_function(source(CACHE, tag), "(su *defaultStatusUpdater) UpdateQueueStatus")
    return _writer(body)


def controller_writer(tag: str) -> str:
    """How the queue controller writes status: PUT, apply of state and allocated, of state."""
    text = source(QUEUE_CONTROLLER, tag)
    writer = _writer(text)
    if writer == "apply":
        applied = re.findall(r"v1beta1apply\.QueueStatus\(\)[^\n]*", text)
        assert applied
        return (
            "apply state+allocated" if any("WithAllocated" in a for a in applied) else "apply state"
        )
    return writer


def _writer(text: str) -> str:
    puts = "Queues().UpdateStatus(" in text
    applies = "Queues().ApplyStatus(" in text
    assert puts != applies, "one way of writing Queue status"
    assert not re.search(r"Force:\s*(true|&)", text)  # no release forces its applies
    return "PUT" if puts else "apply"


# --- version parsing ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("image", "version"),
    [
        ("volcanosh/vc-scheduler:v1.10.0", "v1.10.0"),
        ("docker.io/volcanosh/vc-scheduler:1.10.0", "v1.10.0"),
        ("registry:5000/volcanosh/vc-scheduler:v1.11.0-rc.1", "v1.11.0-rc.1"),
        ("volcanosh/vc-scheduler:v1.12.1@sha256:" + "a" * 64, "v1.12.1"),
        ("volcanosh/vc-scheduler@sha256:" + "a" * 64, None),
        ("volcanosh/vc-scheduler:latest", None),
        ("volcanosh/vc-scheduler", None),
        ("registry:5000/volcanosh/vc-scheduler", None),  # a registry port is not a tag
        ("volcanosh/vc-scheduler:v1.10", None),
        ("volcanosh/vc-scheduler:v01.10.0", None),
        (None, None),
    ],
)
def test_an_image_tag_names_a_release_or_the_version_is_unknown(image, version):
    found = image_version(image)
    assert (str(found) if found else None) == version


@pytest.mark.parametrize(
    ("tag", "version"),
    [
        ("v99999999999999999999.0.0", "v99999999999999999999.0.0"),
        ("v1.0.0-" + "9" * 120, "v1.0.0-" + "9" * 120),
        ("v" + "1" * 5_000 + ".0.0", None),  # past int()'s 4,300 digits: was a ValueError
        ("v1.0.0-" + "1" * 5_000, None),
        ("v1.10.0" + "-x" * 100_000, None),
    ],
)
def test_an_absurd_tag_is_a_version_or_unknown_never_an_exception(tag, version):
    found = image_version(f"volcanosh/vc-scheduler:{tag}")
    assert (str(found) if found else None) == version


@settings(max_examples=150, deadline=None)
@given(st.text() | st.from_regex(r"v?[0-9]{1,30}\.[0-9]{1,30}\.[0-9]{1,30}(-[0-9a-z.-]{1,80})?"))
def test_any_tag_is_a_version_or_unknown_never_an_exception(tag):
    found = parse_version(tag)
    assert found is None or parse_version(str(found)) == found
    assert isinstance(image_version(f"volcanosh/vc-scheduler:{tag}"), Version | None)


def test_a_pre_release_sorts_before_its_release_and_after_the_one_before():
    rc1, rc2 = parse_version("v1.11.0-rc.1"), parse_version("v1.11.0-rc.2")
    assert rc1 is not None and rc2 is not None
    assert release("v1.10.9") < rc1 < rc2 < release("v1.11.0") < release("v1.11.1")
    assert release("v1.9.0") < release("v1.10.0")  # numerically, not as text


def test_matching_takes_the_component_and_the_range():
    storm = row("queue-status-storm")
    assert storm.affects(SCHEDULER, release("v1.10.0"))
    assert storm.affects(CONTROLLER, parse_version("v1.11.0-rc.1") or Version(0, 0, 0))
    assert not storm.affects(SCHEDULER, release("v1.11.0"))
    assert not storm.affects(ADMISSION, release("v1.10.0"))
    keys = [a.key for a in advisories_for(SCHEDULER, release("v1.10.0"))]
    assert keys == ["queue-status-storm", "negative-idle-asserts", "queue-guarantees-past-cluster"]


# --- the table's own consistency -------------------------------------------------------------


@pytest.mark.parametrize("advisory", ADVISORIES, ids=lambda a: a.key)
def test_a_row_is_fixed_where_its_range_ends_and_cites_a_fix_only_when_released(advisory):
    ends = {high for _, high in advisory.affected}
    if advisory.fixed_in is None:
        assert ends == {None} and advisory.prs == ()  # open: its issue only
    else:
        assert advisory.fixed_in in ends and None not in ends
        assert release(advisory.fixed_in) <= release(TAGS[-1])  # in a release we can read
    assert advisory.issues and len({a.key for a in ADVISORIES}) == len(ADVISORIES)


# --- Queue status writers, release by release --------------------------------------------------


@pytest.mark.parametrize("tag", [*TAGS, "master"])
def test_each_releases_queue_status_writers_are_the_tables(tag):
    writers = status_writers(release(LATEST if tag == "master" else tag))
    assert scheduler_writer(tag) == _said(writers.scheduler)
    assert controller_writer(tag) == _said(writers.controller)


def _said(text: str) -> str:
    """What the table's words say, in the terms of scheduler_writer and controller_writer."""
    if text.startswith("PUT"):
        return "PUT"
    if "state and allocated" in text:
        return "apply state+allocated"
    return "apply state" if "of state" in text else "apply"


def test_the_sidecar_is_needed_exactly_where_both_writers_put():
    needed = [tag for tag in TAGS if status_writers(release(tag)).sidecar_needed]
    assert needed == ["v1.9.0", "v1.10.0"] == affected("queue-status-storm", SCHEDULER)
    assert [w.since for w in QUEUE_STATUS_WRITERS][1:] == ["v1.11.0", "v1.11.1", "v1.12.1"]


def test_the_storm_v1_10_put_from_both_writers_and_v1_11_0_applies_from_the_controller():
    assert [(scheduler_writer(t), controller_writer(t)) for t in ("v1.9.0", "v1.10.0")] == [
        ("PUT", "PUT")
    ] * 2
    assert controller_writer("v1.11.0") == "apply state+allocated"
    assert "FieldManager: controllerName" in source(QUEUE_CONTROLLER, "v1.11.0")


def test_the_controllers_apply_of_allocated_is_v1_11_0s_alone():
    """#4141: the controller applied allocated, which the scheduler's PUT owned; v1.11.1 applies
    state alone."""
    assert affected("queue-status-apply-allocated", CONTROLLER) == ["v1.11.0"]
    assert [controller_writer(t) for t in ("v1.11.0", "v1.11.1")] == [
        "apply state+allocated",
        "apply state",
    ]
    assert scheduler_writer("v1.11.0") == "PUT"


def test_the_schedulers_unforced_apply_of_allocated_is_gone_in_v1_12_1():
    """#4139: the scheduler applied allocated without force in v1.12.0, and (the same code) in
    v1.11.1; v1.12.1 PUTs it again."""
    applying = [t for t in TAGS if scheduler_writer(t) == "apply"]
    assert applying == ["v1.11.1", "v1.12.0"] == affected("queue-status-apply-scheduler", SCHEDULER)
    assert row("queue-status-apply-scheduler").fixed_in == "v1.12.1"


# --- the scheduler's negative-resource panics -------------------------------------------------


@pytest.mark.parametrize("tag", [*TAGS, "master"])
def test_future_idle_no_longer_asserts_but_resource_sub_still_does(tag):
    node_info = go_function(
        source("pkg/scheduler/api/node_info.go", tag), "(ni *NodeInfo) FutureIdle"
    )
    assert "SubWithoutAssert(ni.Pipelined)" in node_info  # fixed from v1.9.0 on
    sub = go_function(source("pkg/scheduler/api/resource_info.go", tag), "(r *Resource) Sub")
    assert "assert.Assertf(rr.LessEqual(r, Zero)" in sub  # still there: the open row
    assert not row("negative-idle-future-idle").affects(SCHEDULER, release("v1.9.0"))
    assert row("negative-idle-asserts").affects(SCHEDULER, release(LATEST))


def test_the_ignored_devices_list_is_locked_from_v1_9_0():
    pool = source("pkg/scheduler/api/shared_device_pool.go", "v1.9.0")
    assert re.search(r"type ignoredDevicesList struct \{\n\tsync\.RWMutex", pool)
    assert affected("ignored-devices-race", SCHEDULER) == []  # < v1.9.0 only
    assert row("ignored-devices-race").cover == UPGRADE


# --- the stale PodGroup delete ----------------------------------------------------------------


@pytest.mark.parametrize("tag", [*TAGS, "master"])
def test_the_podgroup_controller_deletes_by_name_without_preconditions_in_every_release(tag):
    handler = source(PG_HANDLER, tag)
    owners = [("addReplicaSet", "rs")]
    if tag == "master" or release(tag) >= release("v1.12.0"):
        owners.append(("addStatefulSet", "sts"))
    else:
        assert "func (pg *pgcontroller) addStatefulSet(" not in handler
    for name, owner in owners:
        at_zero = go_function(handler, f"(pg *pgcontroller) {name}")
        assert f"if *{owner}.Spec.Replicas == 0 {{" in at_zero
        assert "Delete(context.TODO(), pgName, metav1.DeleteOptions{})" in at_zero
    assert row("stale-podgroup-delete").affects(CONTROLLER, release(LATEST))


# --- Queue shapes Volcano's webhook admits ----------------------------------------------------


def test_volcanos_queue_webhook_refuses_bad_hierarchies_and_order_from_v1_14():
    """The hierarchy checks came with v1.14.0 (#4864), the order checks with v1.14.2 (#4973,
    cherry-picked by #5080): the tags read are v1.13.3 and v1.14.4, git tells the two apart."""
    old, new = source(QUEUE_WEBHOOK, "v1.13.3"), source(QUEUE_WEBHOOK, "v1.14.4")
    assert "func validateHierarchicalQueueResources(" not in old
    assert "func validateHierarchicalQueueResources(" in new
    assert "sum of children's guarantee" in go_function(new, "validateSiblingsSum")
    assert "exceeds its ancestor's capability" in go_function(new, "validateChildAgainstAncestor")
    assert "must be >= guarantee" not in old and "must be >= guarantee" in new
    for key in ("queue-hierarchy-invalid", "queue-resources-order"):
        assert affected(key, ADMISSION)[-1] == "v1.13.3"
    assert row("queue-hierarchy-invalid").fixed_in == "v1.14.0"
    assert row("queue-resources-order").fixed_in == "v1.14.2"
    assert row("queue-resources-order").affects(ADMISSION, release("v1.14.1"))


# --- Queue guarantees past the cluster --------------------------------------------------------


@pytest.mark.parametrize("tag", TAGS)
def test_the_guarantees_are_subtracted_with_exceeded_part_from_v1_11_0(tag):
    """#3127: v1.9.0 and v1.10.0 subtracted the summed guarantees from the cluster's total with
    the asserting Resource.Sub; #3106 added ExceededPart (v1.11.0), which floors at zero. What
    still panics before v1.12.0 is in the plugins (proportion's remaining.Sub, #4261, fixed by
    #4273; capacity's hierarchy, #4179), which the frozen sources do not hold: the row's range
    is read from git (docs/decisions/audit.md)."""
    resources = source("pkg/scheduler/api/resource_info.go", tag)
    has_exceeded_part = "func ExceededPart(left, right *Resource) *Resource {" in resources
    assert has_exceeded_part == (release(tag) >= release("v1.11.0"))
    if has_exceeded_part:
        assert "assert" not in go_function(resources, "ExceededPart")
    panics = row("queue-guarantees-past-cluster")
    assert panics.affects(SCHEDULER, release(tag)) == (release(tag) < release("v1.12.0"))
    assert panics.cover == QUEUE_GUARANTEES_FINDING and panics.fixed_in == "v1.12.0"


def test_a_parents_children_past_its_real_capability_panic_only_v1_11s_hierarchy():
    children = row("queue-children-guarantee-panic")
    assert affected("queue-children-guarantee-panic", SCHEDULER) == ["v1.11.0", "v1.11.1"]
    assert children.prs == (4179,) and 4179 not in row("queue-hierarchy-invalid").issues
