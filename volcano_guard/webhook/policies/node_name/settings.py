"""The nodeName policy's config section, as the policy reads it."""

from __future__ import annotations

from volcano_guard.webhook.config import Config, NodeNameConfig


def settings(config: Config) -> NodeNameConfig:
    return config.policies.nodeName


def first_scheduler(config: Config) -> str:
    """The scheduler a rewritten pod is handed to, and the one a denial advises."""
    return config.volcanoSchedulerNames[0]
