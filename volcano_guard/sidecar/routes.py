"""Which requests touch a coalesced resource, from the URL alone (as the apiserver's
RequestInfoFactory reads it), so every other request passes through without being decoded."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

from volcano_guard.base.apipaths import group_version_path
from volcano_guard.sidecar.coalescer import ObjectKey

DEFAULT_COALESCED = ("scheduling.volcano.sh/v1beta1/queues",)


@dataclass(frozen=True)
class Route:
    resource: str  # group/version/plural of a coalesced resource
    namespace: str
    name: str
    subresource: str
    watch: bool

    @property
    def key(self) -> ObjectKey:
        return ObjectKey(self.resource, self.namespace, self.name)


def parse_resource(text: str) -> str:
    """GROUP/VERSION/RESOURCE (core: v1/RESOURCE) -> the canonical key string; ValueError."""
    parts = text.strip("/").split("/")
    if len(parts) == 2:
        parts = ["", *parts]
    if len(parts) != 3 or not all(parts[1:]):
        raise ValueError(f"{text!r} is not GROUP/VERSION/RESOURCE")
    return "/".join(parts)


def object_path(key: ObjectKey, subresource: str = "") -> str:
    """The object's URL path, its name and namespace percent-encoded: they come decoded from
    a client's URL, where `a%3Fb` or `%2E%2E` would otherwise become a query or another path."""
    group, version, plural = key.resource.split("/")
    prefix = group_version_path(group, version)
    scope = f"/namespaces/{quote(key.namespace, safe='')}" if key.namespace else ""
    tail = f"/{subresource}" if subresource else ""
    return f"{prefix}{scope}/{plural}/{quote(key.name, safe='')}{tail}"


def classify(path: str, query_watch: bool, coalesced: frozenset[str]) -> Route | None:
    """The Route if path addresses a coalesced resource, else None."""
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    elif len(parts) >= 2 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    else:
        return None
    watch = query_watch
    if rest[:1] == ["watch"]:
        watch, rest = True, rest[1:]
    namespace = ""
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        return None
    resource = f"{group}/{version}/{rest[0]}"
    if resource not in coalesced:
        return None
    name = rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    if name in (".", "..") or namespace in (".", ".."):
        return None  # never an object's name (ValidatePathSegmentName): the server answers
    return Route(resource, namespace, name, subresource, watch)
