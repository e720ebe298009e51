"""A minimal OpenAPI v3 per group-version: enough for kubectl to find each kind's operations.

kubectl (1.27+) reads /openapi/v3 before create/replace/apply. When a kind's PATCH operation
declares the `fieldValidation` query parameter, kubectl leaves validation to the server and sends
`fieldValidation=Strict`; the schemas therefore only name the kinds and keep unknown fields.
"""

from __future__ import annotations

import hashlib
import json
from functools import cache
from typing import Any

from aiohttp import web

from volcano_guard.base.status import status_response
from volcano_guard_sandbox.apiserver.resources import ResourceType
from volcano_guard_sandbox.apiserver.versions import VERSION_KEY, KubernetesVersion

_FIELD_VALIDATION = {
    "name": "fieldValidation",
    "in": "query",
    "schema": {"type": "string", "uniqueItems": True},
    "description": "Ignore, Warn or Strict: how unknown or duplicate fields are handled.",
}


def _key(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def _schema_name(resource: ResourceType) -> str:
    group = resource.group or "core"
    return f"io.volcano-guard.sandbox.{group}.{resource.version}.{resource.kind}"


def _operation(resource: ResourceType, action: str) -> dict[str, Any]:
    ref = {"$ref": f"#/components/schemas/{_schema_name(resource)}"}
    return {
        "operationId": f"{action}{resource.kind}",
        "parameters": [_FIELD_VALIDATION],
        "requestBody": {"content": {"application/json": {"schema": ref}}},
        "responses": {
            "200": {"description": "OK", "content": {"application/json": {"schema": ref}}}
        },
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {
            "group": resource.group,
            "version": resource.version,
            "kind": resource.kind,
        },
    }


@cache
def build_document(group: str, version: str, played: KubernetesVersion) -> dict[str, Any]:
    paths: dict[str, Any] = {}
    schemas: dict[str, Any] = {}
    for resource in played.group_versions()[(group, version)]:
        base = resource.prefix()
        scope = f"{base}/namespaces/{{namespace}}" if resource.namespaced else base
        collection, item = f"{scope}/{resource.plural}", f"{scope}/{resource.plural}/{{name}}"
        paths[collection] = {"post": _operation(resource, "post")}
        paths[item] = {"put": _operation(resource, "put"), "patch": _operation(resource, "patch")}
        if resource.status_subresource:
            paths[f"{item}/status"] = {
                "put": _operation(resource, "put"),
                "patch": _operation(resource, "patch"),
            }
        schemas[_schema_name(resource)] = {
            "type": "object",
            "description": f"{resource.kind} (schema not modelled by the sandbox)",
            "x-kubernetes-preserve-unknown-fields": True,
            "x-kubernetes-group-version-kind": [
                {"group": resource.group, "version": resource.version, "kind": resource.kind}
            ],
        }
    return {
        "openapi": "3.0.0",
        "info": {"title": "volcano-guard sandbox", "version": "v1"},
        "paths": paths,
        "components": {"schemas": schemas},
    }


def _hash(document: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()[:32].upper()


async def index(request: web.Request) -> web.Response:
    paths = {}
    played = request.app[VERSION_KEY]
    for group, version in played.group_versions():
        key = _key(group, version)
        digest = _hash(build_document(group, version, played))
        paths[key] = {"serverRelativeURL": f"/openapi/v3/{key}?hash={digest}"}
    return web.json_response({"paths": paths})


async def document(request: web.Request) -> web.Response:
    path = request.match_info["path"]
    played = request.app[VERSION_KEY]
    for group, version in played.group_versions():
        if _key(group, version) == path:
            return web.json_response(build_document(group, version, played))
    return status_response(404, f"no OpenAPI document for {path}")
