"""All admission policies, and evaluate(): one request -> one Decision plus per-policy outcomes.

Adding a policy: write a module with pure `mutate`/`validate` functions returning a Verdict,
export a `POLICY`, and list it in POLICIES. Modes are applied here, never inside a policy.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from webhook import decision as decisions
from webhook.config import Config, Mode
from webhook.decision import Decision
from webhook.policies import node_name, pod_groups, resource_requests, sidecar_injection
from webhook.policies.base import Check, Policy, PolicyContext, Verdict, apply_mode
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


class EnabledCheck(NamedTuple):
    policy: str
    mode: Mode
    check: Check


EnabledChecks = tuple[EnabledCheck, ...]


class PolicyResult(NamedTuple):
    policy: str
    mode: Mode
    verdict: Verdict
    outcome: str  # allowed | denied | patched | warned | audited


class Evaluation(NamedTuple):
    decision: Decision
    results: tuple[PolicyResult, ...]  # one for each policy that applied; empty: none did


def enabled_checks(phase: Phase, config: Config) -> EnabledChecks:
    """The checks config turns on for phase, in policy order, with their modes. A config never
    changes once loaded, so the server works this out once, not on every admission."""
    enabled = []
    for policy in POLICIES:
        check = policy.mutate if phase == "mutate" else policy.validate
        if check is not None and (mode := policy.mode(config)) != "off":
            enabled.append(EnabledCheck(policy.name, mode, check))
    return tuple(enabled)


def evaluate(phase: Phase, request: AdmissionRequest, context: PolicyContext,
             checks: EnabledChecks | None = None) -> Evaluation:
    """Run every enabled policy of this phase (checks: enabled_checks(phase, context.config),
    worked out here when not given); ObjectShapeError propagates (it means HTTP 400)."""
    if checks is None:
        checks = enabled_checks(phase, context.config)
    answers: list[Decision] = []
    results: list[PolicyResult] = []
    for policy, mode, check in checks:
        verdict = check(request, context)
        if verdict is None:
            continue
        answer, outcome = apply_mode(policy, mode, verdict)
        answers.append(answer)
        results.append(PolicyResult(policy, mode, verdict, outcome))
    if not answers:
        return Evaluation(decisions.allowed(), ())
    return Evaluation(decisions.combine(answers), tuple(results))
