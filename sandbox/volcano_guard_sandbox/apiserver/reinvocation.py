"""The admission chain's reinvocation, as k8s.io/apiserver v0.36.3 runs it.

admission/reinvocation.go: the mutating plugins run in order (MutatingAdmissionPolicy, then
MutatingAdmissionWebhook: kube-apiserver's plugins.go AllOrderedPlugins); when one of them asks
for it (SetShouldReinvoke), the whole chain runs once more with IsReinvoke set, each plugin
calling again only what its own context says needs it.

Each plugin keeps such a context (webhook/mutating dispatcher.go webhookReinvokeContext,
policy/mutating reinvocationcontext.go policyReinvokeContext; the same logic): what it was last
given and left, the reinvocable hooks it called since the object last changed, and those to
call again.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

POLICY_PLUGIN = "MutatingAdmissionPolicy"
WEBHOOK_PLUGIN = "MutatingAdmissionWebhook"


@dataclass
class PluginReinvocation:
    """One plugin's reinvocation context."""

    last_output: Any = None
    previously_invoked: set[Hashable] = field(default_factory=set)
    to_reinvoke: set[Hashable] = field(default_factory=set)

    def output_changed(self, obj: Any) -> bool:
        """IsOutputChangedSince...: the object differs from what this plugin last left."""
        return bool(self.last_output != obj)

    def set_last_output(self, obj: Any) -> None:
        """Kept by reference, where Go keeps a deep copy: in the sandbox's chain an object
        handed on is never changed in place (a patch makes a new one, copied on write)."""
        self.last_output = obj

    def add_previously_invoked(self, key: Hashable) -> None:
        self.previously_invoked.add(key)

    def require_reinvoking_previously_invoked(self) -> None:
        self.to_reinvoke |= self.previously_invoked
        self.previously_invoked = set()

    def should_reinvoke(self, key: Hashable) -> bool:
        return key in self.to_reinvoke


@dataclass
class ReinvocationContext:
    """admission.ReinvocationContext: one request's, shared by the mutating plugins."""

    is_reinvoke: bool = False
    should_reinvoke: bool = False
    plugins: dict[str, PluginReinvocation] = field(default_factory=dict)

    def plugin(self, name: str) -> PluginReinvocation:
        return self.plugins.setdefault(name, PluginReinvocation())
