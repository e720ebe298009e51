"""Volcano v1.15.1's queue webhook test cases (pkg/webhooks/admission/queues/validate/
validate_queue_test.go) that concern what the queues and queueResources policies check,
transcribed: the queues in Volcano's fake cache, the request, and whether Volcano admits it.
The cases of the functions it calls directly (validateChildAgainstAncestor,
validateChildrenConstraints) are the admission that calls them: a CREATE of the child, or of
the parent among the children the case passes. tests/webhook/test_queues.py runs them and
checks the names against the upstream file; the cases left out say why in OUT_OF_SCOPE."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


def queue(
    name: str,
    parent: str = "",
    capability: dict[str, Any] | None = None,
    deserved: dict[str, Any] | None = None,
    guarantee: dict[str, Any] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"weight": 1, "reclaimable": True}
    if parent:
        spec["parent"] = parent
    if capability is not None:
        spec["capability"] = capability
    if deserved is not None:
        spec["deserved"] = deserved
    if guarantee is not None:
        spec["guarantee"] = {"resource": guarantee}
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": spec,
    }


def res(
    cpu: str | None = None, memory: str | None = None, gpu: str | None = None
) -> dict[str, str]:
    found = {"cpu": cpu, "memory": memory, "nvidia.com/gpu": gpu}
    return {key: value for key, value in found.items() if value is not None}


@dataclass(frozen=True)
class Case:
    cache: tuple[dict[str, Any], ...]
    obj: dict[str, Any]
    allowed: bool
    old: dict[str, Any] | None = None  # an UPDATE from it
    policy: str = ""  # the policy that refuses it


# TestAdmitQueues: the cache holds queues without parents or resources (state, annotations).
PLAIN = (queue("open-state-for-delete"), queue("closed-state-for-delete"))

# TestAdmitHierarchicalQueues' cache.
PARENT_TO_UPDATE = queue(
    "parent-queue-to-update", "root", res("20", "40Gi"), None, res("15", "30Gi")
)
EMPTY_PARENT = queue("parent-queue-empty-parent", "", res("100", "100Gi"))
HIERARCHY = (
    queue("queue-with-jobs", "root"),
    queue("queue-without-jobs", "root"),
    queue("child-queue", "queue-with-child-queues"),
    queue("queue-with-child-queues", "root"),
    queue("parent-queue-has-child-with-jobs", "root"),
    queue("child-queue-a-with-jobs", "parent-queue-has-child-with-jobs"),
    queue("queue-without-child-queues", "root"),
    queue("parent-queue-resource-test", "root", res("10", "20Gi"), None, res("8", "16Gi")),
    queue(
        "sibling-queue-resource-test",
        "parent-queue-resource-test",
        res("3", "6Gi"),
        None,
        res("2", "4Gi"),
    ),
    queue("parent-queue-small-capability", "root", res("5", "10Gi")),
    queue("child-queue-larger-capability", "parent-queue-small-capability", res("10", "20Gi")),
    PARENT_TO_UPDATE,
    queue("child-queue-a", "parent-queue-to-update", res("12", "24Gi"), None, res("8", "16Gi")),
    queue(
        "child-queue-b-for-update",
        "parent-queue-to-update",
        res("8", "16Gi"),
        None,
        res("5", "10Gi"),
    ),
    EMPTY_PARENT,
    queue("child-of-empty-parent", "parent-queue-empty-parent", res("50", "50Gi")),
)

# TestValidateChildAgainstAncestorForCapability's cache.
ANCESTORS = (
    queue("ancestor-gp", "root", res("100", "100Gi", gpu="8")),
    queue("ancestor-p", "ancestor-gp", res("50", "50Gi")),
    queue("ancestor-p-nocap", "ancestor-gp"),
)

# TestValidateChildrenConstraintsForCapability's queues.
PARENT_A = queue(
    "vc-parent-a",
    "root",
    res("20", "20Gi", gpu="4"),
    res("20", "20Gi"),
    res("20", "20Gi"),
)
CHILD_A1 = queue("vc-child-a1", "vc-parent-a", res(memory="15Gi"))
GRANDCHILD_A11 = queue("vc-grandchild-a1-1", "vc-child-a1", res("25"))
CHILD_A2 = queue("vc-child-a2", "vc-parent-a", res("10", "10Gi", gpu="3"))
PARENT_B = queue("vc-parent-b", "root", res("50", "50Gi"), res("50", "50Gi"), res("50", "50Gi"))
CHILD_B1 = queue("vc-child-b1", "vc-parent-b", res("30"))
CHILD_B2 = queue("vc-child-b2", "vc-parent-b", res("20"))
PARENT_C = queue("vc-parent-c", "root")
CHILD_C1 = queue("vc-child-c1", "vc-parent-c", res("100"))


def _updated(base: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {**base, "spec": {**base["spec"], **spec}}


RESOURCES, HIERARCHY_POLICY = "queueResources", "queues"
CASES: dict[str, Case] = {
    # TestAdmitQueues
    "Create queue without resource": Case(PLAIN, queue("resource-not-set"), True),
    "Create queue with deserved resource": Case(
        PLAIN, queue("only-deserved-set", deserved=res("1", "1Gi")), True
    ),
    "Create queue with capability less deserved": Case(
        PLAIN,
        queue("capability-less-deserved", "", res("1", "1Gi"), res("2", "1Gi")),
        False,
        policy=RESOURCES,
    ),
    "Create queue with deserved less guarantee": Case(
        PLAIN,
        queue("deserved-less-guarantee", "", None, res("2", "1Gi"), res("2", "3Gi")),
        False,
        policy=RESOURCES,
    ),
    # TestAdmitHierarchicalQueues
    "Queue cannot use itself as parent": Case(
        HIERARCHY,
        queue("self-referencing-queue", "self-referencing-queue"),
        False,
        policy=HIERARCHY_POLICY,
    ),
    "Parent Queue has no jobs": Case(
        HIERARCHY, queue("parent-queue-without-jobs", "queue-without-jobs"), True
    ),
    "Parent Queue has child with jobs": Case(
        HIERARCHY, queue("child-queue-b", "parent-queue-has-child-with-jobs"), True
    ),
    "Child capability exceeds parent capability": Case(
        HIERARCHY,
        queue("child-capability-exceeds-parent", "parent-queue-resource-test", res("20", "40Gi")),
        False,
        policy=HIERARCHY_POLICY,
    ),
    "Siblings guarantee sum exceeds parent guarantee": Case(
        HIERARCHY,
        queue(
            "siblings-guarantee-exceeds",
            "parent-queue-resource-test",
            res("7", "14Gi"),
            res("7", "14Gi"),
            res("7", "14Gi"),
        ),
        False,
        policy=HIERARCHY_POLICY,
    ),
    "Parent capability less than child capability on UPDATE": Case(
        HIERARCHY,
        _updated(
            PARENT_TO_UPDATE,
            capability=res("10", "20Gi"),
            deserved=res("10", "20Gi"),
            guarantee={"resource": res("8", "16Gi")},
        ),
        False,
        old=PARENT_TO_UPDATE,
        policy=HIERARCHY_POLICY,
    ),
    "Sum of children's guarantee exceeds parent guarantee on UPDATE": Case(
        HIERARCHY,
        _updated(
            PARENT_TO_UPDATE,
            capability=res("20", "40Gi"),
            deserved=res("20", "40Gi"),
            guarantee={"resource": res("10", "20Gi")},
        ),
        False,
        old=PARENT_TO_UPDATE,
        policy=HIERARCHY_POLICY,
    ),
    "Update queue with empty parent - should validate child constraints": Case(
        HIERARCHY,
        _updated(EMPTY_PARENT, capability=res("30", "30Gi")),
        False,
        old=EMPTY_PARENT,
        policy=HIERARCHY_POLICY,
    ),
    "Queue with negative capability should be rejected": Case(
        HIERARCHY, queue("queue-negative-capability", "root", res("-10")), False, policy=RESOURCES
    ),
    "Queue with negative deserved should be rejected": Case(
        HIERARCHY,
        queue("queue-negative-deserved", "root", None, res("-5")),
        False,
        policy=RESOURCES,
    ),
    "Queue with negative guarantee should be rejected": Case(
        HIERARCHY,
        queue("queue-negative-guarantee", "root", None, None, res("-2")),
        False,
        policy=RESOURCES,
    ),
    # TestValidateChildAgainstAncestorForCapability
    "Child CPU exceeds direct parent capability": Case(
        ANCESTORS, queue("child-exceed-cpu", "ancestor-p", res("60")), False, policy="queues"
    ),
    "Child memory exceeds grandparent capability (skips parent with lower limit)": Case(
        ANCESTORS,
        queue("child-exceed-mem", "ancestor-p", res(memory="55Gi")),
        False,
        policy=HIERARCHY_POLICY,
    ),
    "Child GPU exceeds grandparent capability (parent has no GPU)": Case(
        ANCESTORS,
        queue("child-exceed-gpu", "ancestor-p", res(gpu="10")),
        False,
        policy=HIERARCHY_POLICY,
    ),
    "Child within all ancestor limits": Case(
        ANCESTORS,
        queue("child-within-limits", "ancestor-p", res("40", "40Gi", gpu="4")),
        True,
    ),
    "Child without capability should pass": Case(
        ANCESTORS, queue("child-no-cap", "ancestor-p"), True
    ),
    "Child under parent without capability - checks grandparent": Case(
        ANCESTORS,
        queue("child-under-nocap", "ancestor-p-nocap", res("200")),
        False,
        policy=HIERARCHY_POLICY,
    ),
    "Child under parent without capability - within grandparent limits": Case(
        ANCESTORS, queue("child-under-nocap-ok", "ancestor-p-nocap", res("80")), True
    ),
    # TestValidateChildrenConstraintsForCapability: the parent among the children passed.
    "Grandchild CPU exceeds parent capability via subtree (child has no CPU cap)": Case(
        (CHILD_A1, GRANDCHILD_A11, CHILD_A2), PARENT_A, False, policy=HIERARCHY_POLICY
    ),
    "All children within parent capability": Case((CHILD_B1, CHILD_B2), PARENT_B, True),
    "Parent without capability skips capability check": Case((CHILD_C1,), PARENT_C, True),
    "Parent with no children": Case((), PARENT_B, True),
    "Child GPU capability within parent GPU limit": Case(
        (queue("child-gpu-ok", "vc-parent-a", res(gpu="3")),), PARENT_A, True
    ),
    "Child GPU capability exceeds parent GPU limit via subtree": Case(
        (queue("child-gpu-exceed", "vc-parent-a", res(gpu="5")),),
        PARENT_A,
        False,
        policy=HIERARCHY_POLICY,
    ),
}

# v1.13.3's cases on what v1.15.1 changed (docs/decisions/policies.md, "Queues"): its
# whole-list comparisons refused a guarantee over the capability, which v1.15.1 refuses only
# through a deserved it requires; the policy refuses it by itself when no deserved stands
# between them, and does not require a deserved (v1.13.3 admitted a guarantee alone).
CASES_1_13 = {
    "Create queue with capability less guarantee": Case(
        PLAIN,
        queue("capability-less-guarantee", "", res("1", "1Gi"), None, res("2", "3Gi")),
        False,
        policy=RESOURCES,
    ),
    "Create queue with guarantee resource": Case(
        PLAIN, queue("only-guarantee-set", guarantee=res("1", "1Gi")), True
    ),
}

_STATE = "queue state (Open, Closed): Volcano's own webhook checks it; no shape that crashes"
_DELETE = "a DELETE: the policies judge CREATE and UPDATE only"
_ANNOTATION = (
    "volcano.sh/hierarchy annotations (releases up to v1.10): reported by the audit, never judged"
)
_WEIGHT = "queue weight: the Queue CRD's schema requires it positive; no hierarchy or order"
OUT_OF_SCOPE = {
    "Normal Case State Not Set During Creating": _STATE,
    "Normal Case Set State of Open During Creating": _STATE,
    "Normal Case Set State of Closed During Creating": _STATE,
    "Abnormal Case Wrong State Configured During Creating": _STATE,
    "Normal Case Changing State From Open to Closed During Updating": _STATE,
    "Normal Case Changing State From Closed to Open During Updating": _STATE,
    "Abnormal Case Changing State From Open to Wrong State During Updating": _STATE,
    "Normal Case Queue With Closed State Can Be Deleted": _DELETE,
    "Normal Case Queue With Open State Can Be Deleted (Until close queue in kubectl supported)": (
        _DELETE
    ),
    "Abnormal Case default Queue Can Not Be Deleted": _DELETE,
    "Delete queue with child queue": _DELETE,
    "Delete queue with allocated pods": _DELETE,
    "Delete queue without child queue": _DELETE,
    "Invalid Action": "an operation other than CREATE, UPDATE or DELETE: never sent",
    "Normal Case Hierarchy Is A Substring of Another Queue": _ANNOTATION,
    "Abnormal Case Hierarchy And Weights Do Not Match": _ANNOTATION,
    "Abnormal Case Weights Is Negative": _ANNOTATION,
    "Abnormal Case Weights Is Format Illegal": _ANNOTATION,
    "Abnormal Case Hierarchy Is In Sub Path of Another Queue": _ANNOTATION,
    "Create queue with guarantee but no deserved should be rejected": (
        "a guarantee without a deserved of that resource: v1.14+ refuses it, the policy does "
        "not (the proportion plugin, Volcano's default, ignores deserved; v1.13.3 admitted it; "
        "nothing crashes)"
    ),
    "Parent Queue has jobs": (
        "a parent with allocated pods: decided by the parent's status, which Volcano's own "
        "webhook reads; no shape that crashes"
    ),
    "Depth 3 is allowed when maxDepth is 5": "queue depth: a flag of Volcano's admission",
    "Depth 3 is allowed when maxDepth is 3": "queue depth: a flag of Volcano's admission",
    "Depth 3 is rejected when maxDepth is 2": "queue depth: a flag of Volcano's admission",
    # v1.13.3 only
    "Create queue with negative weight": _WEIGHT,
    "Create queue without weight": _WEIGHT,
    "Update queue with negative weight": _WEIGHT,
}
