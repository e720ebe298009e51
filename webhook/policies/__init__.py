"""All admission policies, and evaluate(): one request -> one Decision plus per-policy outcomes.

Adding a policy: write a module with pure `mutate`/`validate` functions returning a Verdict,
export a `POLICY`, and list it in POLICIES. Modes are applied here, never inside a policy.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from webhook import decision as decisions
from webhook.config import Mode
from webhook.decision import Decision
from webhook.policies import node_name, pod_groups, resource_requests, sidecar_injection
from webhook.policies.base import Policy, PolicyContext, Verdict, apply_mode
from webhook.review import AdmissionRequest

Phase = Literal["mutate", "validate"]
NO_POLICY = "none"  # the metrics label when no policy handled a request

POLICIES: tuple[Policy, ...] = (
    resource_requests.POLICY,
    node_name.POLICY,
    node_name.BINDING_POLICY,
    pod_groups.STAMP_POLICY,
    pod_groups.ENRICH_POLICY,
    pod_groups.DELETE_POLICY,
    sidecar_injection.POLICY,  # last: its inserts shift indexes other patches address
)


class PolicyResult(NamedTuple):
    policy: str
    mode: Mode
    verdict: Verdict
    outcome: str  # allowed | denied | patched | warned | audited


class Evaluation(NamedTuple):
    decision: Decision
    results: tuple[PolicyResult, ...]  # one for each policy that applied; empty: none did


def evaluate(phase: Phase, request: AdmissionRequest, context: PolicyContext) -> Evaluation:
    """Run every enabled policy of this phase; ObjectShapeError propagates (it means HTTP 400)."""
    answers: list[Decision] = []
    results: list[PolicyResult] = []
    for policy in POLICIES:
        check = policy.mutate if phase == "mutate" else policy.validate
        if check is None:
            continue
        mode = policy.mode(context.config)
        if mode == "off":
            continue
        verdict = check(request, context)
        if verdict is None:
            continue
        answer, outcome = apply_mode(policy.name, mode, verdict)
        answers.append(answer)
        results.append(PolicyResult(policy.name, mode, verdict, outcome))
    if not answers:
        return Evaluation(decisions.allowed(), ())
    return Evaluation(decisions.combine(answers), tuple(results))
