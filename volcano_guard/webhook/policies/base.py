"""What every policy shares: its Verdict, its context, the cluster data it may declare, and how
a mode turns a Verdict into a Decision. Policies are plain functions
`(request, context) -> Verdict | None`; None means the policy does not apply to this request."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar

import msgspec

from volcano_guard.base.informer import Snapshot
from volcano_guard.base.jsonbody import clipped
from volcano_guard.base.uuid7 import new_uuid7
from volcano_guard.webhook import decision as decisions
from volcano_guard.webhook.decision import Decision, Operation
from volcano_guard.webhook.review import AdmissionRequest
from volcano_guard.webhook.sections import Mode

if TYPE_CHECKING:  # config.py gathers the policies' sections: at run time, it imports this
    from volcano_guard.webhook.config import Config


class Verdict(msgspec.Struct, frozen=True):
    """What a policy found, as if enforced: reasons to deny, and a patch with its description."""

    violations: tuple[str, ...] = ()
    patch: tuple[Operation, ...] = ()
    changes: tuple[str, ...] = ()  # one human-readable line per thing the patch does
    warnings: tuple[str, ...] = ()  # told to the client whatever the mode (kubectl prints them)
    outcome: str = ""  # a more telling metrics label than "allowed" for a verdict with no finding


NOTHING_FOUND = Verdict()  # the usual answer, built once


T = TypeVar("T")


@dataclass(frozen=True, eq=False)
class WatchedList(Generic[T]):
    """Cluster data a policy reads on every request it checks: every object of one resource,
    listed and watched in the background (webhook.caches), each kept as `keep` projects it
    ("namespace/name" or "name" -> T), so a decision never waits on the network."""

    resource: str  # as in the URL: "nodes"
    kind: str
    keep: Callable[[dict[str, Any]], T]
    group: str = ""
    version: str = "v1"
    namespaced: bool = False


@dataclass(frozen=True, eq=False)
class LiveList:
    """Cluster data a policy reads on a few rare requests only (`wanted`, asked with the
    decision's snapshots): the metadata of one resource's objects in the request's namespace,
    listed while the request waits, page by page within a timeout."""

    resource: str
    wanted: Callable[[AdmissionRequest, Mapping[WatchedList[Any], Snapshot[Any]]], bool]
    group: str = ""
    version: str = "v1"
    field_selector: str = ""


class PolicyContext(msgspec.Struct, frozen=True):
    """Everything a policy may read besides the request: the config, and the cluster data the
    enabled policies declare, taken once for this decision."""

    config: Config
    snapshots: Mapping[WatchedList[Any], Snapshot[Any]] = MappingProxyType({})
    # LiveList -> its objects; None when they could not be listed in time.
    listed: Mapping[LiveList, tuple[dict[str, Any], ...] | None] = MappingProxyType({})
    new_generation_id: Callable[[], object] = new_uuid7
    clock: Callable[[], float] = time.time  # seconds since the epoch, for ages in messages

    def snapshot(self, data: WatchedList[T]) -> Snapshot[T] | None:
        """The data's snapshot; None when there is none (no cluster)."""
        return self.snapshots.get(data)

    def live(self, data: LiveList) -> tuple[dict[str, Any], ...] | None:
        return self.listed.get(data)


Check = Callable[[AdmissionRequest, PolicyContext], Verdict | None]
Kind = tuple[str, str]  # a request's (API group, kind), as in request.kind

# The webhook registrations (webhook.registrations builds them; names as the API server shows
# them in a denial): fail-closed mutation and validation, and two that fail open.
MUTATE, VALIDATE = "mutate.volcano-guard.io", "validate.volcano-guard.io"
INJECT, BINDINGS = "inject.volcano-guard.io", "bindings.volcano-guard.io"
# What an outage may skip: the scopes of a policy whose in-server checks are installed (the API
# server refuses what they would), and mutations nothing depends on.
MUTATE_OPEN = "mutate-open.volcano-guard.io"
VALIDATE_OPEN = "validate-open.volcano-guard.io"


class Rule(NamedTuple):
    """One rule of a webhook registration (admissionregistration.k8s.io/v1 RuleWithOperations)."""

    api_group: str
    api_version: str
    resources: tuple[str, ...]
    operations: tuple[str, ...]
    scope: str = "Namespaced"  # "Cluster" for a cluster-scoped resource (Volcano Queues)


class Scope(NamedTuple):
    """The requests one check can act on, for the registration `webhook`: its rules, and a CEL
    condition (webhook.cel) over the API server's variables that is false for every request the
    check would allow untouched ("" : every request the rules match)."""

    webhook: str
    rules: tuple[Rule, ...]
    condition: str = ""
    # Labels the object must carry (the registration's objectSelector matchLabels).
    object_labels: tuple[tuple[str, str], ...] = ()


class InServerCheck(NamedTuple):
    """A deny a request alone decides, as a ValidatingAdmissionPolicy runs it inside the API
    server (webhook.admission_policies renders it): the requests it applies to (rules, and a
    CEL condition over `object` and `request`), variables, and validations: (expression true
    when the request is allowed, messageExpression saying why not). With `params_label`, the
    guard's ConfigMaps carrying that label are its params (`params`), each judged alone; with
    none at all, the check is skipped (parameterNotFoundAction Allow)."""

    name: str
    rules: tuple[Rule, ...]
    condition: str
    validations: tuple[tuple[str, str], ...]
    variables: tuple[tuple[str, str], ...] = ()
    params_label: tuple[str, str] | None = None


class InServerMutation(NamedTuple):
    """A mutation a request alone decides, as a MutatingAdmissionPolicy runs it inside the API
    server (webhook.admission_policies renders it where the cluster serves them): the requests it
    applies to (rules, and a CEL condition over `object` and `request`), variables, and one
    JSONPatch mutation: a CEL expression giving the list of `JSONPatch{op: ..., path: ...,
    value: ...}` to apply (empty when there is nothing to change). `params_label` as for
    InServerCheck."""

    name: str
    rules: tuple[Rule, ...]
    condition: str
    json_patch: str
    variables: tuple[tuple[str, str], ...] = ()
    params_label: tuple[str, str] | None = None
    # failurePolicy Ignore rather than Fail: a mutation whose webhook registration failed open
    # keeps that posture (injection: a pod starts without the sidecar rather than never);
    # the rest (defaults, the nodeName rewrite) must not be skipped.
    fails_open: bool = False


def pods_rule(*operations: str) -> Rule:
    """The rule for core v1 pods (not their subresources) on these operations."""
    return Rule("", "v1", ("pods",), operations)


def no_scopes(config: Config) -> tuple[Scope, ...]:
    return ()


def no_checks(config: Config) -> tuple[InServerCheck, ...]:
    return ()


def no_mutations(config: Config) -> tuple[InServerMutation, ...]:
    return ()


@dataclass(frozen=True)
class Policy:
    name: str
    mode: Callable[[Config], Mode]
    # The config setting that turns it off, as a user writes it (named in messages).
    off: str = ""
    mutate: Check | None = None
    validate: Check | None = None
    # The request kinds its checks can apply to (they answer None to any other), so that
    # evaluate() need not call them for the rest; None: any kind.
    kinds: frozenset[Kind] | None = None
    # What its registrations must send it under this config (asked only when it is not off).
    scopes: Callable[[Config], tuple[Scope, ...]] = no_scopes
    # The cluster data it reads (webhook.caches starts what the enabled policies declare).
    watches: tuple[WatchedList[Any], ...] = ()
    lookups: tuple[LiveList, ...] = ()
    # Its denies that the API server can decide alone, under this config. A policy that
    # returns any must return every deny its scopes exist for: with them installed, its
    # registrations fail open (webhook.registrations).
    in_server: Callable[[Config], tuple[InServerCheck, ...]] = no_checks
    # Its patches that the API server can make alone, under this config, as if enforced (ask
    # mutate_in_server, which applies the mode). A policy that returns any must return every
    # patch its mutating scopes exist for: where the cluster serves MutatingAdmissionPolicies,
    # those scopes leave the registrations (webhook.registrations).
    in_server_mutations: Callable[[Config], tuple[InServerMutation, ...]] = no_mutations

    def mutate_in_server(self, config: Config) -> tuple[InServerMutation, ...]:
        """Its in-server mutations under this config, only in enforce mode: a policy in the API
        server cannot warn that it would patch. The one place that mode is checked: every
        caller (admission_policies renders them, registrations moves the scopes they cover off
        the webhook) asks here, and no policy checks it again."""
        return self.in_server_mutations(config) if self.mode(config) == "enforce" else ()


# Per-policy outcome label, as counted in volcano_guard_admission_requests_total{decision}.
OUTCOME_ALLOWED, OUTCOME_DENIED, OUTCOME_PATCHED = "allowed", "denied", "patched"
OUTCOME_WARNED, OUTCOME_AUDITED = "warned", "audited"


# Containers one answer can patch: each container's change is a patch operation of ~150 bytes,
# so past this the answer would pass the webhook's 3 MiB cap (server.MAX_ANSWER_BYTES); building
# such a patch for a forged pod of 200,000 containers cost 2.4 s and ~180 MiB.
PATCHED_CONTAINERS = 20_000

# Findings one answer reports, the rest counted: a forged pod with 200,000 bad containers once
# made a 97 MB answer and held the event loop for seconds (docs/decisions/webhook.md).
REPORTED_FINDINGS = 20
# A finding's length, at most: room for a loop of 253-character Queue names (about 2,300), under
# the 5 KiB past which kube-apiserver drops an in-server policy's message.
FINDING_CHARACTERS = 4096


def more_findings(unreported: int) -> str:
    """The line that stands for the findings not reported one by one."""
    return f"and {unreported:,} more"


def reported(findings: tuple[str, ...]) -> tuple[str, ...]:
    """The first REPORTED_FINDINGS findings, and a count of the rest (a policy that counts its
    own already ends with its count: REPORTED_FINDINGS + 1 lines pass as they are), each
    clipped to FINDING_CHARACTERS."""
    if len(findings) > REPORTED_FINDINGS + 1:
        findings = (*findings[:REPORTED_FINDINGS], more_findings(len(findings) - REPORTED_FINDINGS))
    return tuple(clipped(finding, FINDING_CHARACTERS) for finding in findings)


def apply_mode(policy: str, mode: Mode, verdict: Verdict) -> tuple[Decision, str]:
    """The one place a mode is applied: enforce denies or patches, warn and audit only tell."""
    decision, outcome = _moded(policy, mode, verdict)
    if verdict.warnings:
        decision = decisions.with_warnings(
            decision, (f"{policy}: {warning}" for warning in reported(verdict.warnings))
        )
    return decision, outcome


def _moded(policy: str, mode: Mode, verdict: Verdict) -> tuple[Decision, str]:
    if not verdict.violations and not verdict.changes:  # the common case: nothing found
        return decisions.allowed(), verdict.outcome or OUTCOME_ALLOWED
    findings = reported(verdict.violations) or tuple(
        f"would {change}" for change in reported(verdict.changes)
    )
    if mode == "enforce":
        if verdict.violations:
            return decisions.denied("; ".join(findings)), OUTCOME_DENIED
        return decisions.patched(verdict.patch), OUTCOME_PATCHED
    if mode == "warn":
        warnings = (f"{policy}: {finding}" for finding in findings)
        return decisions.with_warnings(decisions.allowed(), warnings), OUTCOME_WARNED
    # audit: the API server prefixes the key with the webhook's name (one '/' allowed in all).
    annotated = decisions.with_audit_annotation(decisions.allowed(), policy, "; ".join(findings))
    return annotated, OUTCOME_AUDITED
