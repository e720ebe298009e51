"""The nodeName policy's config section (`policies.nodeName`, with its binding guard), and
how the policy reads it from the whole config."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from volcano_guard.base.node_selectors import selector_set
from volcano_guard.webhook.sections import Mode, Name, NodeSelector, Section

if TYPE_CHECKING:  # config.py gathers this section: at run time, it imports this module
    from volcano_guard.webhook.config import Config


class BindingGuardConfig(Section, frozen=True):
    mode: Mode = "audit"
    allowedBinders: tuple[Name, ...] = ("system:serviceaccount:volcano-system:volcano-scheduler",)


class NodeNameConfig(Section, frozen=True, dict=True):  # dict: room for a cached_property
    mode: Mode = "enforce"
    action: Literal["deny", "rewrite"] = "deny"
    managedNodeSelectors: tuple[NodeSelector, ...] = ()
    unknownNodes: Literal["deny", "allow"] = "deny"
    exemptNamespaces: tuple[Name, ...] = ("kube-system",)
    exemptUsers: tuple[Name, ...] = ()
    exemptGroups: tuple[Name, ...] = ()
    allowDaemonSets: bool = True
    # Who creates DaemonSet pods: the DaemonSet controller's identity (kube-controller-manager
    # with --use-service-account-credentials; without it, system:kube-controller-manager).
    daemonSetControllers: tuple[Name, ...] = (
        "system:serviceaccount:kube-system:daemon-set-controller",
    )
    bindingGuard: BindingGuardConfig = msgspec.field(default_factory=BindingGuardConfig)

    @cached_property
    def managed_selectors(self) -> frozenset[str]:
        """managedNodeSelectors as Volcano's scheduler holds them (node_selectors)."""
        return selector_set(self.managedNodeSelectors)


def settings(config: Config) -> NodeNameConfig:
    return config.policies.nodeName


def with_settings(config: Config, **changes: Any) -> Config:
    """config with these keys of its nodeName section changed."""
    section = msgspec.structs.replace(settings(config), **changes)
    return msgspec.structs.replace(
        config, policies=msgspec.structs.replace(config.policies, nodeName=section)
    )


def first_scheduler(config: Config) -> str:
    """The scheduler a rewritten pod is handed to, and the one a denial advises."""
    return config.volcanoSchedulerNames[0]
