"""Policy podGroups: tell PodGroup incarnations apart, and refuse deletes that would remove a
PodGroup under its live pods.

Volcano names a Deployment's PodGroup `podgroup-<ReplicaSet uid>`, so scaling 1 -> 0 -> 1 reuses
the name; a retried delete by name then removes the new incarnation and its new pod stays
Pending forever. /mutate stamps every PodGroup with a generation id (UUIDv7) that no update may
take away; /validate denies a plain delete of a PodGroup that still has live member pods. A
delete with `preconditions.uid` (as the garbage collector sends) passes: the API server checks it.

Anyone who reaches the webhook can send a review, so nothing the cluster can answer is trusted
from one, and an answer tells its sender nothing it did not know: the PodGroup is looked up in
the guard's own cache by the request's namespace and name, and judged (its members listed,
metadata only) only when the review's oldObject carries that cached PodGroup's uid, as the API
server's always does. Any other review (a forged one, or one newer than the cache) gets one
answer whether or not such a PodGroup exists: failClosed's, with generic text. A denial names
only what the review carries (uid, generation id, age) and how to list the members, never the
members: the sender sees them only if its own access lets it.

Outside this module the guard uses only what __all__ lists: the three Policy objects, for the
registry (webhook.evaluation); PODGROUPS and podgroup_record, for the audit to build the PodGroup
snapshot as the cache does; GENERATION_ID, podgroup_generation and GROUP_NAME, for the audit's
generation-id and orphan findings and `check`'s note on an unstamped PodGroup (with
is_pod_group); its config section, for the config (webhook.config).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from volcano_guard.base import jsonpatch
from volcano_guard.base.durations import format_duration
from volcano_guard.base.jsonbody import object_at, shown
from volcano_guard.webhook.cel import (
    all_of,
    annotation_set,
    any_of,
    kind_is,
    negate,
    operation_is,
    string,
    user_in,
)
from volcano_guard.webhook.policies.base import (
    MUTATE,
    MUTATE_OPEN,
    NOTHING_FOUND,
    VALIDATE,
    InServerCheck,
    LiveList,
    Policy,
    PolicyContext,
    Rule,
    Scope,
    Verdict,
    WatchedList,
    pods_rule,
)
from volcano_guard.webhook.review import AdmissionRequest
from volcano_guard.webhook.sections import Mode, Name, Section
from volcano_guard.webhook.workloads import POD

if TYPE_CHECKING:  # config.py gathers the policies' sections: at run time, it imports this
    from volcano_guard.webhook.config import Config

__all__ = [
    "DELETE_POLICY",
    "ENRICH_POLICY",
    "GENERATION_ID",
    "GROUP_NAME",
    "ID_GUARD_POLICY",
    "PODGROUPS",
    "STAMP_POLICY",
    "PodGroupsConfig",
    "is_pod_group",
    "podgroup_generation",
    "podgroup_record",
]


class DeleteGuardConfig(Section, frozen=True):
    mode: Mode = "enforce"
    exemptUsers: tuple[Name, ...] = ()
    exemptGroups: tuple[Name, ...] = ()


class PodGroupsConfig(Section, frozen=True):
    """`policies.podGroups`."""

    stampGenerationId: bool = True
    # Annotate a pod joining a PodGroup with the generation it joins (volcano-guard.io/
    # podgroup-generation): only the webhook can (it reads its PodGroup cache), so it sends
    # every such pod (every Volcano Job pod) to the webhook. Nothing of the guard reads it.
    annotatePodGeneration: bool = False
    deleteGuard: DeleteGuardConfig = msgspec.field(default_factory=DeleteGuardConfig)


NAME = "podGroups"
DELETE_GUARD = "deleteGuard"
ID_GUARD = "podGroupIdGuard"
GENERATION_ID = "volcano-guard.io/generation-id"
GROUP_NAME = "scheduling.k8s.io/group-name"
POD_GENERATION = "volcano-guard.io/podgroup-generation"
ENRICH = "podGroupGeneration"
OUTCOME_UNKNOWN = "podgroup_not_cached"
POD_GROUP = ("scheduling.volcano.sh", "PodGroup")


def settings(config: Config) -> PodGroupsConfig:
    return config.policies.podGroups


def is_pod_group(request: AdmissionRequest) -> bool:
    return (request.kind.group, request.kind.kind) == POD_GROUP and not request.sub_resource


def is_delete(request: AdmissionRequest) -> bool:
    return is_pod_group(request) and request.operation == "DELETE"


class PodGroupRecord(msgspec.Struct, frozen=True, gc=False):
    """What the PodGroup cache keeps of a PodGroup: its generation id, and what the delete guard
    says of it."""

    generation: str = ""
    uid: str = ""
    controller: str | None = None  # its controller's uid: a new member may not name it yet
    created: str = ""  # creationTimestamp


def podgroup_record(obj: dict[str, Any]) -> PodGroupRecord:
    metadata = object_at(obj, "metadata")
    return PodGroupRecord(
        podgroup_generation(obj),
        _text(metadata.get("uid")),
        controller_uid(obj),
        _text(metadata.get("creationTimestamp")),
    )


def podgroup_generation(obj: dict[str, Any]) -> str:
    """A PodGroup object's generation id ("" for none)."""
    return _text((_annotations(obj) or {}).get(GENERATION_ID))


PODGROUPS = WatchedList(
    "podgroups", "PodGroup", podgroup_record, "scheduling.volcano.sh", "v1beta1", namespaced=True
)


def guarded_podgroup(
    request: AdmissionRequest, snapshots: Mapping[WatchedList[Any], Any]
) -> PodGroupRecord | None:
    """The cached PodGroup a DELETE names, when its members must be counted: a plain delete
    (no UID precondition) whose oldObject is the cached PodGroup (same uid)."""
    if not is_delete(request) or _uid_precondition(request):
        return None
    podgroups = snapshots.get(PODGROUPS)
    key = f"{request.namespace}/{request.object_name}"
    cached: PodGroupRecord | None = podgroups.items.get(key) if podgroups else None
    if cached is None or not cached.uid or cached.uid != _old_uid(request):
        return None
    return cached


def _old_uid(request: AdmissionRequest) -> str:
    return _text(object_at(request.old_object or {}, "metadata").get("uid"))


# The namespace's pods that have not finished, listed (metadata only) for a PodGroup DELETE that
# guarded_podgroup finds: a rare path.
UNFINISHED_PODS = LiveList(
    "pods",
    wanted=lambda request, snapshots: guarded_podgroup(request, snapshots) is not None,
    field_selector="status.phase!=Succeeded,status.phase!=Failed",
)


def mutate(request: AdmissionRequest, context: PolicyContext) -> Verdict | None:
    """Stamp CREATEs with a new id; restore an UPDATE's id from the object it replaces."""
    if not is_pod_group(request) or request.object is None:
        return None
    annotations = _annotations(request.object)
    current = annotations.get(GENERATION_ID) if annotations is not None else None
    warnings: tuple[str, ...] = ()
    if request.operation == "CREATE":
        if current and _break_glass(request, context.config):
            return NOTHING_FOUND  # a restore by a break-glass user keeps its id
        wanted = str(context.new_generation_id())
        if current is not None:
            warnings = (
                f"{request.describe()}: {GENERATION_ID} {shown(current)} is replaced by "
                f"{wanted}: only the guard stamps a new PodGroup's id",
            )
    elif request.operation == "UPDATE":
        old = _annotations(request.old_object or {}) or {}
        restored = old.get(GENERATION_ID)
        if not isinstance(restored, str) or not restored or current == restored:
            return NOTHING_FOUND
        wanted = restored
    else:
        return None
    if annotations is None:
        patch = jsonpatch.add("/metadata/annotations", {GENERATION_ID: wanted})
    else:
        patch = jsonpatch.add(jsonpatch.pointer("metadata", "annotations", GENERATION_ID), wanted)
    verb = "stamp" if request.operation == "CREATE" else "restore"
    change = f"{verb} {request.describe()} {GENERATION_ID}={wanted}"
    return Verdict(patch=(patch,), changes=(change,), warnings=warnings)


ID_ADDED = (
    f"{GENERATION_ID} may not be added to a PodGroup created without one: only the guard "
    "stamps an id, on create (recreate the PodGroup, or have a deleteGuard exempt user add it)"
)


def validate_update(request: AdmissionRequest, context: PolicyContext) -> Verdict | None:
    """An UPDATE may not give an id to a PodGroup that had none (one created before the guard,
    or while its stamp was off): any id would do, so it could claim another incarnation's."""
    if not is_pod_group(request) or request.operation != "UPDATE" or request.object is None:
        return None
    if podgroup_generation(request.old_object or {}) or not podgroup_generation(request.object):
        return NOTHING_FOUND
    if _break_glass(request, context.config):
        return NOTHING_FOUND
    return Verdict(violations=(f"{request.describe()}: {ID_ADDED}",))


def _id_added(config: Config) -> str:
    """CEL: a PodGroup UPDATE, by a user the guard does not exempt, of one that had no id."""
    guard = settings(config).deleteGuard
    return all_of(
        kind_is(*POD_GROUP),
        operation_is("UPDATE"),
        negate(annotation_set("oldObject", GENERATION_ID)),
        negate(user_in(guard.exemptUsers, guard.exemptGroups)),
    )


def stamp_in_server(config: Config) -> tuple[InServerCheck, ...]:
    """The API server refuses an id added by an UPDATE, webhook up or not."""
    return (
        InServerCheck(
            "podgroup-generation-id",
            (_podgroups("UPDATE"),),
            _id_added(config),
            ((negate(annotation_set("object", GENERATION_ID)), string(ID_ADDED)),),
        ),
    )


def _break_glass(request: AdmissionRequest, config: Config) -> bool:
    """The delete guard's exempt users and groups: who may also keep a PodGroup's id."""
    guard = settings(config).deleteGuard
    return request.user.username in guard.exemptUsers or bool(
        set(request.user.groups) & set(guard.exemptGroups)
    )


def validate_delete(request: AdmissionRequest, context: PolicyContext) -> Verdict | None:
    if not is_delete(request):
        return None
    if _uid_precondition(request):
        return NOTHING_FOUND  # the API server refuses it unless it names this incarnation
    if _break_glass(request, context.config):
        return NOTHING_FOUND
    podgroups = context.snapshot(PODGROUPS)
    if podgroups is None or not podgroups.synced:
        return _unknown(request, context, "the PodGroup cache is not synced")
    podgroup = guarded_podgroup(request, context.snapshots)
    if podgroup is None:  # forged, or newer than the cache: one answer, existing or not
        return _unknown(request, context, "it is not the PodGroup the guard's cache holds")
    pods = context.live(UNFINISHED_PODS)
    if pods is None:
        return _unknown(request, context, "its member pods could not be listed in time")
    if not live_members(request.object_name, podgroup.controller, pods):
        return NOTHING_FOUND
    return Verdict(violations=(_message(request, context),))


def _unknown(request: AdmissionRequest, context: PolicyContext, why: str) -> Verdict:
    """The answer when the guard cannot tell: failClosed decides."""
    if not context.config.failClosed:
        return NOTHING_FOUND
    return Verdict(
        violations=(
            f"{request.describe()}: {why}, and failClosed is true; retry, or delete with a UID "
            "precondition",
        )
    )


def _uid_precondition(request: AdmissionRequest) -> bool:
    preconditions = (request.options or {}).get("preconditions")
    return isinstance(preconditions, dict) and bool(preconditions.get("uid"))


def live_members(name: str, controller: str | None, pods: Iterable[dict[str, Any]]) -> list[str]:
    """Pods that are not terminating and not finished, and that name the PodGroup or share its
    controller (a new pod may exist before Volcano annotates it)."""
    members = []
    for pod in pods:
        metadata = object_at(pod, "metadata")
        if metadata.get("deletionTimestamp"):
            continue
        if object_at(pod, "status").get("phase") in ("Succeeded", "Failed"):
            continue
        named = object_at(metadata, "annotations").get(GROUP_NAME) == name
        if named or (controller and controller_uid(pod) == controller):
            members.append(str(metadata.get("name")))
    return sorted(members)


def controller_uid(obj: dict[str, Any]) -> str | None:
    owners = object_at(obj, "metadata").get("ownerReferences")
    for owner in owners if isinstance(owners, list) else ():
        if isinstance(owner, dict) and owner.get("controller") is True:
            uid = owner.get("uid")
            return uid if isinstance(uid, str) and uid else None
    return None


def annotate_pod(request: AdmissionRequest, context: PolicyContext) -> Verdict | None:
    """A pod joining a PodGroup: record the generation of the incarnation it joins. It joins
    on CREATE when it names the group (Volcano Job pods), or on the UPDATE that adds the name:
    Volcano's PodGroup controller patches it onto a Deployment's pods after they exist
    (pkg/controllers/podgroup `updatePodAnnotations`). A recorded generation is kept."""
    pod = joining_pod(request)
    if pod is None:
        return None
    annotations = _annotations(pod) or {}
    group = annotations[GROUP_NAME]
    if annotations.get(POD_GENERATION):
        return None
    if not request.namespace:  # the API server always says; the object's own is the sender's
        return None
    podgroups = context.snapshot(PODGROUPS)
    record = podgroups.items.get(f"{request.namespace}/{group}") if podgroups else None
    generation = record.generation if record else ""
    if not generation:
        return Verdict(outcome=OUTCOME_UNKNOWN)  # not cached (yet) or never stamped
    patch = jsonpatch.add(jsonpatch.pointer("metadata", "annotations", POD_GENERATION), generation)
    return Verdict(
        patch=(patch,), changes=(f"annotate {request.describe()} {POD_GENERATION}={generation}",)
    )


def joining_pod(request: AdmissionRequest) -> dict[str, Any] | None:
    """The pod of a CREATE naming a PodGroup, or of an UPDATE that adds the name (an empty name
    counts as none, as Volcano's controller reads it); else None."""
    if (request.kind.group, request.kind.kind) != POD or request.sub_resource:
        return None
    if request.operation not in ("CREATE", "UPDATE") or request.object is None:
        return None
    group = (_annotations(request.object) or {}).get(GROUP_NAME)
    if not isinstance(group, str) or not group:
        return None
    if request.operation == "UPDATE" and (_annotations(request.old_object or {}) or {}).get(
        GROUP_NAME
    ):
        return None  # it had joined already
    return request.object


def stamp_scopes(config: Config) -> tuple[Scope, ...]:
    """PodGroup CREATEs (but those with an id by a break-glass user); UPDATEs that drop or
    change the id they had."""
    guard = settings(config).deleteGuard
    id_now, id_before = (
        annotation_set("object", GENERATION_ID),
        annotation_set("oldObject", GENERATION_ID),
    )
    changed = (
        f"object.metadata.annotations[{string(GENERATION_ID)}] != "
        f"oldObject.metadata.annotations[{string(GENERATION_ID)}]"
    )
    condition = all_of(
        kind_is(*POD_GROUP),
        any_of(
            all_of(
                operation_is("CREATE"),
                negate(
                    all_of(id_now, user_in(guard.exemptUsers, guard.exemptGroups))
                    if guard.exemptUsers or guard.exemptGroups
                    else ""
                ),
            ),
            all_of(operation_is("UPDATE"), id_before, any_of(negate(id_now), changed)),
        ),
    )
    return (Scope(MUTATE, (_podgroups("CREATE", "UPDATE"),), condition),)


def id_guard_scopes(config: Config) -> tuple[Scope, ...]:
    """PodGroup UPDATEs that add an id to one that had none (stamp_in_server)."""
    added = all_of(_id_added(config), annotation_set("object", GENERATION_ID))
    return (Scope(VALIDATE, (_podgroups("UPDATE"),), added),)


def enrich_scopes(config: Config) -> tuple[Scope, ...]:
    """Pods joining a PodGroup (joining_pod) that have no generation recorded: not every pod
    UPDATE, only the one that adds the group name. It fails open: the annotation tells which
    incarnation a pod joined, nothing depends on it, and a Volcano Job's pods all join one."""
    condition = all_of(
        kind_is(*POD),
        annotation_set("object", GROUP_NAME),
        negate(annotation_set("object", POD_GENERATION)),
        any_of(
            operation_is("CREATE"),
            all_of(operation_is("UPDATE"), negate(annotation_set("oldObject", GROUP_NAME))),
        ),
    )
    return (Scope(MUTATE_OPEN, (pods_rule("CREATE", "UPDATE"),), condition),)


def delete_scopes(config: Config) -> tuple[Scope, ...]:
    """PodGroup DELETEs without a UID precondition by users the guard does not exempt."""
    guard = settings(config).deleteGuard
    uid_precondition = (
        "has(request.options) && has(request.options.preconditions) && "
        "has(request.options.preconditions.uid) && "
        "request.options.preconditions.uid != ''"
    )
    condition = all_of(
        kind_is(*POD_GROUP),
        operation_is("DELETE"),
        negate(uid_precondition),
        negate(user_in(guard.exemptUsers, guard.exemptGroups)),
    )
    return (Scope(VALIDATE, (_podgroups("DELETE"),), condition),)


def _podgroups(*operations: str) -> Rule:
    return Rule(POD_GROUP[0], "v1beta1", ("podgroups",), operations)


STAMPS_OFF = "policies.podGroups.stampGenerationId: false"


def _stamping(config: Config) -> Mode:
    """The stamps, the id guard and the pods' generations: on together."""
    return "enforce" if settings(config).stampGenerationId else "off"


STAMP_POLICY = Policy(
    name=NAME,
    mode=_stamping,
    off=STAMPS_OFF,
    mutate=mutate,
    kinds=frozenset({POD_GROUP}),
    scopes=stamp_scopes,
)
# Apart from the stamps: a policy with in-server checks has its scopes fail open, and stamps
# must not be skipped.
ID_GUARD_POLICY = Policy(
    name=ID_GUARD,
    mode=_stamping,
    off=STAMPS_OFF,
    validate=validate_update,
    kinds=frozenset({POD_GROUP}),
    scopes=id_guard_scopes,
    in_server=stamp_in_server,
)


def _annotating(config: Config) -> Mode:
    """The pods' generations: asked for, and with the stamps they record. Off by default: with
    it, every pod joining a PodGroup is sent to the webhook (docs/decisions/registrations.md)."""
    return _stamping(config) if settings(config).annotatePodGeneration else "off"


ENRICH_POLICY = Policy(
    name=ENRICH,
    mode=_annotating,
    off="policies.podGroups.annotatePodGeneration: false",
    mutate=annotate_pod,
    kinds=frozenset({POD}),
    scopes=enrich_scopes,
    watches=(PODGROUPS,),
)
DELETE_POLICY = Policy(
    name=DELETE_GUARD,
    mode=lambda config: settings(config).deleteGuard.mode,
    off="policies.podGroups.deleteGuard.mode: off",
    validate=validate_delete,
    kinds=frozenset({POD_GROUP}),
    scopes=delete_scopes,
    watches=(PODGROUPS,),
    lookups=(UNFINISHED_PODS,),
)


def _annotations(obj: dict[str, Any]) -> dict[str, Any] | None:
    metadata = obj.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
    return annotations if isinstance(annotations, dict) else None


def _message(request: AdmissionRequest, context: PolicyContext) -> str:
    """The denial, from what the review carries (its oldObject matched the cluster's)."""
    old = request.old_object or {}
    generation = podgroup_generation(old) or "unknown (not stamped)"
    created = _text(object_at(old, "metadata").get("creationTimestamp"))
    return (
        f"{request.describe()} (generation {generation}, created {_age(created, context)} ago) "
        f"still has live member pods (kubectl get pods -n {request.namespace} with annotation "
        f"{GROUP_NAME}={request.object_name}, or its owner's). A "
        "delete by name may be a stale retry that would remove this newer incarnation under its "
        "pods. Delete the workload instead, or delete this exact incarnation with a UID "
        f'precondition (DeleteOptions preconditions.uid: "{_old_uid(request)}"; kubectl delete '
        "--raw with that body)"
    )


def _age(created: str, context: PolicyContext) -> str:
    try:
        then = datetime.datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ").replace(
            tzinfo=datetime.UTC
        )
    except ValueError:
        return "an unknown time"
    return format_duration(datetime.timedelta(seconds=context.clock() - then.timestamp()))


def _text(value: Any) -> str:
    """A field the API server always sends as a string; anything else counts as unset."""
    return value if isinstance(value, str) else ""
