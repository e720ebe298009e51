"""The Volcano scheduler's `--node-selector key:value` flags, read as Volcano reads them.

Source: volcano-sh/volcano pkg/scheduler/cache/cache.go `updateNodeSelectors` (which entries are
kept, and how) and pkg/scheduler/cache/event_handlers.go `nodeCanAddCache` (which nodes match).
An entry is kept when it has a ':' that is not its last character; the key is the text before
the first ':' and the value the rest, each trimmed of white space. A node is managed when one of
its labels, written `key:value`, is a kept entry, or when no entry is kept at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def kept_selector(entry: str) -> str | None:
    """The `key:value` Volcano stores for this entry, or None when Volcano ignores it."""
    index = entry.find(":")
    if index < 0 or index >= len(entry) - 1:
        return None
    return f"{entry[:index].strip()}:{entry[index + 1 :].strip()}"


def selector_set(entries: Iterable[str]) -> frozenset[str]:
    """Every kept entry, as Volcano's scheduler cache holds them."""
    kept = (kept_selector(entry) for entry in entries)
    return frozenset(selector for selector in kept if selector is not None)


def is_managed(labels: Mapping[str, str], selectors: frozenset[str]) -> bool:
    """nodeCanAddCache: no kept selector manages every node, else any label that is one."""
    if not selectors:
        return True
    return any(f"{key}:{value}" in selectors for key, value in labels.items())
