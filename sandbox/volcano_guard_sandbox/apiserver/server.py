"""The sandbox's REST surface: discovery, OpenAPI, CRUD, patch, watch, faults and stats.

Every request for a resource is parsed into a RequestInfo (verb, resource, namespace, name,
subresource) the way the apiserver's RequestInfoFactory does, counted, passed through fault
injection, then served from the Store. Every error body is a Kubernetes Status.
"""

from __future__ import annotations

import asyncio
import base64
import bisect
import contextlib
import json
import logging
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from aiohttp import web

from volcano_guard.base.jsonbody import BodyError, decode, decode_yaml
from volcano_guard.base.status import status_body, status_response
from volcano_guard_sandbox.apiserver import (
    apply,
    crd_schemas,
    openapi,
    policy_metrics,
    protobuf,
    writes,
)
from volcano_guard_sandbox.apiserver.admission import Dispatcher
from volcano_guard_sandbox.apiserver.authn import Authenticator
from volcano_guard_sandbox.apiserver.endpoints import ServiceEndpoints
from volcano_guard_sandbox.apiserver.faults import FaultRule, Faults, Stats
from volcano_guard_sandbox.apiserver.matching import User
from volcano_guard_sandbox.apiserver.resources import ResourceType
from volcano_guard_sandbox.apiserver.selectors import (
    SelectorError,
    parse_field_selector,
    parse_label_selector,
)
from volcano_guard_sandbox.apiserver.store import (
    APPLY_PATCH,
    MERGE_PATCH,
    OBJECT_META_FIELDS,
    SELECTABLE_FIELDS,
    ApiError,
    Store,
    Stored,
    encode_event,
)
from volcano_guard_sandbox.apiserver.versions import DEFAULT, VERSION_KEY, KubernetesVersion

log = logging.getLogger("volcano_guard_sandbox.apiserver")
STORE_KEY = web.AppKey("store", Store)
FAULTS_KEY = web.AppKey("faults", Faults)
STATS_KEY = web.AppKey("stats", Stats)
AUTHENTICATOR_KEY = web.AppKey("authenticator", Authenticator)
DISPATCHER_KEY = web.AppKey("dispatcher", Dispatcher)
USER_KEY = web.RequestKey("user", User)
SETTINGS_KEY: web.AppKey[SandboxSettings] = web.AppKey("settings")
MAX_BODY = 3 * 1024 * 1024  # the apiserver's request size limit for etcd-bound objects
WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})


class AuditLog:
    """The most recent writes, each with who made it, its answer and admission's annotations."""

    def __init__(self, size: int) -> None:
        self._events: deque[dict[str, Any]] = deque(maxlen=size)

    def append(self, event: dict[str, Any]) -> None:
        self._events.append(event)

    def events(self) -> list[dict[str, Any]]:
        return list(self._events)


AUDIT_KEY = web.AppKey("audit", AuditLog)


@dataclass(frozen=True, kw_only=True)
class SandboxSettings:
    bookmark_interval: float = 10.0  # seconds between BOOKMARK events on idle watches
    # clientConfig.service (namespace, name, port) -> its ready endpoints (host, port); a
    # harness playing the endpoints controller changes them at run time (ServiceEndpoints.set).
    services: ServiceEndpoints = field(default_factory=ServiceEndpoints)
    tokens: Mapping[str, User] | None = None  # bearer token -> user; None: everyone is admin
    audit_events: int = 1000  # the most recent writes /sandbox/audit keeps
    # The Kubernetes version played: discovery, the kinds served, the CEL environment.
    kubernetes_version: KubernetesVersion = DEFAULT


@dataclass(frozen=True)
class RequestInfo:
    verb: str
    resource: ResourceType
    namespace: str
    name: str
    subresource: str

    @property
    def label(self) -> str:
        return (
            f"{self.resource.plural}/{self.subresource}"
            if self.subresource
            else (self.resource.plural)
        )


def create_app(
    store: Store | None = None,
    faults: Faults | None = None,
    settings: SandboxSettings | None = None,
) -> web.Application:
    settings = settings or SandboxSettings()
    app = web.Application(
        client_max_size=MAX_BODY, middlewares=[_authenticate, policy_metrics.bind]
    )
    app[STORE_KEY] = store or Store()
    app[FAULTS_KEY] = faults or Faults()
    app[STATS_KEY] = Stats()
    app[SETTINGS_KEY] = settings
    app[VERSION_KEY] = settings.kubernetes_version
    app[AUTHENTICATOR_KEY] = Authenticator(settings.tokens)
    app[DISPATCHER_KEY] = Dispatcher(settings.services, settings.kubernetes_version)
    app[AUDIT_KEY] = AuditLog(settings.audit_events)
    app[policy_metrics.METRICS_KEY] = policy_metrics.PolicyMetrics(settings.kubernetes_version)
    app.router.add_get("/version", _version)
    app.router.add_get("/api", _api_versions)
    app.router.add_get("/apis", _api_groups)
    app.router.add_get("/api/{version}", _resource_list)
    app.router.add_get("/apis/{group}/{version}", _resource_list)
    app.router.add_get("/openapi/v3", openapi.index)
    app.router.add_get("/openapi/v3/{path:.+}", openapi.document)
    for probe in ("/healthz", "/readyz", "/livez"):
        app.router.add_get(probe, _ok)
    app.router.add_get("/metrics", policy_metrics.serve)  # authenticated, as API paths are
    app.router.add_get("/sandbox/stats", _stats)
    app.router.add_get("/sandbox/audit", _audit)
    app.router.add_post("/sandbox/faults", _set_faults)
    app.router.add_delete("/sandbox/faults", _clear_faults)
    app.router.add_route("*", "/api/{version}/{tail:.+}", _resource_request)
    app.router.add_route("*", "/apis/{group}/{version}/{tail:.+}", _resource_request)
    app.on_shutdown.append(_close_watches)
    app.on_cleanup.append(_close_dispatcher)
    return app


async def _close_watches(app: web.Application) -> None:
    app[STORE_KEY].close_all_watches()


async def _close_dispatcher(app: web.Application) -> None:
    await app[DISPATCHER_KEY].close()


_OPEN_PATHS = ("/healthz", "/readyz", "/livez", "/sandbox/")


@web.middleware
async def _authenticate(request: web.Request, handler: Any) -> web.StreamResponse:
    """Every API request names its user (401 without one the token file knows); the probes and
    the sandbox's own control endpoints are open."""
    if request.path.startswith(_OPEN_PATHS):
        return await handler(request)
    user = request.app[AUTHENTICATOR_KEY].user(request.headers.get("Authorization"))
    if user is None:
        return status_response(401, "Unauthorized", "Unauthorized")
    request[USER_KEY] = user
    return await handler(request)


# -- discovery ------------------------------------------------------------------------------


def kubernetes_version(request: web.Request) -> KubernetesVersion:
    """The version the sandbox serving request plays."""
    return request.app[VERSION_KEY]


async def _version(request: web.Request) -> web.Response:
    played = kubernetes_version(request)
    return web.json_response(
        {
            "major": "1",
            "minor": str(played.minor),
            "gitVersion": played.git_version,
            "gitCommit": "volcano-guard-sandbox",
            "gitTreeState": "clean",
            "buildDate": "2026-01-01T00:00:00Z",
            "goVersion": "go1.23",
            "compiler": "gc",
            "platform": "linux/amd64",
        }
    )


async def _ok(_: web.Request) -> web.Response:
    return web.Response(text="ok")


async def _api_versions(request: web.Request) -> web.Response:
    return web.json_response(
        {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": request.host}
            ],
        }
    )


async def _api_groups(request: web.Request) -> web.Response:
    groups = []
    for group, versions in kubernetes_version(request).groups().items():
        entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        groups.append({"name": group, "versions": entries, "preferredVersion": entries[0]})
    return web.json_response({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})


async def _resource_list(request: web.Request) -> web.Response:
    group = request.match_info.get("group", "")
    version = request.match_info["version"]
    if not group and request.path.startswith("/apis/"):
        raise web.HTTPNotFound()
    resources = kubernetes_version(request).group_versions().get((group, version))
    if resources is None:
        return _error(ApiError(404, "NotFound", "the server could not find the requested resource"))
    entries: list[dict[str, Any]] = []
    for resource in resources:
        entries.append(
            {
                "name": resource.plural,
                "singularName": resource.singular,
                "namespaced": resource.namespaced,
                "kind": resource.kind,
                "verbs": list(resource.verbs),
                "shortNames": list(resource.short_names),
            }
        )
        if resource.status_subresource:
            entries.append(
                {
                    "name": f"{resource.plural}/status",
                    "singularName": "",
                    "namespaced": resource.namespaced,
                    "kind": resource.kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
        if resource.binding_subresource:
            entries.append(
                {
                    "name": f"{resource.plural}/binding",
                    "singularName": "",
                    "namespaced": True,
                    "kind": "Binding",
                    "verbs": ["create"],
                }
            )
    group_version = f"{group}/{version}" if group else version
    return web.json_response(
        {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": group_version,
            "resources": entries,
        }
    )


# -- sandbox control ------------------------------------------------------------------------


async def _stats(request: web.Request) -> web.Response:
    store = request.app[STORE_KEY]
    body = request.app[STATS_KEY].as_dict()
    body["objects"] = {r.plural: store.count(r) for r in kubernetes_version(request).resources}
    body["resourceVersion"] = str(store.resource_version)
    body["openWatches"] = store.open_watches
    return web.json_response(body)


async def _audit(request: web.Request) -> web.Response:
    """The most recent writes: who, what, the answer's code and admission's audit annotations."""
    return web.json_response({"items": request.app[AUDIT_KEY].events()})


async def _set_faults(request: web.Request) -> web.Response:
    try:
        data = decode(await request.read())
        if not isinstance(data, dict) or not isinstance(data.get("rules"), list):
            raise ValueError('expected {"rules": [...]}')
        if not all(isinstance(rule, dict) for rule in data["rules"]):
            raise ValueError("each rule must be an object")
        rules = tuple(FaultRule.from_dict(rule) for rule in data["rules"])
    except (BodyError, ValueError) as exc:
        return status_response(400, f"bad fault rules: {exc}")
    request.app[FAULTS_KEY].rules = rules
    return web.json_response({"rules": len(rules)})


async def _clear_faults(request: web.Request) -> web.Response:
    request.app[FAULTS_KEY].rules = ()
    return web.json_response({"rules": 0})


# -- resources ------------------------------------------------------------------------------


async def _resource_request(request: web.Request) -> web.StreamResponse:
    try:
        info = parse_request_info(request)
    except ApiError as exc:
        return _error(exc)
    stats = request.app[STATS_KEY]
    stats.requests[(info.verb, info.label)] += 1
    latency, code, retry_after = request.app[FAULTS_KEY].decide(info.verb, info.resource.plural)
    if latency:
        await asyncio.sleep(latency)
    if code is not None:
        stats.injected[code] += 1
        headers = {"Retry-After": str(retry_after)} if code == 429 else None
        return status_response(code, f"injected fault: {code}", headers=headers)
    try:
        response = await _dispatch(request, info)
    except ApiError as exc:
        if exc.code == 409:
            stats.conflicts[info.label] += 1
        return _error(exc)
    if info.verb in WRITE_VERBS and response.status < 300:
        stats.writes[info.label] += 1
    return response


def parse_request_info(request: web.Request) -> RequestInfo:
    """Path and method -> RequestInfo, as the apiserver's RequestInfoFactory resolves them."""
    group = request.match_info.get("group", "")
    if not group and request.path.startswith("/apis/"):
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    version = request.match_info["version"]
    parts = [p for p in request.match_info["tail"].split("/") if p]
    watch_path = bool(parts) and parts[0] == "watch"
    if watch_path:
        parts = parts[1:]
    namespace = ""
    played = kubernetes_version(request)
    if (
        len(parts) >= 3
        and parts[0] == "namespaces"
        and _namespaced(played, group, version, parts[2])
    ):
        namespace, parts = parts[1], parts[2:]
    if not parts or len(parts) > 3:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    resource = played.find(group, version, parts[0])
    if resource is None:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    name = parts[1] if len(parts) > 1 else ""
    subresource = parts[2] if len(parts) > 2 else ""
    if subresource and not (
        (subresource == "status" and resource.status_subresource)
        or (subresource == "binding" and resource.binding_subresource)
        or (subresource == "log" and resource.kind == "Pod" and request.method == "GET")
    ):
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    if resource.namespaced and name and not namespace:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    watch = watch_path or request.query.get("watch") in ("1", "true", "True")
    verb = _verb(request.method, bool(name), watch)
    return RequestInfo(verb, resource, namespace, name, subresource)


def _namespaced(played: KubernetesVersion, group: str, version: str, plural: str) -> bool:
    resource = played.find(group, version, plural)
    return resource is not None and resource.namespaced


def _verb(method: str, has_name: bool, watch: bool) -> str:
    if method == "GET":
        return "watch" if watch else ("get" if has_name else "list")
    verbs = {
        "POST": "create",
        "PUT": "update",
        "PATCH": "patch",
        "DELETE": "delete" if has_name else "deletecollection",
    }
    if method not in verbs or (method in ("PUT", "PATCH") and not has_name):
        raise ApiError(
            405,
            "MethodNotAllowed",
            f"the server does not allow this method on the requested resource ({method})",
        )
    return verbs[method]


async def _dispatch(request: web.Request, info: RequestInfo) -> web.StreamResponse:
    store = request.app[STORE_KEY]
    resource, namespace, name, sub = info.resource, info.namespace, info.name, info.subresource
    if info.verb == "watch":
        return await _watch(request, info)
    if info.verb == "list":
        labels, fields = _selectors(request, resource)
        items, resource_version = store.list(resource, namespace, labels, fields)
        metadata_only = _wants_metadata_only(request.headers.get("Accept", ""))
        return _list_response(
            resource, *_page(request, items, resource_version), metadata_only=metadata_only
        )
    if info.verb == "get" and sub == "log":
        raise _no_logs(store.get(resource, namespace, name).object(), request.query)
    if info.verb == "get":
        return _object_response(store.get(resource, namespace, name))
    dry_run = _dry_run(request) if info.verb in WRITE_VERBS else False
    if resource.create_only and info.verb != "create":
        raise ApiError(405, "MethodNotAllowed", f"{resource.plural} only supports create")
    write = writes.Write(
        store,
        request.app[DISPATCHER_KEY],
        request[USER_KEY],
        resource,
        namespace,
        name,
        sub,
        request.query,
        manager=apply.manager_of(request.query, request.headers.get("User-Agent", "")),
        dry_run=dry_run,
        kubernetes_version=kubernetes_version(request),
    )
    try:
        response = await _write(request, info, write)
    except ApiError as exc:
        _audit_event(request, info, write, exc.code)
        raise
    _audit_event(request, info, write, response.status)
    for warning in write.record.warnings:
        _add_warning(response, warning)
    return response


async def _write(request: web.Request, info: RequestInfo, write: writes.Write) -> web.Response:
    resource, name, sub = info.resource, info.name, info.subresource
    if info.verb == "create" and (sub == "binding" or resource.plural == "bindings"):
        binding = await _body(request)
        if resource.plural == "bindings":  # the pod is named by the Binding's metadata.name
            metadata = binding.get("metadata") if isinstance(binding, dict) else None
            write.name = metadata.get("name", "") if isinstance(metadata, dict) else ""
        await writes.bind(write, binding)
        return web.json_response(
            {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "code": 201,
            },
            status=201,
        )
    if sub == "binding" or (info.verb == "create" and name):
        raise ApiError(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )
    if info.verb == "delete":
        body = await _body(request, optional=True)
        if body is not None and not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "DeleteOptions must be a JSON object")
        write.dry_run = write.dry_run or (body or {}).get("dryRun") == ["All"]
        return _object_response(await writes.delete(write, body))
    if info.verb == "deletecollection":
        return await _delete_collection(request, info, write)
    if info.verb == "patch":
        content_type = request.headers.get("Content-Type", "").split(";")[0].strip()
        write.store.check_patch_type(resource, content_type)  # 415 before reading the body
        body = await _body(request, apply_patch=content_type == APPLY_PATCH)
        warnings = _unknown_patched_fields(resource, content_type, body, request.query)
        stored = await writes.patch(write, content_type, body)
        return _object_response(stored, 201 if write.created else 200, warnings)
    body = await _body(request)
    warnings = _unknown_fields(resource, body, request.query.get("fieldValidation", "Warn"))
    if info.verb == "create":
        return _object_response(await writes.create(write, body), 201, warnings)
    return _object_response(await writes.update(write, body), warnings=warnings)


def _audit_event(request: web.Request, info: RequestInfo, write: writes.Write, code: int) -> None:
    request.app[AUDIT_KEY].append(
        {
            "user": write.user.name,
            "verb": info.verb,
            "resource": info.label,
            "namespace": info.namespace,
            "name": write.name,
            "code": code,
            "annotations": dict(write.record.annotations),
        }
    )


async def _delete_collection(
    request: web.Request, info: RequestInfo, write: writes.Write
) -> web.Response:
    """Each selected object is deleted through admission, as the apiserver's DeleteCollection
    deletes them one by one."""
    store = write.store
    labels, fields = _selectors(request, info.resource)
    items, _ = store.list(info.resource, info.namespace, labels, fields)
    deleted = []
    for stored in items:
        one = replace(write, namespace=_namespace_of(stored), name=_name_of(stored))
        deleted.append(await writes.delete(one, None, collection=True))
        write.record.warnings += one.record.warnings
    return _list_response(info.resource, deleted, store.resource_version)


def _no_logs(pod: dict[str, Any], query: Mapping[str, str]) -> ApiError:
    """pods/log: the sandbox runs no containers, so every container is waiting to start, in the
    words kube-apiserver uses for one (Kubernetes pkg/registry/core/pod/strategy.go
    LogLocation)."""
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    container = query.get("container") or containers[0].get("name", "")
    return ApiError(
        400,
        "BadRequest",
        f'container "{container}" in pod "{pod["metadata"]["name"]}" is waiting to start: '
        "the sandbox runs no containers",
    )


def _dry_run(request: web.Request) -> bool:
    """dryRun=All, the one value kube-apiserver takes (Kubernetes staging/src/k8s.io/apimachinery
    pkg/apis/meta/v1/validation ValidateDryRun)."""
    values = request.query.getall("dryRun", [])
    if any(value != "All" for value in values):
        raise ApiError(
            422, "Invalid", f'dryRun: Unsupported value: "{values[0]}": supported values: "All"'
        )
    return bool(values)


async def _body(request: web.Request, optional: bool = False, apply_patch: bool = False) -> Any:
    """The request's object: JSON, or protobuf for the kinds kubectl's generators send so, or
    YAML for a server-side apply."""
    data = await request.read()
    if not data:
        if optional:
            return None
        raise ApiError(400, "BadRequest", "the request body is empty")
    media_type = request.headers.get("Content-Type", "application/json").split(";")[0].strip()
    if apply_patch:
        try:
            return decode_yaml(data)
        except BodyError as exc:
            raise ApiError(400, "BadRequest", f"the apply patch is refused: {exc}") from None
    try:
        if media_type == protobuf.MEDIA_TYPE:
            return protobuf.decode(data)[1]
        return decode(data)
    except protobuf.ProtobufError as exc:
        if exc.unsupported:
            raise ApiError(415, "UnsupportedMediaType", str(exc)) from None
        raise ApiError(400, "BadRequest", str(exc)) from None
    except BodyError as exc:
        raise ApiError(400, "BadRequest", str(exc)) from None


def _unknown_fields(resource: ResourceType, body: Any, mode: str) -> list[str]:
    """fieldValidation=Strict|Warn|Ignore (default Warn), checked where the sandbox knows the
    schema: an object's top-level fields and its ObjectMeta, and a custom resource's every
    field where the sandbox holds its CRD's schema (crd_schemas.py). Strict refuses (400) what Warn
    reports in Warning headers. Patches are not checked field by field."""
    if mode not in ("Strict", "Warn", "Ignore"):
        raise ApiError(
            400, "BadRequest", f"fieldValidation must be Strict, Warn or Ignore, got {mode!r}"
        )
    if mode == "Ignore" or not isinstance(body, dict):
        return []
    top = {"apiVersion", "kind", "metadata", *resource.fields}
    unknown = [f'unknown field "{key}"' for key in body if key not in top]
    metadata = body.get("metadata")
    if isinstance(metadata, dict):
        unknown += [
            f'unknown field "metadata.{key}"' for key in metadata if key not in OBJECT_META_FIELDS
        ]
    schema = crd_schemas.schema_of(resource)
    if schema is not None:  # below the top level too, where the CRD's schema says
        unknown += [f'unknown field "{path}"' for path in crd_schemas.unknown_fields(schema, body)]
    if unknown and mode == "Strict":
        raise ApiError(400, "BadRequest", "strict decoding error: " + ", ".join(unknown))
    return unknown


def _unknown_patched_fields(
    resource: ResourceType, content_type: str, body: Any, query: Mapping[str, str]
) -> list[str]:
    """A merge patch of a kind held to its CRD schema (what `kubectl apply` sends for a custom
    resource that exists) is checked as a create is: the stored object has no unknown field, so
    the patched one's are the patch's (a null removes, and adds nothing)."""
    if content_type != MERGE_PATCH or crd_schemas.schema_of(resource) is None:
        return []
    return _unknown_fields(resource, _without_nulls(body), query.get("fieldValidation", "Warn"))


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _without_nulls(item) for key, item in value.items() if item is not None}
    return value


def _selectors(request: web.Request, resource: ResourceType) -> tuple[tuple, tuple]:
    allowed = frozenset(
        SELECTABLE_FIELDS.get(resource.plural, ("metadata.name", "metadata.namespace"))
    )
    try:
        return (
            parse_label_selector(request.query.get("labelSelector", "")),
            parse_field_selector(request.query.get("fieldSelector", ""), allowed),
        )
    except SelectorError as exc:
        raise ApiError(400, "BadRequest", str(exc)) from None


async def _watch(request: web.Request, info: RequestInfo) -> web.StreamResponse:
    store = request.app[STORE_KEY]
    labels, fields = _selectors(request, info.resource)
    since = _watch_start(request.query.get("resourceVersion", ""))
    timeout = _timeout(request.query.get("timeoutSeconds"))
    bookmarks = request.query.get("allowWatchBookmarks") in ("true", "1")
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    response.enable_chunked_encoding()
    try:
        watcher = store.watch(info.resource, info.namespace, since, labels, fields)
    except ApiError as exc:
        # Like the apiserver: the watch opens, then its first event is the 410 error.
        await response.prepare(request)
        error = status_body(exc.code, exc.message, exc.reason)
        await response.write(encode_event("ERROR", json.dumps(error).encode()))
        await response.write_eof()
        return response
    await response.prepare(request)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout if timeout else None
    interval = request.app[SETTINGS_KEY].bookmark_interval
    try:
        while True:
            wait = interval if bookmarks else None
            if deadline is not None:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                wait = remaining if wait is None else min(wait, remaining)
            try:
                async with asyncio.timeout(wait):
                    data = await watcher.next()
            except TimeoutError:
                if bookmarks and (deadline is None or loop.time() < deadline):
                    await response.write(_bookmark(info.resource, store.resource_version))
                continue
            if data is None:
                break
            await response.write(data)
    except ConnectionResetError:
        return response  # the client went away
    finally:
        store.stop_watch(watcher)
    with contextlib.suppress(ConnectionResetError):
        await response.write_eof()
    return response


def _watch_start(text: str) -> int | None:
    if text in ("", "0"):
        return None
    if not text.isdigit():
        raise ApiError(400, "BadRequest", f"invalid resourceVersion {text!r}")
    return int(text)


def _timeout(text: str | None) -> float | None:
    if text is None or text == "":
        return None
    if not text.isdigit():
        raise ApiError(400, "BadRequest", f"invalid timeoutSeconds {text!r}")
    return float(text) or None


def _bookmark(resource: ResourceType, resource_version: int) -> bytes:
    obj = {
        "kind": resource.kind,
        "apiVersion": resource.api_version,
        "metadata": {
            "resourceVersion": str(resource_version),
            "annotations": {"k8s.io/initial-events-end": "true"},
        },
    }
    return encode_event("BOOKMARK", json.dumps(obj, separators=(",", ":")).encode())


def _object_response(
    stored: Stored, status: int = 200, warnings: list[str] | None = None
) -> web.Response:
    headers = {"Content-Type": "application/json"}
    response = web.Response(body=stored.raw, status=status, headers=headers)
    for warning in warnings or []:
        _add_warning(response, warning)
    return response


def _add_warning(response: web.StreamResponse, warning: str) -> None:
    # RFC 7234 quoted text; JSON string escaping keeps it ASCII and free of control chars.
    response.headers.add("Warning", f"299 - {json.dumps(warning)}")


def _page(
    request: web.Request, items: list[Stored], resource_version: int
) -> tuple[list[Stored], int, str]:
    """`limit` and `continue`, as the apiserver pages a list: at most limit items from where
    the token left off; every page carries the first page's resourceVersion, so a watch from
    it sees what changed while the pages were read (the sandbox does not hold the first page's
    snapshot: later pages show objects as they are now, which that watch then repairs)."""
    limit_text, token = request.query.get("limit", ""), request.query.get("continue", "")
    if limit_text and not limit_text.isdigit():
        raise ApiError(400, "BadRequest", f"invalid limit {limit_text!r}")
    start = 0
    if token:
        try:
            resume = json.loads(base64.urlsafe_b64decode(token.encode()))
            resource_version, after = int(resume["rv"]), tuple(resume["after"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ApiError(400, "BadRequest", f"invalid continue token: {exc}") from None
        keys = [(_namespace_of(s), _name_of(s)) for s in items]
        start = bisect.bisect_right(keys, after)
    limit = int(limit_text or 0)
    if not limit or start + limit >= len(items):
        return items[start:], resource_version, ""
    page = items[start : start + limit]
    last = page[-1]
    resume_at = {"rv": resource_version, "after": [_namespace_of(last), _name_of(last)]}
    return page, resource_version, base64.urlsafe_b64encode(json.dumps(resume_at).encode()).decode()


def _list_response(
    resource: ResourceType,
    items: list[Stored],
    resource_version: int,
    continue_token: str = "",
    metadata_only: bool = False,
) -> web.Response:
    metadata = {"resourceVersion": str(resource_version)}
    if continue_token:
        metadata["continue"] = continue_token
    kind, api_version = resource.list_kind, resource.api_version
    raws = [s.raw for s in items]
    if metadata_only:
        kind, api_version = PARTIAL_METADATA_LIST, META_V1
        raws = [
            json.dumps(
                {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": META_V1,
                    "metadata": s.object().get("metadata", {}),
                },
                separators=(",", ":"),
            ).encode()
            for s in items
        ]
    head = json.dumps(
        {"kind": kind, "apiVersion": api_version, "metadata": metadata}, separators=(",", ":")
    ).encode()
    body = head[:-1] + b',"items":[' + b",".join(raws) + b"]}"
    return web.Response(body=body, headers={"Content-Type": "application/json"})


PARTIAL_METADATA_LIST, META_V1 = "PartialObjectMetadataList", "meta.k8s.io/v1"


def _wants_metadata_only(accept: str) -> bool:
    """Whether a list's Accept asks for metadata only, as kube-apiserver negotiates it: the first
    media range it can serve wins; `as=PartialObjectMetadataList;g=meta.k8s.io;v=v1` is the
    metadata form, plain JSON the objects (also the sandbox's answer to a protobuf-only Accept);
    asking only for another `as=` form is 406."""
    ranges = [part.strip() for part in accept.split(",") if part.strip()]
    conversions = False
    for media_range in ranges:
        media_type, *raw_params = (piece.strip() for piece in media_range.split(";"))
        params = dict(p.partition("=")[::2] for p in raw_params)
        conversions = conversions or "as" in params
        if media_type not in ("application/json", "application/*", "*/*"):
            continue
        if "as" not in params:
            return False
        if (params.get("as"), params.get("g"), params.get("v")) == (
            PARTIAL_METADATA_LIST,
            "meta.k8s.io",
            "v1",
        ):
            return True
    if not conversions:
        return False
    raise ApiError(
        406,
        "NotAcceptable",
        f"only the following media types are accepted: "
        f"application/json, application/json;as={PARTIAL_METADATA_LIST};"
        f"g=meta.k8s.io;v=v1 (Accept: {accept})",
    )


def _error(exc: ApiError) -> web.Response:
    return status_response(exc.code, exc.message, exc.reason, exc.details)


def _namespace_of(stored: Stored) -> str:
    return stored.fields.get("metadata.namespace", "")


def _name_of(stored: Stored) -> str:
    return stored.fields.get("metadata.name", "")
