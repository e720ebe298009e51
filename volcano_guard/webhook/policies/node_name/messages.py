"""The nodeName policy's denials, in words: one text for the webhook's answer and for the
in-server check's messageExpression, whose parts may be CEL Exprs (webhook.cel.concat)."""

from __future__ import annotations

from volcano_guard.webhook.policies.node_name.settings import NodeNameConfig

ANONYMOUS = "an anonymous user"


def reason_text(reason: str) -> str:
    return {
        "managed": "the node is managed by the Volcano scheduler",
        "unknown": "the node is not known to volcano-guard (policies.nodeName.unknownNodes: deny)",
        "not synced": "volcano-guard's node cache is not synced (starting up, or the API server "
        "is unreachable; failClosed: true)",
        "pending": "volcano-guard has not finished publishing node states for the API server "
        "(starting up)",
    }[reason]


def message_parts(
    subject: tuple[str, ...], node: str, reason: str, scheduler: str
) -> tuple[str, ...]:
    """The denial's words; subject and node may be CEL Exprs (the in-server check's)."""
    return (
        *subject,
        ' sets spec.nodeName "',
        node,
        f'": {reason_text(reason)}, and a pod '
        "bound directly bypasses Volcano's resource accounting. Remove spec.nodeName; to "
        'run on that node use nodeSelector kubernetes.io/hostname: "',
        node,
        f'" or a required node affinity, with schedulerName "{scheduler}"',
    )


def binding_message_parts(
    binder: str, pod: str, node: str, reason: str, config: NodeNameConfig
) -> tuple[str, ...]:
    """The binding denial's words; binder, pod and node may be CEL Exprs."""
    allowed = ", ".join(config.bindingGuard.allowedBinders)
    return (
        binder,
        ' may not bind pod "',
        pod,
        '" to node "',
        node,
        f'": {reason_text(reason)}; only {allowed} may bind there (add the binder to '
        "policies.nodeName.bindingGuard.allowedBinders if it is a Volcano scheduler)",
    )
