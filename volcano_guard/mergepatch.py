"""JSON Merge Patch (RFC 7386): used by the sandbox to apply patches and by the sidecar to build
and merge status intents."""

from __future__ import annotations

import copy
from typing import Any


def apply_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 MergePatch(target, patch), returning a new document; inputs are not modified."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = apply_merge_patch(result.get(key), value)
    return result


def create_merge_patch(original: Any, modified: Any) -> Any:
    """The merge patch that turns original into modified (None values in modified cannot be
    expressed and are treated as removals)."""
    if not isinstance(original, dict) or not isinstance(modified, dict):
        return copy.deepcopy(modified)
    patch: dict[str, Any] = {}
    for key in original.keys() - modified.keys():
        patch[key] = None
    for key, value in modified.items():
        if key not in original:
            patch[key] = copy.deepcopy(value)
        elif original[key] != value:
            patch[key] = create_merge_patch(original[key], value)
    return patch
