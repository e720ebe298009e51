"""The queues and queueResources policies: Volcano's own queue webhook cases, cycles and loops
over a hostile cache, the decision's messages, and the in-server check deciding as the
webhook does."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.upstream import upstream_file
from tests.webhook.queue_cases import CASES, CASES_1_13, OUT_OF_SCOPE, Case, queue, res
from volcano_guard.base.informer import Snapshot, static_snapshot
from volcano_guard.webhook.admission_policies import admission_policies
from volcano_guard.webhook.config import Config, config_from_dict
from volcano_guard.webhook.evaluation import Evaluation, evaluate
from volcano_guard.webhook.policies.base import PolicyContext
from volcano_guard.webhook.policies.queues import QUEUES, queue_record
from volcano_guard.webhook.review import (
    AdmissionRequest,
    GroupVersionKind,
    GroupVersionResource,
    UserInfo,
)
from volcano_guard_sandbox.apiserver import policies as plugin
from volcano_guard_sandbox.apiserver.admission import Record
from volcano_guard_sandbox.apiserver.matching import Attributes, User
from volcano_guard_sandbox.apiserver.store import ApiError

DEFAULT = config_from_dict({})
WITH_POLICIES = config_from_dict({"validatingAdmissionPolicies": True})
TESTS = "pkg/webhooks/admission/queues/validate/validate_queue_test.go"
VERSIONS = ("v1.13.3", "v1.15.1", "ed72c7c815a9fd547a787134676f73d42e9d049c")


def request_for(obj: dict[str, Any], old: dict[str, Any] | None = None) -> AdmissionRequest:
    return AdmissionRequest(
        uid="u",
        kind=GroupVersionKind("scheduling.volcano.sh", "v1beta1", "Queue"),
        resource=GroupVersionResource("scheduling.volcano.sh", "v1beta1", "queues"),
        operation="UPDATE" if old is not None else "CREATE",
        name=str(obj.get("metadata", {}).get("name", "")),
        user=UserInfo("admin", ()),
        object=obj,
        old_object=old,
    )


def judged(
    obj: dict[str, Any],
    cache: tuple[dict[str, Any], ...] | Snapshot[Any] = (),
    old: dict[str, Any] | None = None,
    config: Config = DEFAULT,
) -> Evaluation:
    snapshot = (
        cache
        if isinstance(cache, Snapshot)
        else static_snapshot({q["metadata"]["name"]: queue_record(q) for q in cache})
    )
    return evaluate("validate", request_for(obj, old), PolicyContext(config, {QUEUES: snapshot}))


def refusals(evaluation: Evaluation) -> dict[str, tuple[str, ...]]:
    return {r.policy: r.verdict.violations for r in evaluation.results if r.verdict.violations}


# -- Volcano's own cases -------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted({**CASES, **CASES_1_13}))
def test_volcanos_queue_webhook_cases_get_volcanos_answer(name):
    case: Case = {**CASES, **CASES_1_13}[name]
    evaluation = judged(case.obj, case.cache, case.old)
    assert evaluation.decision.allowed == case.allowed, refusals(evaluation)
    if not case.allowed:
        assert case.policy in refusals(evaluation), refusals(evaluation)


def upstream_case_names(source: str) -> set[str]:
    """The names of the table cases in a Volcano queue webhook test file (not the queues')."""
    cases = re.findall(r'^\s*Name:\s+"([^"]+)",\n\s*AR:', source, re.M)
    return {*cases, *re.findall(r'^\s*name:\s+"([^"]+)",', source, re.M)}


@pytest.mark.parametrize("version", VERSIONS)
def test_every_upstream_queue_webhook_case_is_transcribed_or_said_out_of_scope(version):
    names = upstream_case_names(upstream_file("volcano", version, TESTS))
    assert len(names) > 20  # the file was read as a table
    known = {*CASES, *CASES_1_13, *OUT_OF_SCOPE}
    assert sorted(names - known) == []


# -- cycles, loops and the cache -----------------------------------------------------------------

CHAIN = (queue("a", "root"), queue("b", "a"), queue("c", "b"))


def test_a_queue_reparented_onto_its_descendant_is_refused_naming_the_cycle():
    evaluation = judged(queue("a", "c"), CHAIN, old=CHAIN[0])
    assert not evaluation.decision.allowed
    assert refusals(evaluation)["queues"] == (
        'Queue "a": parent "c" makes a cycle ("a" -> "c" -> "b" -> "a"): a queue cannot be its '
        "own ancestor; Volcano's admission and scheduler loop on it",
    )


def test_a_queue_under_a_chain_that_loops_above_it_is_refused():
    looped = (queue("x", "y"), queue("y", "x"))
    (message,) = refusals(judged(queue("z", "x"), looped))["queues"]
    assert message.startswith('Queue "z": its parent chain loops ("z" -> "x" -> "y" -> "x")')


def test_an_update_that_keeps_its_parent_is_not_refused_for_a_loop_it_did_not_make():
    looped = (queue("x", "y", res("2")), queue("y", "x"))
    assert judged(queue("x", "y", res("1")), looped, old=looped[0]).decision.allowed


def test_a_corrupted_cache_of_one_long_loop_is_walked_once_in_bounded_time():
    count = 20_000
    ring = tuple(queue(f"q{i}", f"q{(i + 1) % count}", res("1")) for i in range(count))
    started = time.perf_counter()
    refused = refusals(judged(queue("new", "q0", res("1")), ring))
    assert time.perf_counter() - started < 2.0
    assert refused["queues"][0].startswith('Queue "new": its parent chain loops')


def test_a_queue_naming_many_resources_under_queues_naming_many_costs_their_size():
    """60 resources under 60 queues naming 60 others: 1.6 s a decision when each queue's list
    was counted once a resource (tests/attack/test_queues_attack.py goes further)."""
    others = {f"example.com/o{i}": "1" for i in range(60)}
    chain = tuple(queue(f"q{i}", f"q{i - 1}" if i else "root", others) for i in range(60))
    mine = queue("new", "q59", {f"example.com/r{i}": "2" for i in range(60)})
    started = time.perf_counter()
    assert judged(mine, chain).decision.allowed
    assert time.perf_counter() - started < 0.3


def test_a_loop_through_thousands_of_long_names_is_named_by_its_ends_and_a_count():
    names = [f"{'x' * 240}{i:05d}" for i in range(2_000)]
    ring = tuple(queue(name, names[(i + 1) % 2_000]) for i, name in enumerate(names))
    (message,) = refusals(judged(queue("new", names[0]), ring))["queues"]
    assert len(message) < 2_500  # named in full: 500 KB
    assert f'("new" -> "{names[0]}" -> "{names[1]}" -> "{names[2]}" -> "{names[3]}" -> ' in message
    assert f'... 1,994 more ... -> "{names[1998]}" -> "{names[1999]}" -> "{names[0]}")' in message


def test_a_forged_quantity_or_resource_name_gives_refusals_of_bounded_length():
    """The CRD's quantity pattern has no length bound and resource names are map keys: what
    the messages quote is clipped, not echoed in full four times over."""
    long_quantity = "1" * 300_000
    long_name = "hugepages-" + "x" * 500_000
    forged = queue(
        "forged",
        capability={"cpu": long_quantity, long_name: "-1"},
        deserved={"cpu": long_quantity},
        guarantee={"cpu": long_quantity},
    )
    found = refusals(judged(forged))
    messages = [message for one in found.values() for message in one]
    assert messages and all(len(message) < 4_200 for message in messages)
    assert any("more characters)" in message for message in messages)


@pytest.mark.parametrize("parent", ["team", "nowhere"])
def test_the_root_queue_given_a_parent_is_refused_as_a_cycle(parent):
    """team has no parent (Volcano counts it the root's child): root -> team -> root, which
    the chain walk missed, as it missed a parent not yet created."""
    cache = (queue("root"), queue("team"))
    (message,) = refusals(judged(queue("root", parent), cache, old=queue("root")))["queues"]
    assert message == (
        f'Queue "root": the root queue cannot have a parent ("{parent}"): every queue\'s parent '
        "chain ends at the root, so any parent makes a cycle; remove spec.parent"
    )
    assert judged(queue("root", "root"), cache, old=queue("root")).decision.allowed


def test_a_missing_parent_is_refused_naming_it():
    assert refusals(judged(queue("a", "nowhere")))["queues"] == (
        'Queue "a": parent queue "nowhere" does not exist; create it first (if it was just '
        "created, retry)",
    )


def test_before_the_cache_syncs_failclosed_decides():
    unsynced = Snapshot({}, synced=False)
    assert not judged(queue("a", "root"), unsynced).decision.allowed
    opened = config_from_dict({"failClosed": False})
    assert judged(queue("a", "root"), unsynced, config=opened).decision.allowed


def test_an_update_of_neither_parent_nor_resources_is_not_judged_against_the_hierarchy():
    parent = queue("p", "root", res("1"))
    child = queue("c", "p", res("5"))  # over its parent: existing, reported by the audit
    relabelled = {**child, "metadata": {"name": "c", "labels": {"team": "a"}}}
    assert judged(relabelled, (parent, child), old=child).decision.allowed
    assert not judged(queue("c", "p", res("6")), (parent, child), old=child).decision.allowed


def test_volcanos_controller_setting_parent_root_on_a_top_queue_is_not_judged_again():
    top = queue("team", "", res("1"))
    child = queue("greedy", "team", res("8"))  # existing: reported by the audit
    assert judged(queue("team", "root", res("1")), (top, child), old=top).decision.allowed


def test_the_root_queue_is_not_judged_against_its_children():
    assert judged(queue("root", "", res("1")), (queue("a", "root", res("8")),)).decision.allowed


# -- messages ------------------------------------------------------------------------------------


def test_a_child_over_its_parents_capability_names_both_queues_the_resource_and_quantities():
    parent = queue("team", "root", res("10", "20Gi"))
    (cpu, memory) = refusals(judged(queue("child", "team", res("20", "40Gi")), (parent,)))["queues"]
    assert cpu == (
        'Queue "child": capability cpu 20 is more than the capability cpu 10 of its ancestor '
        'queue "team"; a child queue cannot have more capability than its ancestors'
    )
    assert "capability memory 40Gi is more than the capability memory 20Gi" in memory


def test_guarantees_past_the_parents_name_the_sum_and_the_parents_guarantee():
    parent = queue("team", "root", None, res("8"), res("8"))
    sibling = queue("one", "team", None, res("2500m"), res("2500m"))
    refused = refusals(judged(queue("two", "team", None, res("6"), res("6")), (parent, sibling)))
    assert refused["queues"][0] == (
        'Queue "two": with it, the child queues of parent queue "team" have a guarantee of cpu '
        "summing to 8500m, more than the parent's guarantee cpu 8; a parent queue's guarantee "
        "must cover its children's"
    )


@pytest.mark.parametrize("amount", ["1e33", "1e39", "123456789012345678901234567890123Ki", "1e999"])
def test_a_huge_quantity_is_shown_in_the_message_never_an_exception(amount):
    parent = queue("team", "root", res("1", "1Gi"), res("1", "1Gi"), res("1", "1Gi"))
    child = queue("big", "team", res(amount, amount), res(amount, amount), res(amount, amount))
    (cpu, memory, *_) = refusals(judged(child, (parent,)))["queues"]
    assert "capability cpu " in cpu and "capability memory " in memory


def test_out_of_order_resources_name_both_quantities():
    refused = refusals(judged(queue("q", "", res("4", "4Gi"), res("8", "2Gi"), res("1", "3Gi"))))
    assert refused["queueResources"] == (
        'Queue "q": deserved cpu 8 is more than capability cpu 4; Volcano needs guarantee <= '
        "deserved <= capability for each resource",
        'Queue "q": guarantee memory 3Gi is more than deserved memory 2Gi; Volcano needs '
        "guarantee <= deserved <= capability for each resource",
    )


def test_the_hierarchy_annotations_of_old_releases_are_never_judged():
    annotated = queue("q")
    annotated["metadata"]["annotations"] = {
        "volcano.sh/hierarchy": "root/q/q",
        "volcano.sh/hierarchy-weights": "1/x",
    }
    assert judged(annotated, (annotated,)).decision.allowed


# -- the in-server check -------------------------------------------------------------------------


def in_server(
    obj: dict[str, Any], old: dict[str, Any] | None = None, config: Config = WITH_POLICIES
) -> tuple[bool, str]:
    """(allowed, message) from the sandbox's admission-policy plugin running queue-resources
    on obj's CREATE, or its UPDATE from old."""
    objects = [o for o in admission_policies(config) if "queue" in o["metadata"]["name"]]
    attributes = Attributes(
        operation="CREATE" if old is None else "UPDATE",
        group="scheduling.volcano.sh",
        version="v1beta1",
        resource="queues",
        subresource="",
        kind=("scheduling.volcano.sh", "v1beta1", "Queue"),
        namespace="",
        name=obj["metadata"]["name"],
        user=User("admin", "", ()),
        object=obj,
        old_object=old,
    )
    try:
        plugin.dispatch(
            attributes,
            [o for o in objects if o["kind"].endswith("Policy")],
            [o for o in objects if o["kind"].endswith("Binding")],
            lambda *_: None,
            None,
            Record(),
        )
    except ApiError as exc:
        return False, exc.message.split("denied request: ", 1)[1]
    return True, ""


QUANTITY = st.sampled_from(
    ["1", "2", "500m", "1Gi", "3Gi", "-1", "0", 2, 0, "x1", "1e3", "1e33", "1e999", "-1e40"]
)
RESOURCE = st.sampled_from(["cpu", "memory", "nvidia.com/gpu"])
LIST = st.none() | st.dictionaries(RESOURCE, QUANTITY, max_size=3)


@st.composite
def lone_queues(draw: Any) -> dict[str, Any]:
    return queue("q", "", draw(LIST), draw(LIST), draw(LIST))


def differential(obj: dict[str, Any], old: dict[str, Any] | None = None) -> None:
    """The webhook's queueResources refuses obj (created, or updated from old) when the
    in-server check does, the latter with one of the former's messages."""
    reasons = refusals(judged(obj, old=old)).get("queueResources", ())
    allowed, message = in_server(obj, old)
    assert allowed == (not reasons), (obj, reasons, message)
    if not allowed:
        assert message in reasons, (message, reasons)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(obj=lone_queues(), old=st.none() | lone_queues())
def test_generated_queues_get_the_same_verdict_and_reason_in_the_server(obj, old):
    differential(obj, old)


def test_an_update_leaving_the_resources_passes_both_one_writing_them_is_judged_by_both():
    """A Queue out of order from before stays writable (labels, Volcano's controller setting
    its parent) until its resources are written."""
    backwards = queue("q", "", res("1"), res("2"))
    labelled = {**backwards, "metadata": {"name": "q", "labels": {"team": "a"}}}
    assert judged(labelled, old=backwards).decision.allowed and in_server(labelled, backwards)[0]
    rewritten = queue("q", "", res("1"), res("3"))
    assert not judged(rewritten, old=backwards).decision.allowed
    assert not in_server(rewritten, backwards)[0]


@pytest.mark.parametrize("name", sorted(n for n, c in CASES.items() if c.policy != "queues"))
def test_volcanos_cases_on_one_queue_get_the_same_verdict_in_the_server(name):
    differential(CASES[name].obj)


# -- hostile input -------------------------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=12,
)
NAMES = st.sampled_from(["a", "b", "c", "root", ""])


@st.composite
def hostile_queues(draw: Any) -> dict[str, Any]:
    spec = draw(
        st.dictionaries(st.sampled_from(["parent", "capability", "guarantee"]), JSON, max_size=3)
    )
    if draw(st.booleans()):
        spec["parent"] = draw(NAMES)
    if draw(st.booleans()):
        spec["deserved"] = draw(st.dictionaries(RESOURCE, QUANTITY | JSON, max_size=3))
    return {"metadata": {"name": draw(NAMES | JSON)}, "spec": draw(st.just(spec) | JSON)}


def answered(obj: dict[str, Any], cache: list[Any], old: dict[str, Any] | None) -> None:
    snapshot = static_snapshot({str(i): queue_record(q) for i, q in enumerate(cache)})
    evaluation = judged(obj, snapshot, old)
    assert evaluation.decision.allowed in (True, False)


HOSTILE = {
    "obj": hostile_queues(),
    "cache": st.lists(hostile_queues(), max_size=5),
    "old": st.none() | hostile_queues(),
}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**HOSTILE)
def test_any_queue_among_any_cache_gets_an_answer_never_an_exception(obj, cache, old):
    answered(obj, cache, old)


@pytest.mark.slow
@settings(max_examples=1_000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**HOSTILE)
def test_many_queues_among_many_caches_get_an_answer_never_an_exception(obj, cache, old):
    answered(obj, cache, old)
