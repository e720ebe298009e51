"""Decoding untrusted JSON bodies: bounded size and bounded nesting, clear errors."""

from __future__ import annotations

import json
from typing import Any

MAX_DEPTH = 100  # Kubernetes objects nest ~20 deep; anything near 100 is an attack or a bug


class BodyError(ValueError):
    """The body is not acceptable JSON; the message says why."""


def decode(body: bytes, *, max_depth: int = MAX_DEPTH) -> Any:
    """Decode a JSON document, refusing invalid UTF-8/JSON and nesting deeper than max_depth."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BodyError(f"body is not UTF-8: {exc.reason} at byte {exc.start}") from None
    try:
        document = json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise BodyError(f"JSON is nested deeper than {max_depth} levels") from None
    except json.JSONDecodeError as exc:
        raise BodyError(f"body is not valid JSON: {exc.msg} at line {exc.lineno} "
                        f"column {exc.colno}") from None
    if nesting_depth(document, limit=max_depth) > max_depth:
        raise BodyError(f"JSON is nested deeper than {max_depth} levels")
    return document


def _refuse_constant(name: str) -> Any:
    raise BodyError(f"body is not valid JSON: {name} is not a JSON number")


def nesting_depth(document: Any, *, limit: int) -> int:
    """Depth of containers in document, level by level; stops counting once past limit."""
    level = [document] if type(document) in _CONTAINERS else []
    depth = 0
    while level and depth <= limit:
        depth += 1
        children: list[Any] = []
        for node in level:
            values = node.values() if type(node) is dict else node
            children.extend(v for v in values if type(v) in _CONTAINERS)
        level = children
    return depth


_CONTAINERS = (dict, list)  # json.loads makes exactly these, never subclasses
