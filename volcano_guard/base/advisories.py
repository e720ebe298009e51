"""Known failures of Volcano releases, by component and version: what the audit and `check` tell
an operator about the Volcano they run, and which part of the guard covers each.

Pure data and version matching, no I/O. Every row's affected and fixed releases are pinned by
tests/base/test_advisories.py to Volcano's source at the release tags named there (how to add a
row: docs/reference.md, "Volcano advisories"). A version is read from the image tag
(`v1.10.0`, `1.10.0`, `v1.10.0-rc.1`); a digest alone, `latest` or any other tag is "version
unknown", for which no row is claimed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from volcano_guard.base.volcano import AGENT_SCHEDULER, SCHEDULER

CONTROLLER, ADMISSION = "controller-manager", "admission"
ADVISORIES_POLICY = "volcanoAdvisories"  # the audit's and check's policy names
SIDECAR_SCOPE_POLICY = "queueStatusSidecar"
UNKNOWN = "unknown"  # the version of an image whose tag is not a release's

# Which part of the guard covers a failure (docs/reference.md names each):
Cover = Literal[
    "sidecar", "nodeAdmission", "podGroupDeleteGuard", "queuesPolicy", "queueGuarantees", "upgrade"
]
SIDECAR: Cover = "sidecar"  # the coalescing sidecar in front of the Queue status writer
NODE_ADMISSION: Cover = "nodeAdmission"  # resourceRequests + nodeName policies, PANIC_ON_ERROR
PODGROUP_DELETE_GUARD: Cover = "podGroupDeleteGuard"  # policies.podGroups.deleteGuard
QUEUES_POLICY: Cover = "queuesPolicy"  # policies.queues
# The audit's queueGuarantees finding: it grades Queue guarantees past the cluster by this row.
QUEUE_GUARANTEES_FINDING: Cover = "queueGuarantees"
UPGRADE: Cover = "upgrade"  # nothing in the guard: upgrade Volcano (or wait for a fix)

_TAG = re.compile(
    r"v?(?P<major>0|[1-9][0-9]*)\.(?P<minor>0|[1-9][0-9]*)\.(?P<patch>0|[1-9][0-9]*)"
    r"(?:-(?P<pre>[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?"
)


@dataclass(frozen=True, order=True)
class Version:
    """A release version; a pre-release sorts before its release (semver)."""

    major: int
    minor: int
    patch: int
    release: bool = True  # False for a pre-release (`-rc.1`): it sorts first
    pre: tuple[tuple[int, str], ...] = ()

    def __str__(self) -> str:
        core = f"v{self.major}.{self.minor}.{self.patch}"
        if self.release:
            return core
        return core + "-" + ".".join(text for _, text in self.pre)


# An image tag is at most 128 characters (the OCI distribution spec); a longer "tag" names no
# release, and its digits could pass the 4,300 int() converts (a traceback in the audit).
MAX_TAG = 128


def parse_version(text: str) -> Version | None:
    """`v1.10.0`, `1.10.0`, `v1.10.0-rc.1` -> a Version; anything else -> None."""
    if len(text) > MAX_TAG:
        return None
    match = _TAG.fullmatch(text)
    if match is None:
        return None
    pre = match.group("pre")
    parts = tuple(
        (int(part), part) if part.isdigit() else (1 << 62, part) for part in (pre or "").split(".")
    )
    return Version(
        int(match.group("major")),
        int(match.group("minor")),
        int(match.group("patch")),
        pre is None,
        parts if pre else (),
    )


def image_version(image: object) -> Version | None:
    """The release an image reference's tag names; None for a digest alone, `latest`, no tag
    or any tag that is not a release's."""
    if not isinstance(image, str):
        return None
    reference = image.split("@", 1)[0]
    last = reference.rsplit("/", 1)[-1]
    if ":" not in last:
        return None
    return parse_version(last.rsplit(":", 1)[1])


def release(text: str) -> Version:
    """A version written in the table (always parses)."""
    version = parse_version(text)
    assert version is not None, text
    return version


Range = tuple[str | None, str | None]  # [from, before): None is unbounded
EVERY_RELEASE: tuple[Range, ...] = ((None, None),)


@dataclass(frozen=True)
class Advisory:
    key: str  # stable id: a metric label and a PolicyReport rule
    failure: str  # what happens, in a Volcano operator's words
    components: frozenset[str]
    affected: tuple[Range, ...]
    fixed_in: str | None  # the first release without it, None while open
    issues: tuple[int, ...]  # volcano-sh/volcano issue numbers
    prs: tuple[int, ...]  # the fix's pull requests (only a fix released in a tag we pin)
    cover: Cover
    note: str = ""

    def affects(self, component: str, version: Version) -> bool:
        return component in self.components and any(
            (low is None or version >= release(low)) and (high is None or version < release(high))
            for low, high in self.affected
        )

    def upstream(self) -> str:
        """`volcano-sh/volcano#3597 (fix #3751)` as a report cites it."""
        issues = ", ".join(f"#{n}" for n in self.issues)
        prs = ", ".join(f"#{n}" for n in self.prs)
        return f"volcano-sh/volcano {issues}" + (f" (fix {prs})" if prs else "")

    def releases(self) -> str:
        """`fixed in v1.11.0` or `no fixed release`."""
        return f"fixed in {self.fixed_in}" if self.fixed_in else "no fixed release"


SCHEDULERS = frozenset({SCHEDULER, AGENT_SCHEDULER})
STATUS_WRITERS = frozenset({SCHEDULER, CONTROLLER})
GUARANTEES_PAST_CLUSTER = "queue-guarantees-past-cluster"  # the row queueGuarantees grades by

ADVISORIES: tuple[Advisory, ...] = (
    Advisory(
        "queue-status-storm",
        "the scheduler and the queue controller both PUT Queue status with the resourceVersion "
        "they read, so each 409s on the other's writes and retries: a conflict storm that "
        "floods the API server and delays Queue state changes",
        STATUS_WRITERS,
        ((None, "v1.11.0"),),
        "v1.11.0",
        (3597,),
        (3751,),
        SIDECAR,
    ),
    Advisory(
        "queue-status-apply-allocated",
        "the queue controller server-side-applies status.allocated (field manager "
        "queue-controller, no force) while the scheduler PUTs it, so the controller's applies "
        "fail with field-manager conflicts and Queue state changes stall",
        STATUS_WRITERS,
        (("v1.11.0", "v1.11.1"),),
        "v1.11.1",
        (4141,),
        (4336,),
        UPGRADE,
    ),
    Advisory(
        "queue-status-apply-scheduler",
        "the scheduler server-side-applies status.allocated without force, which conflicts "
        "with a field owned by another writer (an earlier PUT), so Queue allocation stops "
        "being written",
        frozenset({SCHEDULER}),
        (("v1.11.1", "v1.12.1"),),
        "v1.12.1",
        (4139,),
        (4351,),
        UPGRADE,
        "the source shows the same writer in v1.11.1 as in v1.12.0",
    ),
    Advisory(
        "queue-status-shards",
        "the agent scheduler and sharded schedulers write the same Queues' status and conflict",
        frozenset({AGENT_SCHEDULER}),
        EVERY_RELEASE,
        None,
        (5084,),
        (),
        UPGRADE,
        "open upstream",
    ),
    Advisory(
        "negative-idle-future-idle",
        "a node whose idle resources go negative (a pod bound around Volcano) panics the "
        "scheduler in FutureIdle's subtraction",
        SCHEDULERS,
        ((None, "v1.9.0"),),
        "v1.9.0",
        (2999, 3392),
        (3391,),
        NODE_ADMISSION,
        "backported to v1.9.0 by #3393",
    ),
    Advisory(
        "negative-idle-asserts",
        "a node or Queue whose idle resources go negative (a pod bound around Volcano) fails "
        "Resource.Sub's assertion, which panics the scheduler unless its assertions are set to "
        "log (the scheduler's panic finding says whether they are)",
        SCHEDULERS,
        EVERY_RELEASE,
        None,
        (2999, 3392),
        (),
        NODE_ADMISSION,
        "open upstream: Resource.Sub still asserts, and so do the proportion and capacity "
        "plugins' subtractions of a Queue's allocated",
    ),
    Advisory(
        GUARANTEES_PAST_CLUSTER,
        "Queue guarantees summing past the allocatable of the nodes the scheduler caches panic "
        "it: Resource.Sub asserts on the guarantees subtracted from the cluster's total (each "
        "plugin's real capability in v1.9.0 and v1.10.0, #3127; the proportion plugin's "
        "deserved shares in every release before v1.12.0, #4261; the capacity plugin's "
        "hierarchy in v1.11)",
        frozenset({SCHEDULER}),
        ((None, "v1.12.0"),),
        "v1.12.0",
        (3127, 4261),
        (4273,),
        QUEUE_GUARANTEES_FINDING,
        "#3127 fixed by #3106 in v1.11.0 (backported to v1.9.1 and v1.10.1); from v1.12.0 the "
        "guarantees simply cannot all be met",
    ),
    Advisory(
        "queue-children-guarantee-panic",
        "with the capacity plugin's enableHierarchy, a parent Queue whose children's guarantees "
        "sum past its real capability panics the scheduler (Resource.Sub in "
        "checkHierarchicalQueue)",
        frozenset({SCHEDULER}),
        (("v1.11.0", "v1.12.0"),),
        "v1.12.0",
        (4104,),
        (4179,),
        QUEUES_POLICY,
        "under the root queue, the real capability is the cluster's: queueGuarantees",
    ),
    Advisory(
        "stale-podgroup-delete",
        "the PodGroup controller deletes podgroup-<owner uid> by name, without preconditions, "
        "whenever it sees a ReplicaSet (and from v1.12.0 a StatefulSet) at 0 replicas; a late "
        "or retried delete after scaling back up removes the new PodGroup, and its pods stay "
        "Pending",
        frozenset({CONTROLLER}),
        EVERY_RELEASE,
        None,
        (3375, 5972),
        (),
        PODGROUP_DELETE_GUARD,
        "open upstream: the delete by name is in every release's PodGroup controller",
    ),
    Advisory(
        "ignored-devices-race",
        "node updates race the scheduler's shared IgnoredDevicesList (device sharing), a data "
        "race that can crash the scheduler",
        SCHEDULERS,
        ((None, "v1.9.0"),),
        "v1.9.0",
        (3324,),
        (3325,),
        UPGRADE,
    ),
    Advisory(
        "queue-hierarchy-invalid",
        "a hierarchical Queue whose resources break its ancestors' (capability, guarantee or "
        "deserved past the parent's) aborts every scheduling session; Volcano's webhook admits it",
        frozenset({ADMISSION}),
        ((None, "v1.14.0"),),
        "v1.14.0",
        (4818, 4819),
        (4864,),
        QUEUES_POLICY,
    ),
    Advisory(
        "queue-resources-order",
        "a Queue whose guarantee, deserved and capability are out of order (guarantee > "
        "deserved or deserved > capability) is admitted and breaks the scheduler's share "
        "arithmetic",
        frozenset({ADMISSION}),
        ((None, "v1.14.2"),),
        "v1.14.2",
        (4292,),
        (4973,),
        QUEUES_POLICY,
        "#4973 reached the v1.14 line in v1.14.2 (#5080); #4293 is on release-1.11 in no release",
    ),
    Advisory(
        "queue-parent-cycle",
        "a Queue re-parented onto its own descendant (a cycle) is admitted and pins Volcano's "
        "admission webhook at 100% CPU",
        frozenset({ADMISSION}),
        EVERY_RELEASE,
        None,
        (5807,),
        (),
        QUEUES_POLICY,
        "open upstream",
    ),
)


def advisories_for(
    component: str, version: Version, table: Sequence[Advisory] = ADVISORIES
) -> list[Advisory]:
    """The rows that affect this component at this version, in table order."""
    return [advisory for advisory in table if advisory.affects(component, version)]


@dataclass(frozen=True)
class StatusWriters:
    """How a release's scheduler and queue controller write Queue status."""

    since: str
    scheduler: str
    controller: str

    @property
    def sidecar_needed(self) -> bool:
        """Both PUT with the resourceVersion they read: the storm the sidecar coalesces."""
        return self.scheduler.startswith("PUT") and self.controller.startswith("PUT")


# From each release's pkg/scheduler/cache/cache.go (UpdateQueueStatus) and
# pkg/controllers/queue/queue_controller_action.go; tests/base/test_advisories.py pins each.
QUEUE_STATUS_WRITERS: tuple[StatusWriters, ...] = (
    StatusWriters("v0.0.0", "PUT (UpdateStatus)", "PUT (UpdateStatus)"),
    StatusWriters(
        "v1.11.0",
        "PUT (UpdateStatus)",
        "server-side apply of state and allocated, field manager queue-controller, no force",
    ),
    StatusWriters(
        "v1.11.1",
        "server-side apply of allocated, no force",
        "server-side apply of state, field manager queue-controller, no force",
    ),
    StatusWriters(
        "v1.12.1",
        "PUT (UpdateStatus)",
        "server-side apply of state, field manager queue-controller, no force",
    ),
)


def status_writers(version: Version) -> StatusWriters:
    """The Queue status writers of the release at version; the first row's for any version
    before it too (a pre-release of v0.0.0 is)."""
    at_or_past = (w for w in reversed(QUEUE_STATUS_WRITERS) if version >= release(w.since))
    return next(at_or_past, QUEUE_STATUS_WRITERS[0])
