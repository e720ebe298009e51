"""The policy registry (POLICIES, in the order they run) and evaluate(): one request -> one
Decision plus per-policy outcomes. Modes are applied here (policies.base.apply_mode), never inside
a policy; the caches and the server start and fetch what the enabled policies declare
(watched_data, live_lookups). How to add a policy: webhook/policies/__init__.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import msgspec

from volcano_guard.webhook import decision as decisions
from volcano_guard.webhook.config import Config, Mode
from volcano_guard.webhook.decision import Decision
from volcano_guard.webhook.policies import (
    node_name,
    pod_groups,
    queues,
    resource_requests,
    sidecar_injection,
)
from volcano_guard.webhook.policies.base import (
    NOTHING_FOUND,
    OUTCOME_ALLOWED,
    Check,
    Kind,
    LiveList,
    Policy,
    PolicyContext,
    Verdict,
    WatchedList,
    apply_mode,
)
from volcano_guard.webhook.review import AdmissionRequest

Phase = Literal["mutate", "validate"]
NO_POLICY = "none"  # the metrics label when no policy handled a request

POLICIES: tuple[Policy, ...] = (
    resource_requests.POLICY,
    node_name.POLICY,
    node_name.BINDING_POLICY,
    pod_groups.STAMP_POLICY,
    pod_groups.ID_GUARD_POLICY,
    pod_groups.ENRICH_POLICY,
    pod_groups.DELETE_POLICY,
    queues.HIERARCHY_POLICY,
    queues.RESOURCES_POLICY,
    sidecar_injection.POLICY,  # last: its inserts shift indexes other patches address
)


def enabled_policies(config: Config) -> tuple[Policy, ...]:
    return tuple(policy for policy in POLICIES if policy.mode(config) != "off")


def watched_data(config: Config) -> tuple[WatchedList[Any], ...]:
    """The cluster data the enabled policies read on every request, each once."""
    return tuple(dict.fromkeys(w for p in enabled_policies(config) for w in p.watches))


def live_lookups(config: Config) -> tuple[LiveList, ...]:
    """The cluster data the enabled policies list on their rare requests, each once."""
    return tuple(dict.fromkeys(lookup for p in enabled_policies(config) for lookup in p.lookups))


# The records of one decision are frozen msgspec Structs, like the request they answer: built
# in C, immutable once built (docs/decisions/webhook.md, "Per-request records").


class PolicyResult(msgspec.Struct, frozen=True):
    policy: str
    mode: Mode
    verdict: Verdict
    outcome: str  # allowed | denied | patched | warned | audited


class Evaluation(msgspec.Struct, frozen=True):
    decision: Decision
    results: tuple[PolicyResult, ...]  # one for each policy that applied; empty: none did


class EnabledCheck(msgspec.Struct, frozen=True):
    policy: str
    mode: Mode
    check: Check
    # Its result when it finds nothing (the usual answer), built once rather than per request.
    nothing_found: PolicyResult


class KindChecks(msgspec.Struct, frozen=True):
    """What one request kind gets: the enabled checks that can apply to it, in policy order,
    and the live lists those checks may read on their rare requests."""

    checks: tuple[EnabledCheck, ...] = ()
    lookups: tuple[LiveList, ...] = ()


class EnabledChecks(msgspec.Struct, frozen=True):
    """The checks a config turns on for one phase, in policy order, and for each request kind
    only those that can apply to it (a policy's `kinds`) with the live lists they read. A config
    never changes once loaded, so the server works this out once per app, not on every
    admission."""

    checks: tuple[EnabledCheck, ...]
    by_kind: dict[Kind, KindChecks]
    other_kinds: KindChecks  # for kinds no policy names: the policies without `kinds`

    def for_kind(self, group: str, kind: str) -> KindChecks:
        return self.by_kind.get((group, kind), self.other_kinds)


def enabled_checks(
    phase: Phase, config: Config, policies: Sequence[Policy] | None = None
) -> EnabledChecks:
    """The checks of phase that config turns on (of POLICIES unless given), with their modes."""
    enabled: list[tuple[Policy, EnabledCheck]] = []
    for policy in POLICIES if policies is None else policies:
        check = policy.mutate if phase == "mutate" else policy.validate
        if check is not None and (mode := policy.mode(config)) != "off":
            nothing_found = PolicyResult(policy.name, mode, NOTHING_FOUND, OUTCOME_ALLOWED)
            enabled.append((policy, EnabledCheck(policy.name, mode, check, nothing_found)))

    def applying_to(kind: Kind | None) -> KindChecks:
        """The enabled checks for kind (None: a kind no policy names)."""
        applying = [
            (policy, check)
            for policy, check in enabled
            if policy.kinds is None or kind in policy.kinds
        ]
        lookups = dict.fromkeys(lookup for policy, _ in applying for lookup in policy.lookups)
        return KindChecks(tuple(check for _, check in applying), tuple(lookups))

    named = {kind for policy, _ in enabled for kind in policy.kinds or ()}
    return EnabledChecks(
        tuple(check for _, check in enabled),
        {kind: applying_to(kind) for kind in named},
        applying_to(None),
    )


def evaluate(
    phase: Phase,
    request: AdmissionRequest,
    context: PolicyContext,
    checks: EnabledChecks | None = None,
) -> Evaluation:
    """Run every enabled policy of this phase that can apply to the request's kind (checks:
    enabled_checks(phase, context.config), worked out here when not given); ObjectShapeError
    propagates (it means HTTP 400)."""
    if checks is None:
        checks = enabled_checks(phase, context.config)
    answers: list[Decision] = []
    results: list[PolicyResult] = []
    for enabled in checks.for_kind(request.kind.group, request.kind.kind).checks:
        verdict = enabled.check(request, context)
        if verdict is None:
            continue
        if verdict is NOTHING_FOUND:  # allowed, and adds nothing to the combined answer
            results.append(enabled.nothing_found)
            continue
        answer, outcome = apply_mode(enabled.policy, enabled.mode, verdict)
        answers.append(answer)
        results.append(PolicyResult(enabled.policy, enabled.mode, verdict, outcome))
    if not answers:
        return Evaluation(decisions.ALLOWED, tuple(results))
    return Evaluation(decisions.combine(answers), tuple(results))
