"""Server-side apply and managedFields, the subset of structured-merge-diff the guard's kinds use.

What is modelled (Kubernetes staging/src/k8s.io/apimachinery/pkg/util/managedfields/internal
structuredmerge.go Apply and Update, and sigs.k8s.io/structured-merge-diff merge/update.go
Updater.Apply; an apply to an absent object creates it: staging/src/k8s.io/apiserver/pkg/
endpoints/handlers/patch.go PatchResource):

- An applied configuration's fields are a set of paths. Maps are granular (each key its own
  field); lists of the built-in kinds with merge keys are associative (containers,
  initContainers, ephemeralContainers, env, volumes, imagePullSecrets, webhooks,
  matchConditions by name; volumeMounts by mountPath; ports by containerPort+protocol, a
  Service's by port+protocol); every other list is atomic (one field, replaced whole), as are
  all lists of custom resources (the sandbox keeps no CRD schema).
- The applied object is merged into the live one (entries of a keyed list that share the key an
  applied entry merges into become that one entry, as structured-merge-diff consolidates them;
  a MutatingAdmissionPolicy's ApplyConfiguration merges the same way); a field another manager
  owns with a different value is a conflict (409, kube's message) unless force, which takes it
  over; a field this manager applied before and applies no more is removed unless another
  manager owns it.
- managedFields holds one entry per manager and operation (Apply, or Update for writes other
  than apply), as FieldsV1. Update entries are kept only on objects an apply has touched (so
  objects never applied, 100k pods among them, carry none): a write to such an object gives
  its manager the fields it changed.

Not modelled: apply to a subresource (refused with one line), sets of scalars (finalizers are
atomic here), and version conversion of managed fields.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Mapping
from typing import Any

from volcano_guard_sandbox.apiserver.store import OBJECT_META_FIELDS, ApiError, now_rfc3339

Path = tuple[str, ...]
# Field name -> the key fields of its list's elements (kube's +listMapKey), built-in kinds only.
LIST_KEYS: dict[str, tuple[str, ...]] = {
    "containers": ("name",),
    "initContainers": ("name",),
    "ephemeralContainers": ("name",),
    "env": ("name",),
    "volumes": ("name",),
    "imagePullSecrets": ("name",),
    "volumeMounts": ("mountPath",),
    "webhooks": ("name",),
    "matchConditions": ("name",),
    "ports": ("containerPort", "protocol"),
}
SERVICE_PORT_KEYS = ("port", "protocol")
# Set by the server, never owned by a manager (fieldmanager's stripMeta and ignored fields).
_SERVER_METADATA = OBJECT_META_FIELDS - {
    "generateName",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
}


def manager_of(query: Mapping[str, str], user_agent: str) -> str:
    """fieldManager from the query, else the user agent's first word (Kubernetes
    staging/src/k8s.io/apiserver/pkg/endpoints/handlers/rest.go managerOrUserAgent)."""
    explicit = query.get("fieldManager") or ""
    return explicit or user_agent.split("/")[0][:128] or "unknown"


def check_manager(query: Mapping[str, str]) -> None:
    """An apply names its manager (Kubernetes staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/
    validation/validation.go ValidatePatchOptions)."""
    if not query.get("fieldManager"):
        raise ApiError(
            422,
            "Invalid",
            'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: '
            "is required for apply patch",
        )


# -- field sets -----------------------------------------------------------------------------


def _keys_for(field: str, items: list[Any], builtin: bool) -> tuple[str, ...] | None:
    if not builtin or field not in LIST_KEYS or not all(isinstance(i, dict) for i in items):
        return None
    if field == "ports" and any("containerPort" not in i for i in items):
        return SERVICE_PORT_KEYS
    return LIST_KEYS[field]


def _element_key(item: dict[str, Any], keys: tuple[str, ...], field: str) -> str:
    values = {k: item.get(k, "TCP" if k == "protocol" else None) for k in keys}
    if any(v is None for v in values.values()):
        missing = next(k for k, v in values.items() if v is None)
        raise ApiError(
            422,
            "Invalid",
            f'.{field}: element {json.dumps(item, sort_keys=True)} omits the key field "{missing}"',
        )
    return "k:" + json.dumps(values, sort_keys=True, separators=(",", ":"))


def leaves(obj: dict[str, Any], builtin: bool) -> dict[Path, Any]:
    """Every owned field of an object: path -> its value (a list element's own path -> None)."""
    fields: dict[Path, Any] = {}
    for key, value in obj.items():
        if key in ("apiVersion", "kind", "status"):
            continue
        if key == "metadata" and isinstance(value, dict):
            meta = {k: v for k, v in value.items() if k not in _SERVER_METADATA}
            fields.update(_walk(meta, ("f:metadata",), builtin))
        else:
            fields.update(_walk({key: value}, (), builtin))
    return fields


def _walk(node: dict[str, Any], path: Path, builtin: bool) -> Iterator[tuple[Path, Any]]:
    for key, value in node.items():
        here = (*path, f"f:{key}")
        if isinstance(value, dict) and value:
            yield from _walk(value, here, builtin)
        elif isinstance(value, list) and (keys := _keys_for(key, value, builtin)):
            seen: set[str] = set()
            for item in value:
                element = _element_key(item, keys, key)
                if element in seen:
                    raise ApiError(
                        422, "Invalid", f".{key}: duplicate entries for key {element[2:]}"
                    )
                seen.add(element)
                yield (*here, element), None
                yield from _walk(item, (*here, element), builtin)
        else:
            yield here, value


def to_fields_v1(paths: set[Path]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for path in sorted(paths):
        node = tree
        for part in path:
            node = node.setdefault(part, {})
        if path and path[-1].startswith("k:"):
            node.setdefault(".", {})
    return _drop_lone_dots(tree)


def _drop_lone_dots(tree: dict[str, Any]) -> dict[str, Any]:
    out = {k: _drop_lone_dots(v) for k, v in tree.items()}
    return {} if list(out) == ["."] else out


def from_fields_v1(tree: dict[str, Any], path: Path = ()) -> set[Path]:
    paths: set[Path] = set()
    for part, child in tree.items():
        if part == ".":
            paths.add(path)
            continue
        here = (*path, part)
        if not child or part.startswith("k:"):
            paths.add(here)
        paths |= from_fields_v1(child, here)
    return paths


def path_text(path: Path) -> str:
    """structured-merge-diff fieldpath.Path.String: .spec.containers[name="c"].image."""
    text = ""
    for part in path:
        kind, _, name = part.partition(":")
        if kind == "f":
            text += f".{name}"
        else:
            pairs = json.loads(name)
            text += "[" + ",".join(f"{k}={json.dumps(v)}" for k, v in pairs.items()) + "]"
    return text


# -- the object ------------------------------------------------------------------------------


def _child(node: Any, part: str) -> Any:
    kind, _, name = part.partition(":")
    if kind == "f":
        return node.get(name) if isinstance(node, dict) else None
    wanted = json.loads(name)
    if not isinstance(node, list):
        return None
    for item in node:
        if isinstance(item, dict) and all(
            item.get(k, "TCP" if k == "protocol" else None) == v for k, v in wanted.items()
        ):
            return item
    return None


def value_at(obj: dict[str, Any], path: Path) -> Any:
    node: Any = obj
    for part in path:
        node = _child(node, part)
        if node is None:
            return None
    return node


def _remove(obj: dict[str, Any], path: Path) -> None:
    parent = value_at(obj, path[:-1]) if len(path) > 1 else obj
    kind, _, name = path[-1].partition(":")
    if kind == "f" and isinstance(parent, dict):
        parent.pop(name, None)
    elif kind == "k" and isinstance(parent, list):
        element = _child(parent, path[-1])
        parent[:] = [item for item in parent if item is not element]


def merge(live: Any, applied: Any, field: str, builtin: bool) -> Any:
    if isinstance(live, dict) and isinstance(applied, dict):
        out = copy.deepcopy(live)
        for key, value in applied.items():
            out[key] = merge(live.get(key), value, key, builtin)
        return out
    keys = _keys_for(field, applied, builtin) if isinstance(applied, list) else None
    if keys and isinstance(live, list) and all(isinstance(i, dict) for i in live):
        out_list = copy.deepcopy(live)
        for item in applied:
            element = _element_key(item, keys, field)
            found = [i for i, x in enumerate(out_list) if _element_key(x, keys, field) == element]
            if not found:
                out_list.append(copy.deepcopy(item))
                continue
            out_list[found[0]] = merge(out_list[found[0]], item, "", builtin)
            for index in reversed(found[1:]):  # SMD: a key merged into is one entry after
                del out_list[index]
        return out_list
    return copy.deepcopy(applied)


# -- managedFields ---------------------------------------------------------------------------


def entries(obj: dict[str, Any]) -> list[dict[str, Any]]:
    managed = obj.get("metadata", {}).get("managedFields")
    return [e for e in managed if isinstance(e, dict)] if isinstance(managed, list) else []


def _owners(obj: dict[str, Any]) -> list[tuple[dict[str, Any], set[Path]]]:
    return [(e, from_fields_v1(e.get("fieldsV1") or {})) for e in entries(obj)]


def _entry(manager: str, operation: str, api_version: str, paths: set[Path]) -> dict[str, Any]:
    return {
        "manager": manager,
        "operation": operation,
        "apiVersion": api_version,
        "time": now_rfc3339(),
        "fieldsType": "FieldsV1",
        "fieldsV1": to_fields_v1(paths),
    }


def _label(entry: dict[str, Any]) -> str:
    """printManager (see _conflict): an Update manager is named with its version and time."""
    name = json.dumps(entry.get("manager", ""))
    if entry.get("operation") == "Update":
        return f"{name} using {entry.get('apiVersion')} at {entry.get('time')}"
    return name


def _conflict(conflicts: list[tuple[str, Path]]) -> ApiError:
    """Kubernetes staging/src/k8s.io/apimachinery/pkg/util/managedfields/internal/conflict.go
    NewConflictError, getConflictMessage, printManager."""
    if len(conflicts) == 1:
        manager, path = conflicts[0]
        message = f"Apply failed with 1 conflict: conflict with {manager}: {path_text(path)}"
    else:
        lines: list[str] = []
        for manager in sorted({m for m, _ in conflicts}):
            lines.append(f"conflicts with {manager}:")
            lines += [f"- {path_text(p)}" for m, p in conflicts if m == manager]
        message = f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)
    causes = [
        {"reason": "FieldManagerConflict", "message": f"conflict with {m}", "field": path_text(p)}
        for m, p in conflicts
    ]
    return ApiError(409, "Conflict", message, {"causes": causes})


def apply(
    live: dict[str, Any] | None,
    applied: dict[str, Any],
    manager: str,
    force: bool,
    builtin: bool,
) -> dict[str, Any]:
    """The object after `manager` applies `applied` to `live` (None: absent), managedFields
    included; ApiError 409 on a conflict without force."""
    current = live or {"metadata": {}}
    api_version = str(applied.get("apiVersion") or "")
    wanted = leaves(applied, builtin)
    owners = _owners(current)
    mine = next(
        (paths for e, paths in owners if (e["manager"], e.get("operation")) == (manager, "Apply")),
        set(),
    )
    conflicts: list[tuple[str, Path]] = []
    taken: set[Path] = set()
    for entry, paths in owners:
        if (entry["manager"], entry.get("operation")) == (manager, "Apply"):
            continue
        for path in sorted(paths & set(wanted)):
            if path[-1].startswith("k:") or value_at(current, path) == wanted[path]:
                continue  # the same value: shared ownership
            taken.add(path)
            if not force:
                conflicts.append((_label(entry), path))
    if conflicts:
        raise _conflict(conflicts)
    body = {k: v for k, v in applied.items() if k not in ("apiVersion", "kind", "status")}
    result = merge(current, body, "", builtin)
    others: set[Path] = set()
    for entry, paths in owners:
        if (entry["manager"], entry.get("operation")) != (manager, "Apply"):
            others |= paths - taken
    dropped = mine - set(wanted) - others
    for path in sorted(dropped, key=len, reverse=True):
        if not any(path[:n] in dropped for n in range(1, len(path))):
            _remove(result, path)  # a removed list element takes its fields with it
    new_entries: list[dict[str, Any]] = []
    replaced = False
    for entry, paths in owners:
        if (entry["manager"], entry.get("operation")) == (manager, "Apply"):
            fresh = _entry(manager, "Apply", api_version, set(wanted))
            same = (entry.get("apiVersion"), entry.get("fieldsV1")) == (
                api_version,
                fresh["fieldsV1"],
            )
            new_entries.append(entry if same else fresh)  # a no-op apply keeps its time
            replaced = True
        elif paths - taken:
            new_entries.append({**entry, "fieldsV1": to_fields_v1(paths - taken)})
    if not replaced:
        new_entries.append(_entry(manager, "Apply", api_version, set(wanted)))
    result.setdefault("metadata", {})["managedFields"] = new_entries
    return result


def record_update(old: dict[str, Any], new: dict[str, Any], manager: str, builtin: bool) -> None:
    """A write other than apply to an object with managedFields: its manager (operation Update)
    owns the fields it changed; fields it removed leave every manager (fieldmanager's
    managedFieldsUpdater)."""
    owners = _owners(old)
    if not owners:
        new.get("metadata", {}).pop("managedFields", None)
        return
    before, after = leaves(old, builtin), leaves(new, builtin)
    changed = {p for p, v in after.items() if p not in before or before[p] != v}
    gone = set(before) - set(after)
    api_version = str(new.get("apiVersion") or old.get("apiVersion") or "")
    result: list[dict[str, Any]] = []
    found = False
    for entry, paths in owners:
        if (entry["manager"], entry.get("operation")) == (manager, "Update"):
            paths = paths | changed
            found = True
        else:
            paths = paths - changed
        paths -= gone
        if paths:
            result.append({**entry, "fieldsV1": to_fields_v1(paths)})
    if not found and changed:
        result.append(_entry(manager, "Update", api_version, changed))
    new["metadata"]["managedFields"] = result
