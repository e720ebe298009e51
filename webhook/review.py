"""The AdmissionReview envelope (admission.k8s.io/v1): parse a request, build a response.

Parsing checks the shape the API server always sends and raises ReviewError (answered with
HTTP 400) naming the first field that is wrong. Policies receive only the typed, immutable
AdmissionRequest and never see the wire format.
"""

from __future__ import annotations

import base64
from typing import Any, NamedTuple

import orjson

from volcano_guard.base.jsonbody import object_at, shown
from volcano_guard.base.jsonpatch import Operation
from volcano_guard.base.status import REASONS
from volcano_guard.webhook.decision import Decision

API_VERSION = "admission.k8s.io/v1"
OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")


class ReviewError(ValueError):
    """The body is not a usable AdmissionReview; the message says which field is wrong."""


class GroupVersionKind(NamedTuple):
    group: str
    version: str
    kind: str


class GroupVersionResource(NamedTuple):
    group: str
    version: str
    resource: str


class UserInfo(NamedTuple):
    username: str = ""
    groups: tuple[str, ...] = ()


class AdmissionRequest(NamedTuple):
    uid: str
    kind: GroupVersionKind
    resource: GroupVersionResource
    operation: str
    sub_resource: str = ""
    namespace: str = ""
    name: str = ""
    user: UserInfo = UserInfo()
    object: dict[str, Any] | None = None
    old_object: dict[str, Any] | None = None
    options: dict[str, Any] | None = None
    dry_run: bool = False

    def created(self, group: str, kind: str) -> dict[str, Any] | None:
        """The object, when this is a CREATE of such an object itself (not of a subresource)."""
        if ((self.kind.group, self.kind.kind) == (group, kind) and self.operation == "CREATE"
                and not self.sub_resource):
            return self.object
        return None

    @property
    def object_name(self) -> str:
        """The object's name; on CREATE with generateName, `prefix<generated>`."""
        metadata = _metadata(self.object)
        if self.name or isinstance(metadata.get("name"), str):
            return self.name or metadata["name"]
        prefix = metadata.get("generateName")
        return f"{prefix}<generated>" if isinstance(prefix, str) else "<unnamed>"

    def describe(self) -> str:
        """`Pod "namespace/name"` for messages."""
        metadata = _metadata(self.object)
        namespace = self.namespace or metadata.get("namespace")
        name = self.object_name
        if isinstance(namespace, str) and namespace:
            return f'{self.kind.kind} "{namespace}/{name}"'
        return f'{self.kind.kind} "{name}"'


def parse(document: Any) -> AdmissionRequest:
    """AdmissionReview JSON (already decoded) -> AdmissionRequest, or ReviewError."""
    if not isinstance(document, dict):
        raise ReviewError("body is not an AdmissionReview: expected a JSON object")
    if document.get("kind") != "AdmissionReview":
        raise ReviewError(f'kind is {shown(document.get("kind"))}, expected "AdmissionReview"')
    if document.get("apiVersion") != API_VERSION:
        raise ReviewError(
            f"apiVersion {shown(document.get('apiVersion'))} is not supported; only {API_VERSION} "
            "(set admissionReviewVersions: [v1] in the webhook configuration)"
        )
    request = document.get("request")
    if not isinstance(request, dict):
        raise ReviewError("request is missing or not an object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise ReviewError("request.uid is missing or not a non-empty string")
    operation = request.get("operation")
    if operation not in OPERATIONS:
        raise ReviewError(f"request.operation {shown(operation)} is not one of "
                          f"{', '.join(OPERATIONS)}")
    for key, kind, expected in _OPTIONAL_FIELDS:
        value = request.get(key)
        if value is not None and not isinstance(value, kind):
            raise ReviewError(f"request.{key} must be {expected}")
    return AdmissionRequest(
        uid=uid,
        kind=GroupVersionKind(*_names(request, "kind", "kind")),
        resource=GroupVersionResource(*_names(request, "resource", "resource")),
        operation=operation,
        sub_resource=request.get("subResource") or "",
        namespace=request.get("namespace") or "",
        name=request.get("name") or "",
        user=_user(request.get("userInfo")),
        object=request.get("object"),
        old_object=request.get("oldObject"),
        options=request.get("options"),
        dry_run=request.get("dryRun") or False,
    )


# Optional request fields: key, the type JSON gives it, and what an error says it must be.
_OPTIONAL_FIELDS: tuple[tuple[str, type, str], ...] = (
    ("subResource", str, "a string"),
    ("namespace", str, "a string"),
    ("name", str, "a string"),
    ("object", dict, "an object or null"),
    ("oldObject", dict, "an object or null"),
    ("options", dict, "an object or null"),
    ("dryRun", bool, "true or false"),
)


def respond(uid: str, decision: Decision) -> dict[str, Any]:
    """The AdmissionReview answer for decision, echoing the request's uid."""
    response: dict[str, Any] = {"uid": uid, "allowed": decision.allowed}
    if not decision.allowed:
        response["status"] = {
            "code": decision.code,
            "message": decision.message,
            "reason": REASONS.get(decision.code, "Unknown"),
        }
    if decision.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(encode_patch(decision.patch)).decode("ascii")
    if decision.warnings:
        response["warnings"] = list(decision.warnings)
    if decision.audit_annotations:
        response["auditAnnotations"] = dict(decision.audit_annotations)
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response}


def encode_patch(patch: tuple[Operation, ...]) -> bytes:
    """The patch as JSON; ReviewError when a value copied from the object nests too deep to
    encode (orjson stops at 254 levels, where the standard library would hit RecursionError)."""
    try:
        return orjson.dumps(patch)
    except orjson.JSONEncodeError as exc:
        raise ReviewError(f"request.object cannot be patched: {exc}") from None


def _metadata(obj: dict[str, Any] | None) -> dict[str, Any]:
    return object_at(obj or {}, "metadata")


def _names(request: dict[str, Any], key: str, last: str) -> tuple[str, str, str]:
    """request[key]'s (group, version, <last>): strings, non-empty except the group."""
    value = request.get(key)
    if not isinstance(value, dict):
        raise ReviewError(f"request.{key} is missing or not an object")
    group, version, name = value.get("group", ""), value.get("version", ""), value.get(last, "")
    for field, item in (("group", group), ("version", version), (last, name)):
        if not isinstance(item, str) or (not item and field != "group"):
            raise ReviewError(f"request.{key}.{field} is missing or not a string")
    return group, version, name


def _user(value: Any) -> UserInfo:
    if value is None:
        return _NO_USER
    if not isinstance(value, dict):
        raise ReviewError("request.userInfo must be an object")
    username = value.get("username", "")
    groups = value.get("groups") or []
    if not isinstance(username, str):
        raise ReviewError("request.userInfo.username must be a string")
    if not isinstance(groups, list) or not all(isinstance(group, str) for group in groups):
        raise ReviewError("request.userInfo.groups must be a list of strings")
    return UserInfo(username, tuple(groups))


_NO_USER = UserInfo()
