"""RFC 6902 JSON Patch: building operations (webhook /mutate) and applying them (tests, sandbox)."""

from __future__ import annotations

import copy
from typing import Any

import orjson

Operation = dict[str, Any]
# kube-apiserver's bounds (k8s.io/apiserver pkg/endpoints/handlers/patch.go
# maxJSONPatchOperations: 413; pkg/server/config.go JSONPatchMaxCopyBytes, 3 MiB, the limit of
# json-patch's AccumulatedCopySizeLimit): each copy can double a document, so 30 of them in a
# 1.5 KB patch would run for hours.
MAX_OPERATIONS = 10_000
MAX_COPIED_BYTES = 3 * 1024 * 1024


class JsonPatchError(ValueError):
    """A patch that cannot be applied to the document."""


class JsonPatchTooLarge(JsonPatchError):
    """A patch of more operations than kube-apiserver applies (it answers 413)."""


def escape(token: str) -> str:
    """Escape one reference token for a JSON Pointer (RFC 6901)."""
    return token.replace("~", "~0").replace("/", "~1")


def pointer(*tokens: str | int) -> str:
    """Build a JSON Pointer from unescaped tokens: pointer("metadata", "annotations", "a/b")."""
    return "".join("/" + escape(str(token)) for token in tokens)


def add(path: str, value: Any) -> Operation:
    return {"op": "add", "path": path, "value": value}


def replace(path: str, value: Any) -> Operation:
    return {"op": "replace", "path": path, "value": value}


def remove(path: str) -> Operation:
    return {"op": "remove", "path": path}


def _tokens(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise JsonPatchError(f"path {path!r} must start with '/'")
    return [t.replace("~1", "/").replace("~0", "~") for t in path[1:].split("/")]


def _index(container: list[Any], token: str, *, for_insert: bool) -> int:
    if for_insert and token == "-":
        return len(container)
    if not token.isdigit() or (token != "0" and token.startswith("0")):
        raise JsonPatchError(f"{token!r} is not an array index")
    index = int(token)
    limit = len(container) if for_insert else len(container) - 1
    if index > limit:
        raise JsonPatchError(f"array index {index} is out of range")
    return index


def _parent(doc: Any, path: str) -> tuple[Any, str]:
    tokens = _tokens(path)
    if not tokens:
        raise JsonPatchError("the operation needs a path below the document root")
    node = doc
    for token in tokens[:-1]:
        node = _child(node, token, path)
    return node, tokens[-1]


def _child(node: Any, token: str, path: str) -> Any:
    if isinstance(node, dict):
        if token not in node:
            raise JsonPatchError(f"path {path!r} does not exist")
        return node[token]
    if isinstance(node, list):
        return node[_index(node, token, for_insert=False)]
    raise JsonPatchError(f"path {path!r} does not exist")


def _get(doc: Any, path: str) -> Any:
    node = doc
    for token in _tokens(path):
        node = _child(node, token, path)
    return node


def _add(doc: Any, path: str, value: Any) -> Any:
    if path == "":
        return value
    parent, token = _parent(doc, path)
    if isinstance(parent, dict):
        parent[token] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, token, for_insert=True), value)
    else:
        raise JsonPatchError(f"cannot add at {path!r}: parent is not an object or array")
    return doc


def _remove(doc: Any, path: str) -> tuple[Any, Any]:
    parent, token = _parent(doc, path)
    if isinstance(parent, dict):
        if token not in parent:
            raise JsonPatchError(f"cannot remove {path!r}: it does not exist")
        return doc, parent.pop(token)
    if isinstance(parent, list):
        return doc, parent.pop(_index(parent, token, for_insert=False))
    raise JsonPatchError(f"cannot remove {path!r}: it does not exist")


def apply_patch(document: Any, patch: Any) -> Any:
    """Return a patched deep copy of document; the input is never modified."""
    if not isinstance(patch, list):
        raise JsonPatchError("a JSON patch must be an array of operations")
    if len(patch) > MAX_OPERATIONS:
        raise JsonPatchTooLarge(
            f"the allowed maximum operations in a JSON patch is {MAX_OPERATIONS:,}, "
            f"got {len(patch):,}"
        )
    doc = copy.deepcopy(document)
    copied = 0
    for number, op in enumerate(patch):
        if not isinstance(op, dict) or not isinstance(op.get("path"), str):
            raise JsonPatchError(f"operation {number} needs an object with a string 'path'")
        if op.get("op") == "copy":
            copied += _copy_size(doc, op, MAX_COPIED_BYTES - copied)
        doc = _apply_one(doc, op)
    return doc


def _copy_size(doc: Any, op: dict[str, Any], room: int) -> int:
    """The bytes a copy operation copies, as JSON; JsonPatchError once the patch's copies pass
    MAX_COPIED_BYTES in all."""
    source = op.get("from")
    if not isinstance(source, str):
        return 0  # _apply_one names the problem
    size = len(orjson.dumps(_get(doc, source)))
    if size > room:
        raise JsonPatchError(
            f"the copies of the patch would pass {MAX_COPIED_BYTES:,} bytes, the most "
            "kube-apiserver copies"
        )
    return size


def _apply_one(doc: Any, op: dict[str, Any]) -> Any:
    kind, path = op.get("op"), op["path"]
    if kind in ("add", "replace", "test") and "value" not in op:
        raise JsonPatchError(f"{kind} at {path!r} needs a 'value'")
    if kind == "add":
        return _add(doc, path, copy.deepcopy(op["value"]))
    if kind == "remove":
        return _remove(doc, path)[0]
    if kind == "replace":
        if path == "":
            return copy.deepcopy(op["value"])
        doc, _ = _remove(doc, path)
        return _add(doc, path, copy.deepcopy(op["value"]))
    if kind in ("move", "copy"):
        source = op.get("from")
        if not isinstance(source, str):
            raise JsonPatchError(f"{kind} to {path!r} needs a string 'from'")
        if kind == "move":
            if path.startswith(source + "/"):
                raise JsonPatchError(f"cannot move {source!r} into its own child {path!r}")
            doc, value = _remove(doc, source)
        else:
            value = copy.deepcopy(_get(doc, source))
        return _add(doc, path, value)
    if kind == "test":
        if _get(doc, path) != op["value"]:
            raise JsonPatchError(f"test at {path!r} failed")
        return doc
    raise JsonPatchError(f"unknown operation {kind!r}")
