"""The outcome of admission: one small immutable Decision, its constructors, and how to combine.

Like controller-runtime's Allowed/Denied/Patched helpers: policies and the server build answers
only through these, so the response shape lives in one place.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from volcano_guard.base.jsonpatch import Operation


class Decision(msgspec.Struct, frozen=True):
    allowed: bool
    message: str = ""
    code: int = 200
    patch: tuple[Operation, ...] = ()
    warnings: tuple[str, ...] = ()
    audit_annotations: tuple[tuple[str, str], ...] = ()


ALLOWED = Decision(allowed=True)  # the usual answer, built once


def allowed(message: str = "") -> Decision:
    return Decision(allowed=True, message=message) if message else ALLOWED


def denied(message: str, code: int = 403) -> Decision:
    return Decision(allowed=False, message=message, code=code)


def patched(operations: Iterable[Operation]) -> Decision:
    return Decision(allowed=True, patch=tuple(operations))


def with_warnings(decision: Decision, warnings: Iterable[str]) -> Decision:
    return msgspec.structs.replace(decision, warnings=decision.warnings + tuple(warnings))


def with_audit_annotation(decision: Decision, key: str, value: str) -> Decision:
    annotations = (*decision.audit_annotations, (key, value))
    return msgspec.structs.replace(decision, audit_annotations=annotations)


def combine(decisions: Iterable[Decision]) -> Decision:
    """One answer for several policies: any denial denies (messages joined), else patches,
    warnings and audit annotations are concatenated in policy order."""
    decisions = list(decisions)
    if len(decisions) == 1:  # the common case: one policy applied
        return decisions[0]
    denials = [d for d in decisions if not d.allowed]
    warnings = tuple(w for d in decisions for w in d.warnings)
    annotations = tuple(a for d in decisions for a in d.audit_annotations)
    if denials:
        return Decision(
            allowed=False,
            message="; ".join(d.message for d in denials),
            code=denials[0].code,
            warnings=warnings,
            audit_annotations=annotations,
        )
    return Decision(
        allowed=True,
        patch=tuple(op for d in decisions for op in d.patch),
        warnings=warnings,
        audit_annotations=annotations,
    )
