"""The coalescer: status writes in, one UID-guarded merge patch per object out.

Pure state and decisions over plain data, no I/O and no clock of its own (callers pass `now`),
so it is tested without HTTP. Owned by one event loop: the proxy calls absorb/observe, the
flusher calls due/plan/complete, and none of them awaits.

The writer's intent is a three-way diff with sticky field ownership: a top-level
status field becomes owned, per resource type, the first time one of this writer's writes
changes it relative to the version the write was based on. Every later write carries intent
for every owned field, even one equal to its stale base, so A -> B -> A is not lost; fields
never owned are never sent, so a stale copy of another writer's field never overwrites it.
"""

from __future__ import annotations

import copy
import random
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from volcano_guard.base.jsonbody import object_at
from volcano_guard.base.jsonpatch import JsonPatchError, JsonPatchTooLarge, apply_patch
from volcano_guard.base.mergepatch import apply_merge_patch
from volcano_guard.base.status import status_body

HISTORY_SIZE = 32  # versions remembered per object: a writer's base is rarely older


class _Deleted:
    def __repr__(self) -> str:
        return "DELETE"


DELETE: Any = _Deleted()  # an intent to remove a status field (null in the merge patch)
_MISSING: Any = object()


@dataclass(frozen=True)
class ObjectKey:
    resource: str  # group/version/plural, e.g. scheduling.volcano.sh/v1beta1/queues
    namespace: str
    name: str

    def __str__(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.resource.rsplit('/', 1)[-1]}/{where}"


@dataclass(frozen=True)
class StatusWrite:
    key: ObjectKey
    kind: str  # put | merge | json | apply
    body: Any
    field_manager: str = ""


class Passthrough(Exception):
    """Nothing to coalesce with: forward this write unchanged, as without the sidecar."""


class Backpressure(Exception):
    """Too many objects pending: answer 429 with Retry-After."""


class BadWrite(ValueError):
    """The write cannot be applied (e.g. a JSON patch that does not apply): answer code, 422
    unless kube-apiserver would say otherwise (413 for too many operations)."""

    def __init__(self, message: str, code: int = 422) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class Known:
    """The last server state seen for one object, and a short history of its versions."""

    obj: dict[str, Any]
    resource_version: int
    uid: str
    history: OrderedDict[str, dict[str, Any]] = field(default_factory=OrderedDict)

    @property
    def status(self) -> dict[str, Any]:
        return object_at(self.obj, "status")


@dataclass
class Pending:
    uid: str
    intent: dict[str, Any]
    first_at: float
    next_at: float
    version: int = 0
    attempts: int = 0
    in_flight: bool = False
    waiters: list[Any] = field(default_factory=list)


@dataclass(frozen=True)
class FlushPlan:
    key: ObjectKey
    uid: str
    patch: dict[str, Any]
    version: int
    waiters: tuple[Any, ...]
    first_at: float


@dataclass(frozen=True)
class Absorbed:
    """The answer for an absorbed write: the object as the server will hold it; and when the
    write was for a new incarnation of its object, the old one's pending writers to answer."""

    obj: dict[str, Any]
    superseded: Settled | None = None


@dataclass(frozen=True)
class Settled:
    """What became of a flush or a planned no-op: who to answer, and with what."""

    waiters: tuple[Any, ...]
    code: int
    obj: dict[str, Any] | None
    outcome: str  # written | noop | stale | retry | failed


@dataclass
class Counters:
    absorbed: int = 0
    noop_skipped: int = 0
    stale_dropped: int = 0
    conflicts: int = 0


class Coalescer:
    def __init__(
        self, flush_interval: float, max_pending: int, rng: random.Random | None = None
    ) -> None:
        self.flush_interval = flush_interval
        self.max_pending = max_pending
        self.counters = Counters()
        self._known: dict[ObjectKey, Known] = {}
        self._pending: dict[ObjectKey, Pending] = {}
        self._owned: dict[str, set[str]] = {}  # resource -> owned top-level status fields
        self._applied: dict[tuple[ObjectKey, str], frozenset[str]] = {}  # SSA manager fields
        self._last_flush: dict[ObjectKey, float] = {}
        self._rng = rng or random.Random()

    # -- what passes through -------------------------------------------------------------

    def observe(self, key: ObjectKey, obj: Any) -> None:
        """An object version seen upstream (GET, LIST, WATCH, a write's response)."""
        if not isinstance(obj, dict):
            return
        metadata = obj.get("metadata")
        if not isinstance(metadata, dict):
            return
        uid, text = metadata.get("uid"), metadata.get("resourceVersion")
        if not isinstance(uid, str) or not isinstance(text, str) or not text.isdigit():
            return
        version = int(text)
        known = self._known.get(key)
        if known is not None and known.uid != uid and version < known.resource_version:
            return  # an older incarnation's (a late answer to its flush): nothing of this one
        if known is None or known.uid != uid or version >= known.resource_version:
            history = known.history if known is not None and known.uid == uid else OrderedDict()
            known = Known(copy.deepcopy(obj), version, uid, history)
            self._known[key] = known
        status = obj.get("status")
        known.history[text] = copy.deepcopy(status) if isinstance(status, dict) else {}
        known.history.move_to_end(text)
        while len(known.history) > HISTORY_SIZE:
            known.history.popitem(last=False)

    def forget(self, key: ObjectKey) -> None:
        """The object was deleted upstream; a pending write for it fails its UID guard. What
        is kept for it goes too: a sidecar lives as long as its pod, through many Queues."""
        self._known.pop(key, None)
        self._last_flush.pop(key, None)
        for applied in [k for k in self._applied if k[0] == key]:
            del self._applied[applied]

    # -- writes -------------------------------------------------------------------------

    def absorb(self, write: StatusWrite, now: float, waiter: Any = None) -> Absorbed:
        if write.kind != "json" and not _object_shaped(write.body, write.key.name):
            raise Passthrough()  # the API server's own 400 or 422 says what is wrong
        known = self._known.get(write.key)
        owned = self._owned.setdefault(write.key.resource, set())
        body = write.body if isinstance(write.body, dict) else {}
        uid = object_at(body, "metadata").get("uid")
        uid = uid if isinstance(uid, str) else ""
        uid = uid or (known.uid if known else "")
        claimed = set(owned)  # what the writer will own: taken once the write is
        intent = self._intent(write, known, claimed, body)
        if not uid:
            raise Passthrough()  # no UID to guard the write with
        if not intent:
            self._take(write, claimed, body)
            self.counters.noop_skipped += 1  # it changes nothing this writer means to change
            return Absorbed(self.view(write.key, body))
        superseded = self._supersede(write.key, uid)
        pending = self._pending_for(write.key, uid, now)  # Backpressure: nothing taken
        self._take(write, claimed, body)
        pending.intent.update(intent)
        pending.version += 1
        if waiter is not None:
            pending.waiters.append(waiter)
        self.counters.absorbed += 1
        return Absorbed(self.view(write.key, body), superseded)

    def _intent(
        self, write: StatusWrite, known: Known | None, owned: set[str], body: dict[str, Any]
    ) -> dict[str, Any]:
        if write.kind == "put":
            return _put_intent(body, known, owned)
        if write.kind == "merge":
            view = self._effective_status(write.key)
            status = body.get("status")
            if status is None and "status" in body:  # null: every field removed
                status = dict.fromkeys(view)
            if not isinstance(status, dict):
                raise Passthrough()  # no status to write: the server's answer says what it does
            owned.update(status)
            return {
                f: DELETE if v is None else apply_merge_patch(view.get(f), v)
                for f, v in status.items()
            }
        if write.kind == "json":
            if known is None:
                raise Passthrough()
            before = self.view(write.key, {})
            try:
                after = apply_patch(before, write.body)
            except JsonPatchError as exc:
                raise BadWrite(
                    str(exc), 413 if isinstance(exc, JsonPatchTooLarge) else 422
                ) from None
            if not isinstance(after, dict):  # e.g. {"op": "add", "path": "", "value": null}
                raise BadWrite("the patch replaces the object with a non-object")
            old, new = object_at(before, "status"), object_at(after, "status")
            changed = {
                f for f in old.keys() | new.keys() if old.get(f, _MISSING) != new.get(f, _MISSING)
            }
            owned.update(changed)
            return {f: new.get(f, DELETE) for f in changed}
        # server-side apply: the manager's newest declaration wins; fields it stops
        # declaring are removed, as apply removes fields it alone owned.
        status = object_at(body, "status")
        previous = self._applied.get((write.key, write.field_manager), frozenset())
        owned.update(status)
        intent = {f: DELETE for f in previous - status.keys()}
        intent.update(status)
        return intent

    def _take(self, write: StatusWrite, claimed: set[str], body: dict[str, Any]) -> None:
        """The write is taken: what it claims is owned from now on, and an apply's fields are
        its manager's newest declaration. A write refused (429) takes nothing, so its retry
        finds the state it was refused in."""
        self._owned[write.key.resource] = claimed
        if write.kind == "apply":
            self._applied[(write.key, write.field_manager)] = frozenset(object_at(body, "status"))

    def _supersede(self, key: ObjectKey, uid: str) -> Settled | None:
        """A write for another incarnation: the old one's intent must never reach the new one.
        It is dropped, its sync-ack writers answered 409 as its flush would have been; while
        that flush is in flight, the new write goes to the server itself (one flight a key)."""
        pending = self._pending.get(key)
        if pending is None or pending.uid == uid:
            return None
        if pending.in_flight:
            raise Passthrough()
        self.counters.stale_dropped += 1
        del self._pending[key]
        message = f"{key} was deleted and created again; the write to the old one is dropped"
        return Settled(tuple(pending.waiters), 409, status_body(409, message), "stale")

    def _pending_for(self, key: ObjectKey, uid: str, now: float) -> Pending:
        pending = self._pending.get(key)
        if pending is None:
            if len(self._pending) >= self.max_pending:
                raise Backpressure()
            # Flush at the end of the object's window, so every write in it rides along.
            earliest = self._last_flush.get(key, float("-inf")) + self.flush_interval
            pending = Pending(
                uid, {}, first_at=now, next_at=max(now + self.flush_interval, earliest)
            )
            self._pending[key] = pending
        return pending

    def view(self, key: ObjectKey, fallback: dict[str, Any]) -> dict[str, Any]:
        """The object as the server will hold it: last known state with intent applied."""
        known = self._known.get(key)
        obj = copy.deepcopy(known.obj if known else fallback)
        status = self._effective_status(key)
        if status:
            obj["status"] = status
        return obj

    def _effective_status(self, key: ObjectKey) -> dict[str, Any]:
        known = self._known.get(key)
        status = copy.deepcopy(known.status) if known else {}
        pending = self._pending.get(key)
        if pending is not None:
            for name, value in pending.intent.items():
                if value is DELETE:
                    status.pop(name, None)
                else:
                    status[name] = copy.deepcopy(value)
        return status

    # -- flushing -----------------------------------------------------------------------

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    def pending_keys(self) -> list[ObjectKey]:
        return list(self._pending)

    def is_pending(self, key: ObjectKey) -> bool:
        return key in self._pending

    def due(self, now: float, *, all_pending: bool = False) -> list[ObjectKey]:
        """Objects whose flush is due, oldest first (all of them when draining)."""
        ready = [
            (p.first_at, key)
            for key, p in self._pending.items()
            if not p.in_flight and (all_pending or p.next_at <= now)
        ]
        return [key for _, key in sorted(ready, key=lambda item: item[0])]

    def next_due_at(self) -> float | None:
        times = [p.next_at for p in self._pending.values() if not p.in_flight]
        return min(times) if times else None

    def plan(self, key: ObjectKey) -> FlushPlan | Settled:
        """The merge patch to send, or Settled('noop') when the server already agrees."""
        pending = self._pending[key]
        known = self._known.get(key)
        server = known.status if known is not None and known.uid == pending.uid else None
        changes = dict(_changes(pending.intent, server))
        if not changes:
            del self._pending[key]
            self.counters.noop_skipped += 1
            obj = copy.deepcopy(known.obj) if known is not None else None
            return Settled(tuple(pending.waiters), 200, obj, "noop")
        pending.in_flight = True
        waiters, pending.waiters = tuple(pending.waiters), []
        patch = {"metadata": {"uid": pending.uid}, "status": changes}
        return FlushPlan(key, pending.uid, patch, pending.version, waiters, pending.first_at)

    def complete(
        self, plan: FlushPlan, code: int, obj: Any, now: float, retry_after: float | None = None
    ) -> Settled:
        """Record the upstream answer to plan (code 0: no answer, e.g. a timeout)."""
        pending = self._pending.get(plan.key)
        if pending is not None and pending.uid != plan.uid:
            pending = None  # another incarnation's: this answer says nothing of it
        if 200 <= code < 300:
            self.observe(plan.key, obj)
            self._last_flush[plan.key] = now
            self._retry_backed_off(now)  # the upstream answers again
            if pending is not None and pending.version == plan.version:
                del self._pending[plan.key]
            elif pending is not None:  # newer intent arrived while this flush was in flight
                pending.in_flight = False
                pending.attempts = 0
                pending.next_at = now + self.flush_interval
            return Settled(plan.waiters, code, obj, "written")
        if code in (404, 409):
            # Replaced or deleted (UID precondition failed): never write onto the new one.
            self.counters.stale_dropped += 1
            if code == 409:
                self.counters.conflicts += 1
            if pending is not None and pending.uid == plan.uid:
                del self._pending[plan.key]
                return Settled(plan.waiters + tuple(pending.waiters), code, obj, "stale")
            return Settled(plan.waiters, code, obj, "stale")
        if pending is None:
            return Settled(plan.waiters, code, obj, "failed")
        if code == 0 or code == 429 or code >= 500:
            pending.in_flight = False
            pending.attempts += 1
            pending.waiters = list(plan.waiters) + pending.waiters
            pending.next_at = now + self.backoff(pending.attempts, retry_after)
            return Settled((), code, obj, "retry")
        del self._pending[plan.key]  # another client error (e.g. 422): it will not heal
        return Settled(plan.waiters + tuple(pending.waiters), code, obj, "failed")

    def backing_off(self) -> list[ObjectKey]:
        """Objects waiting out a backoff after failed writes, oldest pending first."""
        waiting = [
            (p.first_at, key) for key, p in self._pending.items() if p.attempts and not p.in_flight
        ]
        return [key for _, key in sorted(waiting, key=lambda item: item[0])]

    def _retry_backed_off(self, now: float) -> None:
        for pending in self._pending.values():
            if pending.attempts and not pending.in_flight:
                pending.attempts = 0
                pending.next_at = min(pending.next_at, now)

    def backoff(self, attempts: int, retry_after: float | None = None) -> float:
        """Exponential backoff with equal jitter (a delay drawn from the upper half of the
        ceiling), at least Retry-After when the server says."""
        ceiling = min(self.flush_interval * 2**attempts, 30.0)
        delay = self._rng.uniform(ceiling / 2, ceiling)
        return max(delay, retry_after or 0.0)


def _object_shaped(body: Any, name: str) -> bool:
    """A body the coalescer can read as a Queue: an object, its metadata an object naming the
    URL's object (or no name), its status an object, null or absent. Read otherwise (a list, a
    string status), it would ask to delete every field a writer owns."""
    if not isinstance(body, dict):
        return False
    metadata, status = body.get("metadata", {}), body.get("status")
    if not isinstance(metadata, dict) or metadata.get("name", name) not in (name, ""):
        return False
    return status is None or isinstance(status, dict)


def _put_intent(body: dict[str, Any], known: Known | None, owned: set[str]) -> dict[str, Any]:
    written = object_at(body, "status")
    version = object_at(body, "metadata").get("resourceVersion")
    base = known.history.get(version) if known is not None and isinstance(version, str) else None
    if base is None and not owned:
        raise Passthrough()  # nothing known to diff against and nothing owned yet
    if base is None and _changes_unowned(written, known, owned):
        raise Passthrough()  # a change, or a stale copy? The API server's answer tells
    if base is not None:
        for name in written.keys() | base.keys():
            # null is absent: a Go writer sends a nil field without omitempty (v1beta1
            # QueueStatus.allocated) as null, and the API server prunes it from a CRD.
            if written.get(name) != base.get(name):
                owned.add(name)
    return {
        name: DELETE if written.get(name) is None else copy.deepcopy(written[name])
        for name in owned
    }


def _changes_unowned(written: dict[str, Any], known: Known | None, owned: set[str]) -> bool:
    """Whether a write whose base is unknown differs from the known status in a field the
    writer does not own: taken, only its owned fields would be, and the change dropped."""
    current = known.status if known is not None else {}
    unowned = (written.keys() | current.keys()) - owned
    return any(written.get(name) != current.get(name) for name in unowned)


def _changes(intent: dict[str, Any], server: dict[str, Any] | None) -> Iterator[tuple[str, Any]]:
    for name, value in intent.items():
        current = _MISSING if server is None else server.get(name, _MISSING)
        if value is DELETE:
            if server is None or current is not _MISSING:
                yield name, None
        elif current != value:
            yield name, _replacing(current, value)


def _replacing(current: Any, value: Any) -> Any:
    """The merge patch value that turns current into value. A merge patch merges nested
    objects, so a key current has and value lacks (the GPUs an `allocated` no longer holds)
    is sent as null, or it would stay on the server."""
    if not isinstance(current, dict) or not isinstance(value, dict):
        return value
    patch = {key: _replacing(current.get(key, _MISSING), item) for key, item in value.items()}
    patch.update({key: None for key in current.keys() - value.keys()})
    return patch
