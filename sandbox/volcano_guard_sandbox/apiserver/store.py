"""The sandbox's state: objects, one resourceVersion counter, a bounded event log, watchers.

One owner: every method runs on the event loop thread and none awaits, so each call is atomic
with respect to every other request; nothing here is shared with another thread. Objects are
kept as compact JSON bytes (what a GET or LIST serves, without re-encoding), plus the labels and
selectable fields that selectors need, so 100k pods fit in a few hundred MiB.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import datetime
import secrets
import uuid
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from volcano_guard.base.jsonpatch import JsonPatchError, JsonPatchTooLarge, apply_patch
from volcano_guard.base.mergepatch import apply_merge_patch
from volcano_guard.base.names import dns1123_subdomain_problem
from volcano_guard_sandbox.apiserver import crd_schemas
from volcano_guard_sandbox.apiserver.patch import StrategicPatchError, apply_strategic_merge_patch
from volcano_guard_sandbox.apiserver.resources import RESOURCES, ResourceType, served
from volcano_guard_sandbox.apiserver.selectors import Requirement, matches

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
CONFLICT_MESSAGE = (
    "the object has been modified; please apply your changes to the latest version and try again"
)
_COMMON_FIELDS = ("metadata.name", "metadata.namespace")
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # no vowels: no words in generated names
GENERATE_NAME_ATTEMPTS = 8
NAMESPACE_FINALIZE_AFTER = 2.0  # seconds from a namespace's deletion to its content's
SELECTABLE_FIELDS: dict[str, tuple[str, ...]] = {
    "pods": (
        *_COMMON_FIELDS,
        "spec.nodeName",
        "spec.schedulerName",
        "status.phase",
        "spec.serviceAccountName",
        "spec.restartPolicy",
        "status.podIP",
    ),
    "nodes": (*_COMMON_FIELDS, "spec.unschedulable"),
    "namespaces": (*_COMMON_FIELDS, "status.phase"),
}


NAMESPACES = served("", "v1", "namespaces")
OBJECT_META_FIELDS = frozenset(
    {
        "name",
        "generateName",
        "namespace",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "managedFields",
        "selfLink",
    }
)


class Stale(Exception):
    """The object changed between an update's read and its commit."""


class ApiError(Exception):
    """An answer other than success, in the apiserver's terms."""

    def __init__(
        self, code: int, reason: str, message: str, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details


@dataclass(frozen=True)
class Stored:
    raw: bytes
    resource_version: int
    uid: str
    labels: Mapping[str, str]
    fields: Mapping[str, str]

    def object(self) -> dict[str, Any]:
        return orjson.loads(self.raw)


@dataclass(frozen=True)
class Event:
    resource_version: int
    type: str  # ADDED MODIFIED DELETED
    resource: ResourceType
    namespace: str
    new: Stored
    old: Stored | None = None


# A watcher further behind than this is dropped, as the apiserver drops a watcher that does not
# keep up (it re-lists): a stalled client must not hold the server's memory.
MAX_QUEUED_EVENTS = 10_000
MAX_QUEUED_BYTES = 16 * 1024 * 1024


@dataclass(eq=False)
class Watcher:
    """One open watch: its filter and the queue of encoded events the server streams."""

    resource: ResourceType
    namespace: str
    labels: tuple[Requirement, ...]
    fields: tuple[Requirement, ...]
    queue: asyncio.Queue[bytes | None] = field(
        default_factory=lambda: asyncio.Queue(MAX_QUEUED_EVENTS)
    )
    closed: bool = False
    queued_bytes: int = 0

    def offer(self, event: Event) -> None:
        """Queue the event as this watcher sees it: moving out of its selector is a DELETED,
        moving in an ADDED, as the apiserver's watch cache reports them."""
        if self.closed or event.resource is not self.resource:
            return
        if self.namespace and event.namespace != self.namespace:
            return
        now = self._matches(event.new)
        before = event.old is not None and self._matches(event.old)
        kind = event.type
        if event.type == "MODIFIED":
            if not now and not before:
                return
            kind = "MODIFIED" if now and before else ("ADDED" if now else "DELETED")
        elif not now:
            return
        self.put(encode_event(kind, event.new.raw))

    def put(self, data: bytes | None) -> None:
        size = len(data) if data else 0
        if self.queued_bytes + size > MAX_QUEUED_BYTES:
            self.close()
            return
        try:
            self.queue.put_nowait(data)
        except asyncio.QueueFull:
            self.close()
            return
        self.queued_bytes += size

    async def next(self) -> bytes | None:
        """The next encoded event to stream; None when the watch has ended."""
        data = await self.queue.get()
        self.queued_bytes -= len(data) if data else 0
        return data

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            while not self.queue.empty():
                self.queue.get_nowait()
            self.queued_bytes = 0
            self.queue.put_nowait(None)

    def _matches(self, stored: Stored) -> bool:
        return matches(self.labels, stored.labels) and matches(self.fields, stored.fields)


def encode_event(kind: str, raw: bytes) -> bytes:
    return b'{"type":"' + kind.encode() + b'","object":' + raw + b"}\n"


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Store:
    def __init__(self, event_window: int = 10_000) -> None:
        self._objects: dict[ResourceType, dict[tuple[str, str], Stored]] = {
            resource: {} for resource in RESOURCES
        }
        self._resource_version = 1000
        self._log: deque[Event] = deque(maxlen=event_window)
        self._evicted_upto = 0  # events up to this resourceVersion are no longer in the log
        self._watchers: set[Watcher] = set()

    # -- reads ----------------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        return self._resource_version

    def get(self, resource: ResourceType, namespace: str, name: str) -> Stored:
        stored = self._objects[resource].get((namespace, name))
        if stored is None:
            raise not_found(resource, name)
        return stored

    def list(
        self,
        resource: ResourceType,
        namespace: str,
        labels: tuple[Requirement, ...] = (),
        fields: tuple[Requirement, ...] = (),
    ) -> tuple[list[Stored], int]:
        items = [
            stored
            for (ns, _), stored in sorted(self._objects[resource].items())
            if (not namespace or ns == namespace)
            and matches(labels, stored.labels)
            and matches(fields, stored.fields)
        ]
        return items, self._resource_version

    def count(self, resource: ResourceType) -> int:
        return len(self._objects[resource])

    # -- writes ---------------------------------------------------------------------------

    def create(self, resource: ResourceType, namespace: str, body: Any) -> Stored:
        """Create without admission webhooks: the steps below, one after another."""
        obj = self.prepare_create(resource, namespace, self.new_object(resource, namespace, body))
        return self.commit_create(resource, namespace, obj)

    def new_object(self, resource: ResourceType, namespace: str, body: Any) -> dict[str, Any]:
        """A create's object as admission first sees it: decoded and defaulted, its namespace
        existing (NamespaceLifecycle runs before the webhooks)."""
        if resource.namespaced:
            self._require_namespace(namespace, resource)
        obj = self._check_body(resource, namespace, body)
        default(resource, obj)
        return obj

    def prepare_create(
        self, resource: ResourceType, namespace: str, obj: dict[str, Any]
    ) -> dict[str, Any]:
        """What the apiserver does between mutating and validating admission (BeforeCreate): a
        name from generateName, the uid and timestamps, the kind's validation."""
        obj = self._check_body(resource, namespace, obj)
        metadata = obj["metadata"]
        name = metadata.get("name") or ""
        if not name:
            prefix = metadata.get("generateName")
            if not isinstance(prefix, str) or not prefix:
                raise invalid(
                    resource,
                    "",
                    "metadata.name",
                    "Required value: name or generateName is required",
                )
            name = self._generated_name(resource, namespace, prefix)
        self._check_name(resource, name)
        self._require_absent(resource, namespace, name)
        metadata.update(
            name=name, uid=str(uuid.uuid4()), creationTimestamp=now_rfc3339(), generation=1
        )
        metadata.pop("deletionTimestamp", None)
        if resource.namespaced:
            metadata["namespace"] = namespace
        else:
            metadata.pop("namespace", None)
        _prepare_for_create(resource, obj)
        return obj

    def commit_create(self, resource: ResourceType, namespace: str, obj: dict[str, Any]) -> Stored:
        name = obj["metadata"]["name"]
        self._require_absent(resource, namespace, name)  # another create may have landed
        if resource.namespaced:
            self._require_namespace(namespace, resource)
        return self._commit(resource, namespace, name, obj, None, "ADDED")

    def preview(
        self, resource: ResourceType, obj: dict[str, Any], current: Stored | None
    ) -> Stored:
        """A dry run's answer: the object as a commit would store it, stored nowhere (a create
        has no resourceVersion yet; an update keeps the current one)."""
        obj = copy.deepcopy(obj)
        obj["apiVersion"], obj["kind"] = resource.api_version, resource.kind
        _on_every_write(resource, obj)
        if current is None:
            obj["metadata"].pop("resourceVersion", None)
        return _stored(resource, obj, current.resource_version if current else 0)

    def update(
        self, resource: ResourceType, namespace: str, name: str, body: Any, subresource: str = ""
    ) -> Stored:
        current, obj = self.replacement(resource, namespace, name, body)
        return self.commit_update(
            resource,
            namespace,
            name,
            current,
            self.prepare_update(resource, namespace, name, current, obj, subresource),
        )

    def patch(
        self,
        resource: ResourceType,
        namespace: str,
        name: str,
        content_type: str,
        patch: Any,
        subresource: str = "",
    ) -> Stored:
        current, obj = self.patched(resource, namespace, name, content_type, patch)
        return self.commit_update(
            resource,
            namespace,
            name,
            current,
            self.prepare_update(resource, namespace, name, current, obj, subresource),
        )

    def replacement(
        self, resource: ResourceType, namespace: str, name: str, body: Any
    ) -> tuple[Stored, dict[str, Any]]:
        """An update's (current object, new object) as admission first sees them."""
        obj = self._check_body(resource, namespace, body)
        body_name = obj["metadata"].get("name")
        if body_name and body_name != name:
            raise ApiError(
                400,
                "BadRequest",
                f"the name of the object ({body_name}) does not match the name on the URL ({name})",
            )
        current = self.get(resource, namespace, name)
        default(resource, obj)
        return current, obj

    def patched(
        self, resource: ResourceType, namespace: str, name: str, content_type: str, patch: Any
    ) -> tuple[Stored, dict[str, Any]]:
        """A patch's (current object, patched object) as admission first sees them."""
        self.check_patch_type(resource, content_type)
        current = self.get(resource, namespace, name)
        base = current.object()
        try:
            if content_type == MERGE_PATCH:
                if not isinstance(patch, dict):
                    raise ApiError(400, "BadRequest", "a merge patch must be a JSON object")
                patched = apply_merge_patch(base, patch)
            elif content_type == JSON_PATCH:
                patched = apply_patch(base, patch)  # its bounds are kube-apiserver's
            else:
                patched = apply_strategic_merge_patch(base, patch)
        except JsonPatchTooLarge as exc:
            raise ApiError(413, "RequestEntityTooLarge", str(exc)) from None
        except (JsonPatchError, StrategicPatchError) as exc:
            raise ApiError(
                422 if isinstance(exc, JsonPatchError) else 400,
                "Invalid" if isinstance(exc, JsonPatchError) else "BadRequest",
                str(exc),
            ) from None
        obj = self._check_body(resource, namespace, patched)
        default(resource, obj)
        return current, obj

    def delete(
        self,
        resource: ResourceType,
        namespace: str,
        name: str,
        options: Mapping[str, Any] | None = None,
    ) -> Stored:
        current = self.before_delete(resource, namespace, name, options)
        obj = current.object()
        if resource.plural == "namespaces":
            return self._terminate_namespace(name, current)
        if obj["metadata"].get("finalizers"):
            if obj["metadata"].get("deletionTimestamp"):
                return current
            obj["metadata"]["deletionTimestamp"] = now_rfc3339()
            return self._commit(resource, namespace, name, obj, current, "MODIFIED")
        return self._remove(resource, namespace, name, current)

    def _terminate_namespace(self, name: str, current: Stored) -> Stored:
        """A deleted namespace turns Terminating (deletionTimestamp, phase Terminating, the
        `kubernetes` finalizer: Kubernetes pkg/registry/core/namespace/storage/storage.go
        Delete); the namespace controller then deletes its content and the namespace
        (pkg/controller/namespace/deletion/namespaced_resources_deleter.go). The sandbox plays
        that controller NAMESPACE_FINALIZE_AFTER seconds later on its event loop (at once where
        no loop runs), so a client deleting the namespace and its objects one by one, as
        `kubectl delete -k` does, finds them still there."""
        obj = current.object()
        if obj["metadata"].get("deletionTimestamp"):
            return current
        obj["metadata"]["deletionTimestamp"] = now_rfc3339()
        obj["spec"] = {**(obj.get("spec") or {}), "finalizers": ["kubernetes"]}
        obj["status"] = {"phase": "Terminating"}
        stored = self._commit(NAMESPACES, "", name, obj, current, "MODIFIED")
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._finalize_namespace(name, stored.uid)
            return stored
        loop.call_later(NAMESPACE_FINALIZE_AFTER, self._finalize_namespace, name, stored.uid)
        return stored

    def _finalize_namespace(self, name: str, uid: str) -> None:
        current = self._objects[NAMESPACES].get(("", name))
        if current is None or current.uid != uid:
            return
        self._delete_namespace_contents(name)
        obj = current.object()
        obj["spec"]["finalizers"] = []
        if obj["metadata"].get("finalizers"):  # another finalizer holds it: only ours is done
            self._commit(NAMESPACES, "", name, obj, current, "MODIFIED")
        else:
            self._remove(NAMESPACES, "", name, current)

    def delete_dependents(self, resource: ResourceType, namespace: str, owner_uid: str) -> None:
        """The garbage collector's part for a deleted owner, done at once: its dependents of
        `resource` (ownerReferences naming its uid) go with it."""
        for (ns, name), stored in list(self._objects[resource].items()):
            if ns != namespace or owner_uid.encode() not in stored.raw:
                continue  # a cheap test first: a namespace may hold 100k pods
            references = stored.object()["metadata"].get("ownerReferences") or []
            if any(r.get("uid") == owner_uid for r in references):
                self._remove(resource, ns, name, stored)

    def before_delete(
        self,
        resource: ResourceType,
        namespace: str,
        name: str,
        options: Mapping[str, Any] | None = None,
    ) -> Stored:
        """The object to delete, its DeleteOptions preconditions met (checked before the
        validating webhooks, as the apiserver's BeforeDelete does)."""
        current = self.get(resource, namespace, name)
        preconditions = (options or {}).get("preconditions") or {}
        self._check_preconditions(
            resource, name, current, preconditions.get("uid"), preconditions.get("resourceVersion")
        )
        return current

    def bind(self, namespace: str, name: str, binding: Any) -> None:
        pods = served("", "v1", "pods")
        current = self.get(pods, namespace, name)
        target = binding.get("target") if isinstance(binding, dict) else None
        node = target.get("name") if isinstance(target, dict) else None
        if not isinstance(node, str) or not node:
            raise invalid(pods, name, "target.name", "Required value")
        pod = current.object()
        if pod["spec"].get("nodeName"):
            raise ApiError(
                409,
                "Conflict",
                f'pod {name} is already assigned to node "{pod["spec"]["nodeName"]}"',
            )
        pod["spec"]["nodeName"] = node
        conditions = pod.setdefault("status", {}).setdefault("conditions", [])
        conditions.append(
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": now_rfc3339()}
        )
        self._commit(pods, namespace, name, pod, current, "MODIFIED")

    # -- watch ----------------------------------------------------------------------------

    def watch(
        self,
        resource: ResourceType,
        namespace: str,
        since: int | None,
        labels: tuple[Requirement, ...] = (),
        fields: tuple[Requirement, ...] = (),
    ) -> Watcher:
        """A watcher primed with every event after `since` (None: the current objects as
        ADDED); ApiError 410 if events after `since` have left the log."""
        watcher = Watcher(resource, namespace, labels, fields)
        if since is None:
            items, _ = self.list(resource, namespace, labels, fields)
            for stored in items:
                watcher.put(encode_event("ADDED", stored.raw))
        else:
            if since < self._evicted_upto:
                raise ApiError(
                    410, "Expired", f"too old resource version: {since} ({self._evicted_upto + 1})"
                )
            for event in self._log:
                if event.resource_version > since:
                    watcher.offer(event)
        self._watchers.add(watcher)
        return watcher

    def stop_watch(self, watcher: Watcher) -> None:
        self._watchers.discard(watcher)
        watcher.close()

    @property
    def open_watches(self) -> int:
        return len(self._watchers)

    def close_all_watches(self) -> None:
        for watcher in list(self._watchers):
            self.stop_watch(watcher)

    # -- internals ------------------------------------------------------------------------

    def prepare_update(
        self,
        resource: ResourceType,
        namespace: str,
        name: str,
        current: Stored,
        obj: dict[str, Any],
        subresource: str,
    ) -> dict[str, Any]:
        """What the apiserver does between mutating and validating admission (BeforeUpdate):
        preconditions, then what the client may not change (status through the main resource,
        uid, timestamps) kept from the current object, and the generation bumped on a spec
        change."""
        obj = self._check_body(resource, namespace, obj)
        metadata = obj["metadata"]
        self._check_preconditions(
            resource,
            name,
            current,
            metadata.get("uid"),
            metadata.get("resourceVersion"),
            conflict=True,
        )
        old = current.object()  # a fresh decode, ours to change
        if subresource == "status":
            new = old
            if "status" in obj:
                new["status"] = obj["status"]
            else:
                new.pop("status", None)
        else:
            new = obj
            if resource.status_subresource:
                # Writes to the main resource never change status where /status exists.
                if "status" in old:
                    new["status"] = old["status"]
                else:
                    new.pop("status", None)
            for key in ("uid", "creationTimestamp", "deletionTimestamp", "generation"):
                if key in old["metadata"]:
                    new["metadata"][key] = old["metadata"][key]
                else:
                    new["metadata"].pop(key, None)
            new["metadata"]["name"] = name
            if resource.namespaced:
                new["metadata"]["namespace"] = namespace
            if _spec(new) != _spec(old):
                new["metadata"]["generation"] = old["metadata"].get("generation", 1) + 1
        new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        return new

    def commit_update(
        self,
        resource: ResourceType,
        namespace: str,
        name: str,
        current: Stored,
        new: dict[str, Any],
    ) -> Stored:
        """Store new in place of current; Stale if the object changed since current was read
        (the caller retries, as the apiserver's GuaranteedUpdate does)."""
        if self._objects[resource].get((namespace, name)) is not current:
            raise Stale()
        if new == current.object():
            return current  # a no-op write changes nothing, not even the resourceVersion
        if new["metadata"].get("deletionTimestamp") and not _finalizers(new):
            return self._remove(resource, namespace, name, current)
        return self._commit(resource, namespace, name, new, current, "MODIFIED")

    def _check_preconditions(
        self,
        resource: ResourceType,
        name: str,
        current: Stored,
        uid: Any,
        resource_version: Any,
        conflict: bool = False,
    ) -> None:
        if uid and uid != current.uid:
            raise ApiError(
                409,
                "Conflict",
                f"Precondition failed: UID in precondition: {uid}, "
                f"UID in object meta: {current.uid}",
                {"name": name, "group": resource.group, "kind": resource.plural},
            )
        if resource_version and str(resource_version) != str(current.resource_version):
            if conflict:
                raise ApiError(
                    409,
                    "Conflict",
                    f"Operation cannot be fulfilled on {_qualified(resource)} "
                    f'"{name}": {CONFLICT_MESSAGE}',
                    {"name": name, "group": resource.group, "kind": resource.plural},
                )
            raise ApiError(
                409,
                "Conflict",
                "Precondition failed: ResourceVersion in "
                f"precondition: {resource_version}, ResourceVersion in object meta: "
                f"{current.resource_version}",
                {"name": name, "group": resource.group, "kind": resource.plural},
            )

    def _commit(
        self,
        resource: ResourceType,
        namespace: str,
        name: str,
        obj: dict[str, Any],
        old: Stored | None,
        kind: str,
    ) -> Stored:
        self._resource_version += 1
        obj["metadata"]["resourceVersion"] = str(self._resource_version)
        obj["apiVersion"], obj["kind"] = resource.api_version, resource.kind
        _on_every_write(resource, obj)
        stored = _stored(resource, obj, self._resource_version)
        self._objects[resource][(namespace, name)] = stored
        self._publish(Event(self._resource_version, kind, resource, namespace, stored, old))
        return stored

    def _remove(self, resource: ResourceType, namespace: str, name: str, current: Stored) -> Stored:
        del self._objects[resource][(namespace, name)]
        self._resource_version += 1
        obj = current.object()
        obj["metadata"]["resourceVersion"] = str(self._resource_version)
        stored = _stored(resource, obj, self._resource_version)
        self._publish(Event(self._resource_version, "DELETED", resource, namespace, stored))
        return stored

    def _publish(self, event: Event) -> None:
        if len(self._log) == self._log.maxlen:
            self._evicted_upto = self._log[0].resource_version
        self._log.append(event)
        for watcher in list(self._watchers):
            watcher.offer(event)
            if watcher.closed:
                self._watchers.discard(watcher)

    def _delete_namespace_contents(self, namespace: str) -> None:
        for resource in RESOURCES:
            if resource.namespaced:
                for (ns, name), stored in list(self._objects[resource].items()):
                    if ns == namespace:
                        self._remove(resource, ns, name, stored)

    def _check_body(self, resource: ResourceType, namespace: str, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", f"the body is not a {resource.kind} object")
        obj = copy.deepcopy(body)
        kind, api_version = obj.get("kind"), obj.get("apiVersion")
        if kind not in (None, resource.kind):
            raise ApiError(
                400,
                "BadRequest",
                f"the kind in the body ({kind}) does not match "
                f"the resource {resource.plural} ({resource.kind})",
            )
        if api_version not in (None, resource.api_version):
            raise ApiError(
                400,
                "BadRequest",
                f"the API version in the data ({api_version}) "
                f"does not match the expected API version ({resource.api_version})",
            )
        metadata = obj.setdefault("metadata", {})
        if not isinstance(metadata, dict):
            raise invalid(resource, "", "metadata", "Invalid value: must be an object")
        body_namespace = metadata.get("namespace")
        if resource.namespaced and body_namespace and body_namespace != namespace:
            raise ApiError(
                400,
                "BadRequest",
                "the namespace of the provided object does not "
                "match the namespace sent on the request",
            )
        for key in ("labels", "annotations"):
            value = metadata.get(key)
            if value is not None and (
                not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values())
            ):
                raise invalid(
                    resource,
                    str(metadata.get("name", "")),
                    f"metadata.{key}",
                    "Invalid value: must be a map of strings",
                )
        if "spec" in obj and not isinstance(obj["spec"], dict | type(None)):
            raise invalid(
                resource, str(metadata.get("name", "")), "spec", "Invalid value: must be an object"
            )
        if "status" in obj and not isinstance(obj["status"], dict | type(None)):
            raise invalid(
                resource,
                str(metadata.get("name", "")),
                "status",
                "Invalid value: must be an object",
            )
        if resource.kind == "Pod":
            _check_pod(resource, metadata, obj)
        return obj

    def _generated_name(self, resource: ResourceType, namespace: str, prefix: str) -> str:
        """prefix and 5 random characters of the apiserver's alphabet (apimachinery
        util/rand.String), tried again on a name in use as the apiserver retries (KEP-4420)."""
        for _ in range(GENERATE_NAME_ATTEMPTS):
            name = prefix + "".join(secrets.choice(_NAME_ALPHABET) for _ in range(5))
            if (namespace, name) not in self._objects[resource]:
                return name
        return name  # the create then fails with AlreadyExists, as the apiserver's does

    def _require_absent(self, resource: ResourceType, namespace: str, name: str) -> None:
        if (namespace, name) in self._objects[resource]:
            raise ApiError(
                409,
                "AlreadyExists",
                f'{_qualified(resource)} "{name}" already exists',
                {"name": name, "group": resource.group, "kind": resource.plural},
            )

    def _check_name(self, resource: ResourceType, name: str) -> None:
        problem = dns1123_subdomain_problem(name)
        if problem:
            raise invalid(resource, name, "metadata.name", f'Invalid value: "{name}": {problem}')

    def _require_namespace(self, namespace: str, resource: ResourceType | None = None) -> None:
        if not namespace:
            raise ApiError(400, "BadRequest", "a namespace is required for this resource")
        stored = self._objects[NAMESPACES].get(("", namespace))
        terminating = stored is not None and stored.fields.get("status.phase") == "Terminating"
        if terminating and resource is not None:
            # Kubernetes plugin/pkg/admission/namespace/lifecycle admission.go Admit
            raise ApiError(
                403,
                "Forbidden",
                f"{_qualified(resource)} is forbidden: unable to create new content in "
                f"namespace {namespace} because it is being terminated",
                {
                    "kind": resource.plural,
                    "causes": [
                        {
                            "reason": "NamespaceTerminating",
                            "message": f"namespace {namespace} is being terminated",
                            "field": "metadata.namespace",
                        }
                    ],
                },
            )
        if stored is None:
            raise ApiError(
                404,
                "NotFound",
                f'namespaces "{namespace}" not found',
                {"name": namespace, "kind": "namespaces"},
            )

    @staticmethod
    def check_patch_type(resource: ResourceType, content_type: str) -> None:
        """415 for a patch type this resource does not accept (server-side apply included)."""
        accepted = [JSON_PATCH, MERGE_PATCH, APPLY_PATCH] + (
            [STRATEGIC_PATCH] if resource.strategic_merge else []
        )
        if content_type not in accepted:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media "
                f"types include: {', '.join(accepted)}",
            )


def not_found(resource: ResourceType, name: str) -> ApiError:
    return ApiError(
        404,
        "NotFound",
        f'{_qualified(resource)} "{name}" not found',
        {"name": name, "group": resource.group, "kind": resource.plural},
    )


def invalid(resource: ResourceType, name: str, field_path: str, detail: str) -> ApiError:
    return invalid_fields(resource, name, [(field_path, detail)])


def invalid_fields(
    resource: ResourceType, name: str, errors: list[tuple[str, str]], shown_kind: str = ""
) -> ApiError:
    """NewInvalid: `KIND "NAME" is invalid: FIELD: DETAIL` (several in brackets, comma
    separated), each error a cause kubectl lists; shown_kind in place of the kind (a custom
    resource's is qualified by its group: `Queue.scheduling.volcano.sh`)."""
    listed = [f"{field_path}: {detail}" for field_path, detail in errors]
    joined = listed[0] if len(listed) == 1 else f"[{', '.join(listed)}]"
    return ApiError(
        422,
        "Invalid",
        f'{shown_kind or resource.kind} "{name}" is invalid: {joined}',
        {
            "name": name,
            "group": resource.group,
            "kind": resource.kind,
            "causes": [
                {"reason": "FieldValueInvalid", "message": detail, "field": field_path}
                for field_path, detail in errors
            ],
        },
    )


def _qualified(resource: ResourceType) -> str:
    return f"{resource.plural}.{resource.group}" if resource.group else resource.plural


def _as_map(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _finalizers(obj: dict[str, Any]) -> list[Any]:
    """What holds a deleted object: metadata.finalizers, and a Namespace's spec.finalizers."""
    spec = _as_map(obj.get("spec"))
    held = list(obj["metadata"].get("finalizers") or [])
    if obj.get("kind") == "Namespace":
        held += spec.get("finalizers") or []
    return held


def _spec(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


def _check_pod(resource: ResourceType, metadata: dict[str, Any], obj: dict[str, Any]) -> None:
    spec = obj.get("spec")
    name = str(metadata.get("name", ""))
    containers = spec.get("containers") if isinstance(spec, dict) else None
    if not isinstance(containers, list) or not containers:
        raise invalid(resource, name, "spec.containers", "Required value")
    for i, container in enumerate(containers):
        if not isinstance(container, dict) or not isinstance(container.get("name"), str):
            raise invalid(resource, name, f"spec.containers[{i}].name", "Required value")


def default(resource: ResourceType, obj: dict[str, Any]) -> None:
    """The defaulting the apiserver applies when it decodes an object (and again after each
    mutating webhook's patch): k8s.io/kubernetes pkg/apis/core/v1 defaults.go; a custom
    resource held to its CRD's schema is pruned and defaulted by it (crd_schemas.py)."""
    schema = crd_schemas.schema_of(resource)
    if schema is not None:
        crd_schemas.prune(schema, obj)
        crd_schemas.apply_defaults(schema, obj)
    if resource.kind == "Namespace" and obj["metadata"].get("name"):
        labels = obj["metadata"].get("labels")
        obj["metadata"]["labels"] = {
            **(labels if isinstance(labels, dict) else {}),
            "kubernetes.io/metadata.name": obj["metadata"]["name"],
        }
    spec = obj.get("spec")
    if resource.kind == "Pod" and isinstance(spec, dict):
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("restartPolicy", "Always")
        for key in ("initContainers", "containers"):
            for container in spec.get(key) or []:
                if isinstance(container, dict):
                    _copy_limits_into_requests(container)


def _prepare_for_create(resource: ResourceType, obj: dict[str, Any]) -> None:
    """The kind's strategy on create: status is the server's, except a Node's (the kubelet
    registers its node with its status: nodeStrategy.PrepareForCreate keeps it)."""
    if resource.status_subresource and resource.kind != "Node":
        obj.pop("status", None)
    if resource.kind == "Namespace":
        obj["status"] = {"phase": "Active"}
    if resource.kind == "Pod":
        obj["status"] = {"phase": "Pending"}
    if (resource.group, resource.kind) == ("batch", "Job"):
        _generate_job_selector(obj)


def _generate_job_selector(job: dict[str, Any]) -> None:
    """A Job's selector and its template's labels, from its uid unless spec.manualSelector
    (Kubernetes pkg/registry/batch/job/strategy.go generateSelectorIfNeeded, generateSelector)."""
    spec = job.get("spec")
    if not isinstance(spec, dict) or spec.get("manualSelector") is True:
        return
    uid, name = job["metadata"]["uid"], job["metadata"]["name"]
    template = spec.setdefault("template", {})
    metadata = template.setdefault("metadata", {}) if isinstance(template, dict) else None
    if not isinstance(metadata, dict):
        return
    labels = _as_map(metadata.get("labels"))
    metadata["labels"] = {  # a label the user set stays (validation then judges it)
        "batch.kubernetes.io/controller-uid": uid,
        "batch.kubernetes.io/job-name": name,
        "controller-uid": uid,
        "job-name": name,
        **labels,
    }
    selector = _as_map(spec.get("selector"))
    match_labels = _as_map(selector.get("matchLabels"))
    match_labels.setdefault("batch.kubernetes.io/controller-uid", uid)
    spec["selector"] = {**selector, "matchLabels": match_labels}


def _on_every_write(resource: ResourceType, obj: dict[str, Any]) -> None:
    """What the apiserver's strategies do on create and update: a namespace carries its name
    as a label; a Secret's stringData is merged into data (base64) and never stored. And the
    Deployment controller's part, played at once: see _roll_out."""
    if (resource.group, resource.kind) == ("apps", "Deployment"):
        _roll_out(obj)
    if resource.kind == "Namespace":
        labels = obj["metadata"].setdefault("labels", {})
        labels["kubernetes.io/metadata.name"] = obj["metadata"]["name"]
    if resource.kind == "Secret" and isinstance(obj.get("stringData"), dict):
        data = obj["data"] if isinstance(obj.get("data"), dict) else {}
        for key, value in obj.pop("stringData").items():
            data[key] = base64.b64encode(str(value).encode()).decode("ascii")
        obj["data"] = data


def _roll_out(deployment: dict[str, Any]) -> None:
    """The sandbox runs no Deployment controller and no pods: a Deployment whose generation
    the status has not observed is reported rolled out at once, every replica updated and
    available, so `kubectl rollout status` ends (Kubernetes staging/src/k8s.io/kubectl/pkg/
    polymorphichelpers/rollout_status.go DeploymentStatusViewer.Status reads these fields)."""
    generation = deployment["metadata"].get("generation", 1)
    if _as_map(deployment.get("status")).get("observedGeneration") == generation:
        return
    replicas = _as_map(deployment.get("spec")).get("replicas", 1)
    now = now_rfc3339()
    deployment["status"] = {
        "observedGeneration": generation,
        "replicas": replicas,
        "updatedReplicas": replicas,
        "readyReplicas": replicas,
        "availableReplicas": replicas,
        "conditions": [
            {
                "type": "Available",
                "status": "True",
                "reason": "MinimumReplicasAvailable",
                "message": "the sandbox plays the Deployment controller: no pods run",
                "lastUpdateTime": now,
                "lastTransitionTime": now,
            },
            {
                "type": "Progressing",
                "status": "True",
                "reason": "NewReplicaSetAvailable",
                "message": "the sandbox plays the Deployment controller: no pods run",
                "lastUpdateTime": now,
                "lastTransitionTime": now,
            },
        ],
    }


def _copy_limits_into_requests(container: dict[str, Any]) -> None:
    resources = container.get("resources")
    if not isinstance(resources, dict) or not isinstance(resources.get("limits"), dict):
        return
    requests = resources.setdefault("requests", {})
    if isinstance(requests, dict):
        for name, value in resources["limits"].items():
            requests.setdefault(name, value)


def _stored(resource: ResourceType, obj: dict[str, Any], resource_version: int) -> Stored:
    metadata = obj["metadata"]
    labels = metadata.get("labels") or {}
    fields = {
        path: _field(obj, path) for path in SELECTABLE_FIELDS.get(resource.plural, _COMMON_FIELDS)
    }
    # A copy: orjson's own bytes keep their ~4 KiB buffer, triple a stored pod's memory.
    raw = bytes(memoryview(orjson.dumps(obj)))
    return Stored(raw, resource_version, metadata["uid"], labels, fields)


def _field(obj: dict[str, Any], path: str) -> str:
    node: Any = obj
    for key in path.split("."):
        node = node.get(key) if isinstance(node, dict) else None
    if isinstance(node, bool):
        return "true" if node else "false"
    return "" if node is None else str(node)
