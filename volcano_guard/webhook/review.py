"""The AdmissionReview envelope (admission.k8s.io/v1): parse a request, build a response.

The request's fields are declared once, below, with the types the API server's Go structs give
them (k8s.io/api admission/v1 AdmissionRequest, authentication/v1 UserInfo, apimachinery's
GroupVersionKind/Resource): strings are never null (omitempty drops them), the RawExtensions
object, oldObject and options may be. msgspec decodes the body straight into these records and
checks every field in one pass, so a ReviewError (answered with HTTP 400) names the path of the
first wrong field. Policies receive only the typed, immutable AdmissionRequest and never see the
wire format.
"""

from __future__ import annotations

import base64
from typing import Annotated, Any, Literal

import msgspec
import orjson

from volcano_guard.base.jsonbody import object_at, shown
from volcano_guard.base.jsonpatch import Operation
from volcano_guard.base.status import REASONS
from volcano_guard.webhook.decision import Decision

API_VERSION = "admission.k8s.io/v1"
NonEmpty = Annotated[str, msgspec.Meta(min_length=1)]


class ReviewError(ValueError):
    """The body is not a usable AdmissionReview; the message says which field is wrong."""


class GroupVersionKind(msgspec.Struct, frozen=True):
    group: str  # "" for the core group, and always sent
    version: NonEmpty
    kind: NonEmpty


class GroupVersionResource(msgspec.Struct, frozen=True):
    group: str
    version: NonEmpty
    resource: NonEmpty


class UserInfo(msgspec.Struct, frozen=True):
    username: str = ""
    groups: tuple[str, ...] = ()


class AdmissionRequest(
    msgspec.Struct,
    frozen=True,
    rename={
        "sub_resource": "subResource",
        "user": "userInfo",
        "old_object": "oldObject",
        "dry_run": "dryRun",
    },
):
    uid: NonEmpty
    kind: GroupVersionKind
    resource: GroupVersionResource
    operation: Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
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
        if (
            (self.kind.group, self.kind.kind) == (group, kind)
            and self.operation == "CREATE"
            and not self.sub_resource
        ):
            return self.object
        return None

    @property
    def object_name(self) -> str:
        """The object's name; on CREATE with generateName, `prefix<generated>`. A DELETE of a
        collection names no object (kube-apiserver's DeleteCollection admits each item with
        the collection's empty name): its oldObject says which."""
        metadata = _metadata(self.object if self.object is not None else self.old_object)
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


class _Review(msgspec.Struct, frozen=True, rename="camel"):
    api_version: str = ""
    kind: str = ""
    request: AdmissionRequest | None = None


_DECODER = msgspec.json.Decoder(_Review)


def parse(body: bytes) -> AdmissionRequest:
    """AdmissionReview JSON bytes -> AdmissionRequest, or ReviewError naming what is wrong."""
    try:
        review = _DECODER.decode(body)
    except msgspec.ValidationError as exc:  # "Expected `str`, got `int` - at `$.request.uid`"
        raise ReviewError(f"body is not an AdmissionReview: {exc}") from None
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise ReviewError(f"body is not valid JSON: {exc}") from None
    except RecursionError:  # the decoder recurses once a level, up to Python's limit
        raise ReviewError("body is nested too deeply to be an AdmissionReview") from None
    return _request_of(review)


def from_document(document: Any) -> AdmissionRequest:
    """An AdmissionReview already decoded (a YAML document given to `check`) ->
    AdmissionRequest, checked as parse() checks the wire's."""
    try:
        review = msgspec.convert(document, _Review)
    except msgspec.ValidationError as exc:
        raise ReviewError(f"not an AdmissionReview: {exc}") from None
    return _request_of(review)


def _request_of(review: _Review) -> AdmissionRequest:
    if review.kind != "AdmissionReview":
        raise ReviewError(f'kind is {shown(review.kind)}, expected "AdmissionReview"')
    if review.api_version != API_VERSION:
        raise ReviewError(
            f"apiVersion {shown(review.api_version)} is not supported; only {API_VERSION} "
            "(set admissionReviewVersions: [v1] in the webhook configuration)"
        )
    if review.request is None:
        raise ReviewError("request is missing")
    return review.request


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
