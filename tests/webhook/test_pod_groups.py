"""PodGroup generation ids and the delete guard: pure rules, then the 1 -> 0 -> 1 race replayed
against the sandbox with real objects and the webhook over HTTPS."""

import asyncio
import base64
import copy
import json
import time
import uuid
from contextlib import asynccontextmanager

import aiohttp
import msgspec
import pytest
from aiohttp import web

from tests.conftest import HOSTNAME
from volcano_guard.base.informer import empty_snapshot, static_snapshot
from volcano_guard.base.jsonpatch import apply_patch
from volcano_guard.base.kubeconfig import Cluster
from volcano_guard.base.listen import Listen
from volcano_guard.base.tls import client_context, server_context
from volcano_guard.base.uuid7 import UUIDv7, new_uuid7, timestamp_ms
from volcano_guard.webhook.caches import Caches
from volcano_guard.webhook.config import config_from_dict
from volcano_guard.webhook.evaluation import evaluate
from volcano_guard.webhook.metrics import LIVE_LOOKUPS
from volcano_guard.webhook.policies.base import PolicyContext
from volcano_guard.webhook.policies.pod_groups import (
    GENERATION_ID,
    POD_GENERATION,
    PODGROUPS,
    UNFINISHED_PODS,
    PodGroupRecord,
    live_members,
    podgroup_record,
)
from volcano_guard.webhook.review import from_document
from volcano_guard.webhook.server import running
from volcano_guard_sandbox.apiserver.faults import FaultRule
from volcano_guard_sandbox.apiserver.resources import find
from volcano_guard_sandbox.apiserver.runner import SandboxThread
from volcano_guard_sandbox.apiserver.store import ApiError

PG = find("scheduling.volcano.sh", "v1beta1", "podgroups")
PODS = find("", "v1", "pods")
RS_UID = "5f1c-replicaset-uid"


# --- UUIDv7 ----------------------------------------------------------------------------------


def test_uuid7_ids_are_unique_and_sorted_by_creation():
    ids = [new_uuid7() for _ in range(10_000)]
    assert len(set(ids)) == 10_000
    assert ids == sorted(ids)
    assert [str(i) for i in ids] == sorted(str(i) for i in ids)  # as text too


def test_uuid7_layout_version_variant_and_timestamp():
    before = time.time_ns() // 1_000_000
    value = new_uuid7()
    assert value.version == 7
    assert value.variant == uuid.RFC_4122
    assert before <= timestamp_ms(value) <= time.time_ns() // 1_000_000


def test_uuid7_stays_monotonic_inside_one_millisecond_and_when_the_clock_steps_back():
    clock = iter([5_000_000, 5_000_000, 5_000_000, 4_000_000])
    make = UUIDv7(clock_ns=lambda: next(clock), random_bits=lambda bits: (1 << bits) - 5)
    ids = [make() for _ in range(4)]
    assert ids == sorted(ids) and len(set(ids)) == 4


# --- stamping --------------------------------------------------------------------------------


def podgroup(name="podgroup-rs", uid="pg-uid-1", annotations=None, owner=RS_UID):
    metadata = {
        "name": name,
        "namespace": "team-a",
        "uid": uid,
        "creationTimestamp": "2026-11-21T10:00:00Z",
    }
    if annotations is not None:
        metadata["annotations"] = annotations
    if owner:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": "rs",
                "uid": owner,
                "controller": True,
            }
        ]
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": metadata,
        "spec": {"minMember": 1},
    }


def pg_review(
    operation,
    obj=None,
    old=None,
    options=None,
    user="system:serviceaccount:volcano-system:volcano-controllers",
):
    request = {
        "uid": "r1",
        "operation": operation,
        "namespace": "team-a",
        "name": (obj or old)["metadata"]["name"],
        "kind": {"group": "scheduling.volcano.sh", "version": "v1beta1", "kind": "PodGroup"},
        "resource": {
            "group": "scheduling.volcano.sh",
            "version": "v1beta1",
            "resource": "podgroups",
        },
        "userInfo": {"username": user},
        "object": obj,
        "oldObject": old,
        "options": options,
    }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def context(pods=(), cached=None, fail_closed=True, **pod_groups):
    """The config, the cluster's PodGroups (default: podgroup()) as the cache holds them, and
    the pods a member lookup lists (None: the lookup failed)."""
    data = {"policies": {"podGroups": pod_groups}} if pod_groups else {}
    config = config_from_dict({**data, "failClosed": fail_closed})
    cached = [podgroup()] if cached is None else cached
    snapshots = {
        PODGROUPS: static_snapshot(
            {f"team-a/{pg['metadata']['name']}": podgroup_record(pg) for pg in cached}
        )
    }
    listed = {UNFINISHED_PODS: None if pods is None else tuple(pods)}
    return PolicyContext(config, snapshots, listed, new_generation_id=lambda: "0190-fixed-id")


@pytest.mark.parametrize("annotations", [None, {}, {"other": "x"}])
def test_create_is_stamped_whether_or_not_annotations_exist(annotations):
    obj = podgroup(annotations=annotations)
    result = evaluate("mutate", from_document(pg_review("CREATE", obj)), context())
    patched = apply_patch(obj, list(result.decision.patch))
    assert patched["metadata"]["annotations"][GENERATION_ID] == "0190-fixed-id"
    for key, value in (annotations or {}).items():
        assert patched["metadata"]["annotations"][key] == value


def test_an_id_a_client_supplies_on_create_is_replaced_with_a_warning():
    obj = podgroup(annotations={GENERATION_ID: "0180-an-old-incarnations"})
    decision = evaluate("mutate", from_document(pg_review("CREATE", obj)), context()).decision
    patched = apply_patch(obj, list(decision.patch))
    assert patched["metadata"]["annotations"][GENERATION_ID] == "0190-fixed-id"
    assert any(
        '"0180-an-old-incarnations" is replaced by 0190-fixed-id' in warning
        for warning in decision.warnings
    )


def test_a_break_glass_user_keeps_the_id_it_restores():
    obj = podgroup(annotations={GENERATION_ID: "keep-me"})
    request = from_document(pg_review("CREATE", obj, user="velero"))
    ctx = context(deleteGuard={"exemptUsers": ["velero"]})
    assert evaluate("mutate", request, ctx).decision.patch == ()


def test_an_update_that_drops_or_changes_the_id_gets_it_back():
    old = podgroup(annotations={GENERATION_ID: "first"})
    for new in (podgroup(annotations=None), podgroup(annotations={GENERATION_ID: "forged"})):
        result = evaluate("mutate", from_document(pg_review("UPDATE", new, old)), context())
        patched = apply_patch(new, list(result.decision.patch))
        assert patched["metadata"]["annotations"][GENERATION_ID] == "first"
    same = podgroup(annotations={GENERATION_ID: "first"})
    request = from_document(pg_review("UPDATE", same, old))
    assert evaluate("mutate", request, context()).decision.patch == ()


def test_an_update_is_not_given_back_an_old_id_that_is_not_a_string():
    # Annotations are strings; restoring a number would make the API server refuse the update.
    old = podgroup(annotations={GENERATION_ID: 7})
    result = evaluate(
        "mutate", from_document(pg_review("UPDATE", podgroup(annotations=None), old)), context()
    )
    assert result.decision.patch == ()


def test_stamping_can_be_turned_off():
    result = evaluate(
        "mutate", from_document(pg_review("CREATE", podgroup())), context(stampGenerationId=False)
    )
    assert result.decision.patch == ()


# --- members and the delete guard ------------------------------------------------------------


def member(name, group=None, owner=None, phase="Running", terminating=False):
    metadata = {"name": name, "namespace": "team-a", "annotations": {}}
    if group:
        metadata["annotations"]["scheduling.k8s.io/group-name"] = group
    if owner:
        metadata["ownerReferences"] = [
            {"kind": "ReplicaSet", "name": "rs", "uid": owner, "controller": True}
        ]
    if terminating:
        metadata["deletionTimestamp"] = "2026-11-21T10:00:00Z"
    return {"metadata": metadata, "status": {"phase": phase}}


def test_live_members_by_annotation_or_shared_controller_not_finished_not_terminating():
    pods = [
        member("a", group="podgroup-rs"),
        member("b", owner=RS_UID),
        member("c", group="podgroup-rs", terminating=True),
        member("d", group="podgroup-rs", phase="Succeeded"),
        member("e", group="podgroup-rs", phase="Failed"),
        member("f", group="other"),
        member("g", owner="other-rs"),
    ]
    assert live_members("podgroup-rs", RS_UID, pods) == ["a", "b"]


def delete(pg, ctx, options=None, user=None):
    kwargs = {"user": user} if user else {}
    request = from_document(pg_review("DELETE", None, pg, options, **kwargs))
    return evaluate("validate", request, ctx)


def test_a_plain_delete_under_live_pods_is_denied_naming_generation_age_and_the_fix():
    pg = podgroup(annotations={GENERATION_ID: "0190-abc"})
    pods = [member(f"w{i}", group="podgroup-rs") for i in range(7)]
    decision = delete(pg, context(pods, cached=[pg])).decision
    assert not decision.allowed
    assert "generation 0190-abc" in decision.message
    assert "ago" in decision.message
    assert "still has live member pods" in decision.message
    assert 'preconditions.uid: "pg-uid-1"' in decision.message
    assert "w0" not in decision.message  # pods: only as the sender's own access shows them


def test_a_forged_review_for_a_podgroup_that_does_not_exist_lists_and_names_nothing():
    # oldObject without a name, for a PodGroup the cluster does not have: the guard once
    # answered with the namespace's pod names.
    forged = pg_review("DELETE", None, {"metadata": {"name": "anything"}}, user="mallory")
    forged["request"]["oldObject"] = {"metadata": {}}
    request = from_document(forged)
    ctx = context([member("secret-name-0", group="anything")])
    assert not UNFINISHED_PODS.wanted(request, ctx.snapshots)
    decision = evaluate("validate", request, ctx).decision
    assert "secret-name-0" not in json.dumps(msgspec.to_builtins(decision))


def test_a_review_whose_old_object_is_not_the_cached_podgroup_lists_and_tells_nothing():
    # A forged review names an existing PodGroup without its uid: the same answer as for one
    # that does not exist, no lookup, nothing of the cached PodGroup or its pods in it.
    live = [member("secret-pod", group="podgroup-rs", owner=RS_UID)]
    answers = []
    for cached in ([podgroup(annotations={GENERATION_ID: "secret-gen"})], []):
        ctx = context(live, cached=cached)
        forged = podgroup(uid="guessed-uid")
        request = from_document(pg_review("DELETE", None, forged, user="mallory"))
        assert not UNFINISHED_PODS.wanted(request, ctx.snapshots)
        answers.append(msgspec.to_builtins(evaluate("validate", request, ctx).decision))
    assert answers[0] == answers[1] and not answers[0]["allowed"]
    told = json.dumps(answers[0])
    assert all(secret not in told for secret in ("secret-pod", "secret-gen", "pg-uid-1", "5d"))


def test_a_review_newer_than_the_cache_follows_fail_closed():
    newer = podgroup(uid="pg-uid-2")
    live = [member("a", group="podgroup-rs")]
    denied = delete(newer, context(live)).decision
    assert not denied.allowed and "retry" in denied.message
    assert delete(newer, context(live, fail_closed=False)).decision.allowed


def _deep(depth):
    value = "x"
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("creationTimestamp", _deep(990)),
        ("uid", _deep(990)),
        ("ownerReferences", 7),
        ("annotations", {GENERATION_ID: _deep(990)}),
    ],
)
def test_a_podgroup_with_odd_field_types_is_still_cached_and_guarded(field, value):
    # The API server never serves these; the cache must not choke on them either. Repr of a
    # value nested 990 deep would raise RecursionError, so nothing may format one unbounded.
    pg = podgroup(owner=None)
    pg["metadata"][field] = value
    decision = delete(pg, context([member("w0", group="podgroup-rs")], cached=[pg])).decision
    assert not decision.allowed  # a uid that is not a string matches no review: failClosed


def test_a_podgroup_whose_metadata_is_not_an_object_is_cached_as_blank():
    assert podgroup_record({"metadata": "podgroup-rs"}) == PodGroupRecord()


def test_deletes_that_pass():
    pg = podgroup()
    live = [member("a", group="podgroup-rs")]
    assert delete(pg, context([])).decision.allowed  # no live pods
    assert delete(pg, context(live), {"preconditions": {"uid": "pg-uid-1"}}).decision.allowed
    assert delete(
        pg, context(live, deleteGuard={"exemptUsers": ["admin"]}), user="admin"
    ).decision.allowed
    assert delete(pg, context(live, cached=[], fail_closed=False)).decision.allowed


def test_a_collection_delete_is_judged_by_each_items_old_object():
    """kube-apiserver's DeleteCollection admits each item with the collection's empty name
    (handlers/delete.go, rest.AdmissionToValidateObjectDeleteFunc); the namespace controller
    deletes so. The item is its oldObject: judged as a delete by name, not refused as unknown."""
    pg = podgroup(annotations={GENERATION_ID: "0190-abc"})

    def collection_delete(pods):
        review = pg_review("DELETE", None, pg, user="system:serviceaccount:kube-system:ns")
        review["request"]["name"] = ""
        return evaluate("validate", from_document(review), context(pods, cached=[pg])).decision

    assert collection_delete([]).allowed
    denied = collection_delete([member("w0", group="podgroup-rs")])
    assert not denied.allowed and 'PodGroup "team-a/podgroup-rs"' in denied.message
    assert "still has live member pods" in denied.message


def test_unknown_members_or_an_unsynced_cache_follow_fail_closed():
    pg = podgroup()
    assert not delete(pg, context(None)).decision.allowed
    assert delete(pg, context(None, fail_closed=False)).decision.allowed
    unsynced = PolicyContext(
        config_from_dict({}), {PODGROUPS: empty_snapshot()}, {UNFINISHED_PODS: ()}
    )
    denied = delete(pg, unsynced).decision
    assert not denied.allowed and "PodGroup cache is not synced" in denied.message
    relaxed = PolicyContext(
        config_from_dict({"failClosed": False}),
        {PODGROUPS: empty_snapshot()},
        {UNFINISHED_PODS: ()},
    )
    assert delete(pg, relaxed).decision.allowed


def test_warn_and_audit_modes_allow_the_delete():
    live = [member("a", group="podgroup-rs")]
    warned = delete(podgroup(), context(live, deleteGuard={"mode": "warn"})).decision
    assert warned.allowed and warned.warnings
    audited = delete(podgroup(), context(live, deleteGuard={"mode": "audit"})).decision
    assert audited.allowed and dict(audited.audit_annotations)["deleteGuard"]


# --- the race, replayed ----------------------------------------------------------------------


def sandbox_pod(name, finalizers=()):
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "finalizers": list(finalizers),
            "annotations": {"scheduling.k8s.io/group-name": "podgroup-rs"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "rs",
                    "uid": RS_UID,
                    "controller": True,
                }
            ],
        },
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }


def sandbox_podgroup():
    obj = podgroup(uid=None)
    del obj["metadata"]["uid"], obj["metadata"]["creationTimestamp"]
    return obj


async def test_the_one_zero_one_race_is_stopped(certs):
    config = config_from_dict(
        {"policies": {"nodeName": {"mode": "off", "bindingGuard": {"mode": "off"}}}}
    )
    with SandboxThread() as sandbox:
        # 1: the Deployment's pod and its PodGroup.
        sandbox.seed([sandbox_pod("web-old", finalizers=["hold"]), sandbox_podgroup()])
        old_pg = sandbox.call(lambda sb: sb.store.get(PG, "team-a", "podgroup-rs").object())
        # -> 0: the old pod terminates (a finalizer keeps it visible); Volcano deletes the group.
        sandbox.call(lambda sb: sb.store.delete(PODS, "team-a", "web-old"))
        sandbox.call(lambda sb: sb.store.delete(PG, "team-a", "podgroup-rs"))
        # -> 1: a new pod of the same ReplicaSet (not annotated yet) and a new PodGroup.
        new_pod = sandbox_pod("web-new")
        del new_pod["metadata"]["annotations"]
        sandbox.seed([new_pod, sandbox_podgroup()])
        new_pg = sandbox.call(lambda sb: sb.store.get(PG, "team-a", "podgroup-rs").object())
        assert new_pg["metadata"]["uid"] != old_pg["metadata"]["uid"]

        async with webhook_over(sandbox.url, config, certs, lookup_timeout=0.5) as review:

            async def validate(options=None):
                return await review("/validate", pg_review("DELETE", None, new_pg, options))

            stale = await validate()  # the retried delete by name
            assert stale["allowed"] is False
            assert "still has live member pods" in stale["status"]["message"]
            gc_style = await validate({"preconditions": {"uid": new_pg["metadata"]["uid"]}})
            assert gc_style["allowed"] is True

            # A UID precondition naming the old incarnation fails at the API server.
            with pytest.raises(ApiError) as info:
                sandbox.call(
                    lambda sb: sb.store.delete(
                        PG,
                        "team-a",
                        "podgroup-rs",
                        {"preconditions": {"uid": old_pg["metadata"]["uid"]}},
                    )
                )
            assert info.value.code == 409

            # Once the new pod is gone, a plain delete is allowed.
            sandbox.call(lambda sb: sb.store.delete(PODS, "team-a", "web-new"))
            assert (await validate())["allowed"] is True

            # A member list that does not come in time: failClosed denies.
            sandbox.set_faults(
                FaultRule(verbs=frozenset({"list"}), resources=frozenset({"pods"}), latency=3.0)
            )
            started = asyncio.get_running_loop().time()
            slow = await validate()
            assert asyncio.get_running_loop().time() - started < 2.0
            assert slow["allowed"] is False
            assert "could not be listed in time" in slow["status"]["message"]


@asynccontextmanager
async def webhook_over(url, config, certs, **options):
    """The webhook over HTTPS, its caches synced from the sandbox at url; yields
    review(path, body) -> the AdmissionReview's response."""
    caches = Caches.for_config(config, Cluster(url), **options)
    try:
        await synced(caches)
        tls = server_context(certs.cert_file, certs.key_file)
        async with (
            running(config, Listen("127.0.0.1", 0), Listen("127.0.0.1", 0), tls, caches=caches) as (
                port,
                _,
            ),
            aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=client_context(certs.ca_file))
            ) as session,
        ):

            async def review(path, body):
                async with session.post(
                    f"https://127.0.0.1:{port}{path}", json=body, server_hostname=HOSTNAME
                ) as response:
                    return (await response.json())["response"]

            yield review
    finally:
        caches.stop()


async def synced(caches):
    caches.start()
    for _ in range(200):
        if caches.ready():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the caches did not sync")


# --- pods learn the generation of the PodGroup they join -------------------------------------


def pod_review(annotations):
    obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "w0", "namespace": "team-a", "annotations": annotations},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }
    return from_document(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "p",
                "operation": "CREATE",
                "namespace": "team-a",
                "name": "w0",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "object": obj,
            },
        }
    ), obj


# The pods' generations are off by default (docs/decisions/registrations.md).
ANNOTATING = {"policies": {"podGroups": {"annotatePodGeneration": True}}}


def test_pod_naming_a_cached_podgroup_gets_its_generation():
    request, obj = pod_review({"scheduling.k8s.io/group-name": "podgroup-rs"})
    cached = {"team-a/podgroup-rs": PodGroupRecord("0190-gen")}
    ctx = PolicyContext(config_from_dict(ANNOTATING), {PODGROUPS: static_snapshot(cached)})
    result = evaluate("mutate", request, ctx)
    patched = apply_patch(obj, list(result.decision.patch))
    assert patched["metadata"]["annotations"]["volcano-guard.io/podgroup-generation"] == "0190-gen"


def test_a_review_without_a_namespace_is_told_no_podgroups_generation():
    """The object's own namespace is what the sender wrote: asking with it would let anyone
    who reaches the port read any namespace's PodGroup generation ids."""
    request, _ = pod_review({"scheduling.k8s.io/group-name": "podgroup-rs"})
    request = msgspec.structs.replace(request, namespace="")
    cached = {"team-a/podgroup-rs": PodGroupRecord("0190-gen")}
    ctx = PolicyContext(config_from_dict(ANNOTATING), {PODGROUPS: static_snapshot(cached)})
    result = evaluate("mutate", request, ctx)
    assert result.decision.patch == ()
    assert "0190-gen" not in json.dumps(msgspec.to_builtins(result.decision))


def test_pod_naming_an_uncached_podgroup_is_admitted_and_counted():
    request, _ = pod_review({"scheduling.k8s.io/group-name": "not-yet"})
    ctx = PolicyContext(config_from_dict(ANNOTATING), {PODGROUPS: static_snapshot({})})
    result = evaluate("mutate", request, ctx)
    assert result.decision.allowed and result.decision.patch == ()
    assert ("podGroupGeneration", "podgroup_not_cached") in [
        (r.policy, r.outcome) for r in result.results
    ]


def deployment_pod(annotations=None):
    """A pod as a ReplicaSet of a Deployment creates it for Volcano: no group name yet."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web-7d9f-x2k",
            "namespace": "team-a",
            "annotations": dict(annotations or {}),
            "labels": {"app": "web"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "web-7d9f",
                    "uid": RS_UID,
                    "controller": True,
                }
            ],
        },
        "spec": {
            "schedulerName": "volcano",
            "containers": [
                {
                    "name": "c",
                    "image": "x",
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                }
            ],
        },
    }


def volcano_patch(pod, group):
    """The pod after the strategic merge patch Volcano's PodGroup controller sends
    (pg_controller_handler.go updatePodAnnotations: metadataForMergePatch)."""
    from volcano_guard_sandbox.apiserver.patch import apply_strategic_merge_patch

    return apply_strategic_merge_patch(
        copy.deepcopy(pod), {"metadata": {"annotations": {"scheduling.k8s.io/group-name": group}}}
    )


def pod_update(old, new):
    return from_document(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u",
                "operation": "UPDATE",
                "namespace": "team-a",
                "name": new["metadata"]["name"],
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "userInfo": {
                    "username": "system:serviceaccount:volcano-system:volcano-controllers"
                },
                "object": new,
                "oldObject": old,
            },
        }
    )


def generation_context():
    return PolicyContext(
        config_from_dict(ANNOTATING),
        {PODGROUPS: static_snapshot({f"team-a/podgroup-{RS_UID}": PodGroupRecord("0190-gen")})},
    )


@pytest.mark.parametrize("old_annotations", [{}, {"scheduling.k8s.io/group-name": ""}])
def test_the_update_volcano_sends_to_name_a_deployment_pods_group_records_its_generation(
    old_annotations,
):
    old = deployment_pod(old_annotations)
    new = volcano_patch(old, f"podgroup-{RS_UID}")
    result = evaluate("mutate", pod_update(old, new), generation_context())
    patched = apply_patch(new, list(result.decision.patch))
    assert patched["metadata"]["annotations"][POD_GENERATION] == "0190-gen"
    assert (
        patched["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == f"podgroup-{RS_UID}"
    )


@pytest.mark.parametrize(
    ("old_annotations", "new_annotations"),
    [
        # It had joined already: a later update (a label, a status) changes nothing.
        (
            {"scheduling.k8s.io/group-name": f"podgroup-{RS_UID}"},
            {"scheduling.k8s.io/group-name": f"podgroup-{RS_UID}", "note": "x"},
        ),
        # A generation already recorded is kept.
        (
            {POD_GENERATION: "0180-old"},
            {POD_GENERATION: "0180-old", "scheduling.k8s.io/group-name": f"podgroup-{RS_UID}"},
        ),
        # An update that does not name a group.
        ({}, {"note": "x"}),
    ],
)
def test_other_pod_updates_are_left_alone(old_annotations, new_annotations):
    result = evaluate(
        "mutate",
        pod_update(deployment_pod(old_annotations), deployment_pod(new_annotations)),
        generation_context(),
    )
    assert result.decision.patch == ()
    assert "podGroupGeneration" not in [r.policy for r in result.results]


def test_volcanos_source_still_names_deployment_pods_groups_by_a_patch():
    from tests.upstream import go_function, volcano_file

    handler = volcano_file("pkg/controllers/podgroup/pg_controller_handler.go")
    update = go_function(handler, "updatePodAnnotations")
    assert 'if pod.Annotations[scheduling.KubeGroupNameAnnotationKey] == "" {' in update
    assert "types.StrategicMergePatchType" in update
    assert 'Metadata annotationForMergePatch `json:"metadata"`' in handler
    assert 'Annotations map[string]string `json:"annotations"`' in handler
    labels = volcano_file("staging/src/volcano.sh/apis/pkg/apis/batch/v1alpha1/labels.go")
    assert 'PodgroupNamePrefix = "podgroup-"' in labels
    keys = volcano_file("staging/src/volcano.sh/apis/pkg/apis/scheduling/v1beta1/labels.go")
    assert 'KubeGroupNameAnnotationKey = "scheduling.k8s.io/group-name"' in keys


@pytest.mark.parametrize(
    ("handler_name", "owner"), [("addStatefulSet", "sts"), ("addReplicaSet", "rs")]
)
def test_volcanos_source_deletes_an_owners_podgroup_by_name_at_replicas_zero(handler_name, owner):
    """The stale delete the e2e replays: podgroup-<owner uid>, no preconditions (#5972)."""
    from tests.upstream import go_function, volcano_file

    handler = go_function(
        volcano_file("pkg/controllers/podgroup/pg_controller_handler.go"), handler_name
    )
    at_zero = handler[handler.index(f"if *{owner}.Spec.Replicas == 0 {{") :]
    assert f"pgName := batchv1alpha1.PodgroupNamePrefix + string({owner}.UID)" in at_zero
    assert "Delete(context.TODO(), pgName, metav1.DeleteOptions{})" in at_zero


async def test_the_podgroup_cache_feeds_pod_annotations_end_to_end(certs):
    config = config_from_dict(
        {
            "policies": {
                "nodeName": {"mode": "off", "bindingGuard": {"mode": "off"}},
                "podGroups": {"annotatePodGeneration": True},
            }
        }
    )
    with SandboxThread() as sandbox:
        stamped = sandbox_podgroup()
        stamped["metadata"]["annotations"] = {GENERATION_ID: "0190-live"}
        sandbox.seed([stamped])
        async with webhook_over(sandbox.url, config, certs) as review:
            _, obj = pod_review({"scheduling.k8s.io/group-name": "podgroup-rs"})
            answer = await review(
                "/mutate",
                {
                    "apiVersion": "admission.k8s.io/v1",
                    "kind": "AdmissionReview",
                    "request": {
                        "uid": "p",
                        "operation": "CREATE",
                        "namespace": "team-a",
                        "name": "w0",
                        "kind": {"group": "", "version": "v1", "kind": "Pod"},
                        "resource": {"group": "", "version": "v1", "resource": "pods"},
                        "object": obj,
                    },
                },
            )
        patch = json.loads(base64.b64decode(answer["patch"]))
        assert {
            "op": "add",
            "path": "/metadata/annotations/volcano-guard.io~1podgroup-generation",
            "value": "0190-live",
        } in patch


# --- the live member list ---------------------------------------------------------------------


async def test_member_pods_are_listed_as_metadata_page_by_page_with_the_token_and_selector(
    tmp_path,
):
    seen: list[dict[str, str | None]] = []

    async def pods(request: web.Request) -> web.Response:
        seen.append(
            {
                "path": request.path,
                **request.query,
                "accept": request.headers.get("Accept"),
                "authorization": request.headers.get("Authorization"),
            }
        )
        if request.match_info["namespace"] == "forbidden":
            return web.json_response({"kind": "Status", "code": 403}, status=403)
        if "continue" not in request.query:
            return web.json_response(
                {
                    "kind": "PartialObjectMetadataList",
                    "metadata": {"continue": "page-2"},
                    "items": [member("w0"), "junk", 7],
                }
            )
        return web.json_response(
            {"kind": "PartialObjectMetadataList", "metadata": {}, "items": [member("w1")]}
        )

    app = web.Application()
    app.router.add_get("/api/v1/namespaces/{namespace}/pods", pods)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    port = runner.addresses[0][1]
    caches = Caches(cluster=Cluster(f"http://127.0.0.1:{port}", token_file=str(token)))
    try:
        listed = await caches.live_list(UNFINISHED_PODS, "team-a")
        assert listed is not None and [p["metadata"]["name"] for p in listed] == ["w0", "w1"]
        assert await caches.live_list(UNFINISHED_PODS, "forbidden") is None  # the policy decides
    finally:
        await caches.close()
        await runner.cleanup()
    first, second = seen[:2]
    assert first["path"] == "/api/v1/namespaces/team-a/pods"
    assert first["fieldSelector"] == "status.phase!=Succeeded,status.phase!=Failed"
    assert first["limit"] == "500" and second["continue"] == "page-2"
    assert first["accept"].startswith(
        "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
    )
    assert first["authorization"] == "Bearer s3cret"


async def test_one_source_holds_half_the_lookups_and_another_gets_the_rest_at_once():
    release = asyncio.Event()
    calls = 0

    async def pods(request: web.Request) -> web.Response:
        nonlocal calls
        calls += 1
        await release.wait()
        return web.json_response({"kind": "PartialObjectMetadataList", "items": []})

    app = web.Application()
    app.router.add_get("/api/v1/namespaces/{namespace}/pods", pods)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    cluster = Cluster(f"http://127.0.0.1:{runner.addresses[0][1]}")
    caches = Caches(cluster=cluster, max_lookups=4, lookup_timeout=0.5)
    refused = LIVE_LOOKUPS.labels("pods", "refused")
    before = refused._value.get()
    try:
        flood = [
            asyncio.create_task(caches.live_list(UNFINISHED_PODS, "team-a", "10.0.0.66"))
            for _ in range(12)
        ]
        while calls < 2:
            await asyncio.sleep(0.01)
        real = asyncio.create_task(caches.live_list(UNFINISHED_PODS, "team-b", "10.0.0.1"))
        while calls < 3:
            await asyncio.sleep(0.01)
        assert calls == 3  # the flood's source holds 2 of 4; the API server's gets a third
        release.set()
        assert await real == ()
        answers = await asyncio.gather(*flood)
        assert answers.count(None) == 2  # 2 held, 8 wait in line; the rest: refused at once
        assert refused._value.get() == before + 2
    finally:
        await caches.close()
        await runner.cleanup()


def test_the_sandbox_serves_member_pods_as_metadata_as_kube_apiserver_does():
    with SandboxThread() as sandbox:
        sandbox.seed([sandbox_pod("w0")])
        caches = Caches(cluster=Cluster(sandbox.url))

        async def listed():
            try:
                return await caches.live_list(UNFINISHED_PODS, "team-a")
            finally:
                await caches.close()

        pods = asyncio.run(listed())
    assert pods is not None and [p["kind"] for p in pods] == ["PartialObjectMetadata"]
    assert set(pods[0]) == {"kind", "apiVersion", "metadata"}
    assert pods[0]["metadata"]["annotations"] == {"scheduling.k8s.io/group-name": "podgroup-rs"}


def test_an_update_may_not_give_an_id_to_a_podgroup_created_without_one():
    unstamped = podgroup()
    claimed = podgroup(annotations={GENERATION_ID: "0190-another-incarnations-id"})
    ctx = context()
    refused = evaluate("validate", from_document(pg_review("UPDATE", claimed, unstamped)), ctx)
    assert not refused.decision.allowed and GENERATION_ID in refused.decision.message
    exempt = context(deleteGuard={"exemptUsers": ["admin"]})
    by_admin = from_document(pg_review("UPDATE", claimed, unstamped, user="admin"))
    assert evaluate("validate", by_admin, exempt).decision.allowed
    kept = from_document(pg_review("UPDATE", unstamped, unstamped))
    assert evaluate("validate", kept, ctx).decision.allowed
