"""Strategic merge patch for the built-in kinds, as far as the sandbox's clients use it.

Maps merge as in a JSON merge patch; lists with a patch merge key (containers by name, ...)
merge element by element, `$patch: delete` removes an element, `$patch: replace` replaces the
whole list or map; other lists are replaced. `$setElementOrder/FIELD` orders a merged list: the
elements it names in its order, then any others as they were. Directives the sandbox does not
act on (`$retainKeys`, `$deleteFromPrimitiveList/...`) are dropped.
"""

from __future__ import annotations

import copy
from typing import Any

# Field name -> merge key, for the lists kubectl and client-go patch in practice. The
# apiserver keys these by Go type; keying by field name is exact for the kinds served here.
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
    "imagePullSecrets": "name",
    "conditions": "type",
    "ownerReferences": "uid",
    "addresses": "type",
    "taints": "key",
    "containerStatuses": "name",
    "initContainerStatuses": "name",
    # admissionregistration/v1: a configuration's webhooks, and a webhook's or a policy's
    # matchConditions and variables (kubectl apply sends only what changed, by name)
    "webhooks": "name",
    "matchConditions": "name",
    "variables": "name",
}
ORDER = "$setElementOrder/"
# Lists of scalars that strategic merge patch merges as sets (patchStrategy: merge).
MERGED_SCALAR_LISTS = {"finalizers"}


class StrategicPatchError(ValueError):
    pass


def apply_strategic_merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        raise StrategicPatchError("a strategic merge patch must be a JSON object")
    return _merge_map(target if isinstance(target, dict) else {}, patch)


def _merge_map(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if not k.startswith("$")}
    if patch.get("$patch") == "delete":
        return {}
    result = copy.deepcopy(target)
    for key, value in patch.items():
        if key.startswith(ORDER) and key[len(ORDER) :] in MERGE_KEYS:
            continue  # applied below, once the list is merged
        if key.startswith("$"):
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            current = result.get(key)
            result[key] = _merge_map(current if isinstance(current, dict) else {}, value)
        elif isinstance(value, list) and key in MERGE_KEYS:
            current = result.get(key)
            result[key] = _merge_list(
                current if isinstance(current, list) else [], value, MERGE_KEYS[key]
            )
        elif isinstance(value, list) and key in MERGED_SCALAR_LISTS:
            current = result.get(key)
            current = current if isinstance(current, list) else []
            result[key] = current + [v for v in value if v not in current]
        else:
            result[key] = copy.deepcopy(value)
    for key, order in patch.items():
        field = key[len(ORDER) :] if key.startswith(ORDER) else ""
        if field in MERGE_KEYS and isinstance(order, list) and isinstance(result.get(field), list):
            result[field] = _ordered(result[field], order, MERGE_KEYS[field])
    return result


def _ordered(items: list[Any], order: list[Any], key: str) -> list[Any]:
    """items with those order names first, in its order; the rest after, as they were."""
    wanted = [entry.get(key) for entry in order if isinstance(entry, dict)]
    position = {name: index for index, name in enumerate(wanted)}

    def rank(pair: tuple[int, Any]) -> tuple[int, int]:
        index, item = pair
        name = item.get(key) if isinstance(item, dict) else None
        return (position[name], 0) if name in position else (len(position), index)

    return [item for _, item in sorted(enumerate(items), key=rank)]


def _merge_list(target: list[Any], patch: list[Any], key: str) -> list[Any]:
    if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
        return [
            _strip(item)
            for item in patch
            if not (isinstance(item, dict) and item.get("$patch") == "replace")
        ]
    result = copy.deepcopy(target)
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise StrategicPatchError(f"list elements must be objects with the merge key {key!r}")
        index = next(
            (
                i
                for i, existing in enumerate(result)
                if isinstance(existing, dict) and existing.get(key) == item[key]
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if index is not None:
                result.pop(index)
        elif index is None:
            result.append(_strip(item))
        else:
            result[index] = _merge_map(result[index], item)
    return result


def _strip(item: Any) -> Any:
    if isinstance(item, dict):
        return {k: _strip(v) for k, v in item.items() if not k.startswith("$")}
    return copy.deepcopy(item)
