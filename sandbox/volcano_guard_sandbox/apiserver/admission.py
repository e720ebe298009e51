"""The dynamic admission chain, run for every write as kube-apiserver v1.32 runs it
(k8s.io/apiserver pkg/admission/plugin/webhook: mutating/dispatcher.go, validating/dispatcher.go,
request/admissionreview.go, errors/statuserror.go; pkg/util/webhook/error.go).

- Mutating webhooks are called one after another, each seeing the object as the previous left
  it; a JSONPatch is applied. A webhook with `reinvocationPolicy: IfNeeded` is called once more,
  in the chain's second pass, when a later webhook or MutatingAdmissionPolicy changed the object
  (reinvocation.py).
- Validating webhooks are then called concurrently; the first refusal (in webhook order) is the
  answer.
- A refusal reaches the client as the apiserver returns it: the webhook's status code (400 when
  below 400), `admission webhook "NAME" denied the request: MESSAGE`. Warnings become Warning
  headers; audit annotations are kept, keyed `NAME/key`.
- A call that fails (connection, TLS, timeout, HTTP error, malformed answer) is governed by the
  webhook's failurePolicy: Fail refuses the request (500, `failed calling webhook "NAME": ...`),
  Ignore goes on and records a `failed-open...` audit annotation.

The call is an AdmissionReview v1 POSTed over HTTPS to `clientConfig.url`, or to the service's
DNS name `NAME.NAMESPACE.svc` (verified against `caBundle`), each new connection at one of the
endpoints `--service` maps it to (endpoints.py).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import json
import logging
import os
import ssl
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from volcano_guard.base.jsonbody import BodyError, decode
from volcano_guard.base.jsonpatch import JsonPatchError, apply_patch
from volcano_guard_sandbox.apiserver import policy_metrics
from volcano_guard_sandbox.apiserver.endpoints import (
    Address,
    ServiceEndpoints,
    ServiceKey,
    ServiceResolver,
    service_host,
)
from volcano_guard_sandbox.apiserver.matching import (
    Attributes,
    ConditionError,
    configured_webhooks,
    exempt,
    should_call,
)
from volcano_guard_sandbox.apiserver.reinvocation import WEBHOOK_PLUGIN, ReinvocationContext
from volcano_guard_sandbox.apiserver.store import ApiError
from volcano_guard_sandbox.apiserver.versions import DEFAULT, KubernetesVersion

log = logging.getLogger("volcano_guard_sandbox.apiserver.admission")
REVIEW_VERSION = "admission.k8s.io/v1"
DEFAULT_TIMEOUT = 10  # seconds: the v1 default of timeoutSeconds
MAX_RESPONSE = 3 * 1024 * 1024
MUTATION_PREFIX = "mutation.webhook.admission.k8s.io/"
FAILED_OPEN_MUTATING = "failed-open." + MUTATION_PREFIX
FAILED_OPEN_VALIDATING = "failed-open.validating.webhook.admission.k8s.io/"

SIDE_EFFECT_FREE = ("None", "NoneOnDryRun")


def parse_service(text: str) -> tuple[ServiceKey, Address]:
    """`NAMESPACE/NAME:PORT=HOST:PORT` -> ((namespace, name, port), (host, port))."""
    service, sep, address = text.partition("=")
    namespace, slash, name_port = service.partition("/")
    name, colon, port = name_port.rpartition(":")
    host, colon2, target_port = address.rpartition(":")
    if not (
        sep
        and slash
        and colon
        and colon2
        and namespace
        and name
        and host
        and port.isdigit()
        and target_port.isdigit()
    ):
        raise ValueError(f"--service {text!r}: expected NAMESPACE/NAME:PORT=HOST:PORT")
    return (namespace, name, int(port)), (host.strip("[]"), int(target_port))


@dataclass
class Record:
    """What a request's admission left besides its answer: warnings and audit annotations."""

    warnings: list[str] = field(default_factory=list)
    annotations: dict[str, str] = field(default_factory=dict)


def _nothing(_: dict[str, Any]) -> None:
    pass


class CallError(Exception):
    """The apiserver's ErrCallingWebhook: the webhook could not be asked, or its answer used."""


@dataclass(frozen=True)
class _Endpoint:
    url: str
    server_hostname: str
    tls: ssl.SSLContext


class Dispatcher:
    """Calls the registered webhooks for one sandbox; owns one HTTP client session."""

    def __init__(
        self, endpoints: ServiceEndpoints | None = None, version: KubernetesVersion = DEFAULT
    ) -> None:
        self._endpoints = endpoints or ServiceEndpoints()
        self._version = version  # whose CEL environment runs the webhooks' matchConditions
        self._session: aiohttp.ClientSession | None = None
        self._contexts: dict[str, ssl.SSLContext] = {}

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def mutate(
        self,
        attributes: Attributes,
        configurations: Iterable[Mapping[str, Any]],
        record: Record,
        defaults: Callable[[dict[str, Any]], None] = _nothing,
        reinvocation: ReinvocationContext | None = None,
    ) -> dict[str, Any] | None:
        """The object after every mutating webhook that applies, `defaults` applied again after
        each patch (as the apiserver's defaulter); ApiError when one refuses. Given the chain's
        reinvocation context, one pass of this plugin (the chain runs it again if asked);
        without one, the chain of this plugin alone (reinvocation.py)."""
        if reinvocation is not None:
            return await self._mutate_pass(
                attributes, configurations, record, defaults, reinvocation
            )
        context = ReinvocationContext()
        obj = await self._mutate_pass(attributes, configurations, record, defaults, context)
        if context.should_reinvoke:
            context.is_reinvoke = True
            attributes = replace(attributes, object=obj)
            obj = await self._mutate_pass(attributes, configurations, record, defaults, context)
        return obj

    async def _mutate_pass(
        self,
        attributes: Attributes,
        configurations: Iterable[Mapping[str, Any]],
        record: Record,
        defaults: Callable[[dict[str, Any]], None],
        context: ReinvocationContext,
    ) -> dict[str, Any] | None:
        """webhook/mutating dispatcher.go Dispatch: each webhook that applies, in order; on a
        reinvocation only those its context names (the IfNeeded ones called before a later
        change, by a webhook or, since they ran, by another plugin)."""
        if exempt(attributes):
            return attributes.object
        state = context.plugin(WEBHOOK_PLUGIN)
        if context.is_reinvoke and state.output_changed(attributes.object):
            state.require_reinvoking_previously_invoked()
        round_ = 1 if context.is_reinvoke else 0
        try:
            for index, (configuration, hook) in enumerate(configured_webhooks(configurations)):
                if not self._should_call(hook, attributes):
                    continue
                if context.is_reinvoke and not state.should_reinvoke(index):
                    continue
                before = attributes.object
                attributes = await self._mutating_call(
                    configuration,
                    hook,
                    attributes,
                    record,
                    f"round_{round_}_index_{index}",
                    defaults,
                )
                if attributes.object != before:
                    state.require_reinvoking_previously_invoked()
                    context.should_reinvoke = True
                if hook.get("reinvocationPolicy") == "IfNeeded":
                    state.add_previously_invoked(index)
        finally:
            state.set_last_output(attributes.object)
        return attributes.object

    async def validate(
        self, attributes: Attributes, configurations: Iterable[Mapping[str, Any]], record: Record
    ) -> None:
        """Call every validating webhook that applies, concurrently; ApiError for the first
        refusal (in webhook order) or failed call under failurePolicy Fail."""
        if exempt(attributes):
            return
        called = [
            (index, hook)
            for index, (_, hook) in enumerate(configured_webhooks(configurations))
            if self._should_call(hook, attributes)
        ]
        outcomes = await asyncio.gather(
            *(
                self._validating_call(hook, attributes, record, f"round_0_index_{index}")
                for index, hook in called
            ),
            return_exceptions=True,
        )
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome

    def _should_call(self, hook: Mapping[str, Any], attributes: Attributes) -> bool:
        try:
            call = should_call(hook, attributes, self._version)
        except ConditionError as exc:  # webhook.go ShouldCallHook: NewForbidden
            raise forbidden(attributes, str(exc)) from None
        if call and attributes.dry_run and hook.get("sideEffects") not in SIDE_EFFECT_FREE:
            # Kubernetes staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/mutating
            # dispatcher.go callAttrMutatingHook: webhookerrors.NewDryRunUnsupportedErr
            raise ApiError(
                400,
                "BadRequest",
                f'admission webhook "{hook.get("name")}" does not support dry run',
            )
        return call

    async def _mutating_call(
        self,
        configuration: str,
        hook: Mapping[str, Any],
        attributes: Attributes,
        record: Record,
        key: str,
        defaults: Callable[[dict[str, Any]], None],
    ) -> Attributes:
        name = str(hook.get("name", ""))
        mutated = False
        try:
            response = await self._call(hook, attributes, record, mutating=True)
            if response.get("patch") and attributes.object is None:
                raise _internal(
                    f"admission webhook {name!r} attempted to modify the object, "
                    "which is not supported for this operation"
                )
            if response.get("patch"):
                patched = _patched(name, attributes.object, response)
                mutated = patched != attributes.object
                defaults(patched)
                attributes = replace(attributes, object=patched)
        except CallError as exc:
            _fail_or_go_on(hook, exc, record, FAILED_OPEN_MUTATING + key)
        finally:
            record.annotations[MUTATION_PREFIX + key] = json.dumps(
                {"configuration": configuration, "webhook": name, "mutated": mutated},
                separators=(",", ":"),
            )
        return attributes

    async def _validating_call(
        self, hook: Mapping[str, Any], attributes: Attributes, record: Record, key: str
    ) -> None:
        try:
            await self._call(hook, attributes, record, mutating=False)
        except CallError as exc:
            _fail_or_go_on(hook, exc, record, FAILED_OPEN_VALIDATING + key)

    async def _call(
        self, hook: Mapping[str, Any], attributes: Attributes, record: Record, *, mutating: bool
    ) -> dict[str, Any]:
        """POST the AdmissionReview; the verified response (CallError if unusable), its
        warnings and annotations recorded; ApiError if it refuses."""
        name = str(hook.get("name", ""))
        uid = str(uuid.uuid4())
        review = {
            "apiVersion": REVIEW_VERSION,
            "kind": "AdmissionReview",
            "request": attributes.request(uid),
        }
        timeout = hook.get("timeoutSeconds") or DEFAULT_TIMEOUT
        endpoint = self._endpoint(name, hook.get("clientConfig") or {})
        url = f"{endpoint.url}?timeout={timeout}s"
        # admission metrics.go ObserveWebhook: a failed call is a 503, rejected unless Ignore
        observe = functools.partial(
            policy_metrics.record_webhook_call, name, mutating, attributes.operation
        )
        failed_closed = hook.get("failurePolicy", "Fail") != "Ignore"
        try:
            body = await self._post(url, endpoint, json.dumps(review).encode(), timeout)
        except CallError as exc:
            observe(503, failed_closed)
            raise CallError(
                f'failed calling webhook "{name}": failed to call webhook: Post "{url}": {exc}'
            ) from None
        try:
            response = _verified(body, uid, mutating)
        except CallError as exc:
            observe(503, failed_closed)
            raise CallError(
                f'failed calling webhook "{name}": received invalid webhook response: {exc}'
            ) from None
        for key, value in (response.get("auditAnnotations") or {}).items():
            record.annotations[f"{name}/{key}"] = str(value)
        record.warnings.extend(str(warning) for warning in response.get("warnings") or ())
        if not response.get("allowed"):
            refusal = _denied(name, response.get("status"), attributes)
            observe(refusal.code, True)
            raise refusal
        observe(200, False)
        return response

    async def _post(self, url: str, endpoint: _Endpoint, body: bytes, timeout: float) -> bytes:
        if self._session is None:
            # One pool for each Service name, a fresh endpoint for each new connection.
            resolver = ServiceResolver(self._endpoints)
            connector = aiohttp.TCPConnector(resolver=resolver, use_dns_cache=False)
            self._session = aiohttp.ClientSession(connector=connector)
        try:
            async with (
                asyncio.timeout(timeout),
                self._session.post(
                    url,
                    data=body,
                    ssl=endpoint.tls,
                    server_hostname=endpoint.server_hostname,
                    headers={"Content-Type": "application/json", "Accept": "application/json, */*"},
                ) as answer,
            ):
                data = await _read_at_most(answer.content, MAX_RESPONSE + 1)
                if len(data) > MAX_RESPONSE:
                    raise CallError(f"response body is larger than {MAX_RESPONSE} bytes")
                if answer.status >= 300:
                    raise CallError(
                        f"the server responded with the status code {answer.status}"
                        f": {data[:200].decode('utf-8', 'replace')}"
                    )
                return data
        except TimeoutError:
            raise CallError("context deadline exceeded") from None
        except aiohttp.ClientConnectorCertificateError as exc:
            # as Go's crypto/tls says it: "tls: failed to verify certificate: x509: ..."
            raise CallError(
                f"tls: failed to verify certificate: x509: {_x509_words(exc.certificate_error)}"
            ) from None
        except aiohttp.ClientConnectorError as exc:
            if isinstance(exc, aiohttp.ClientSSLError):
                raise CallError(
                    f"tls: {getattr(exc.os_error, 'reason', None) or exc.os_error}"
                ) from None
            if not exc.os_error.errno:
                raise CallError(f"dial tcp {exc.host}:{exc.port}: {exc.os_error}") from None
            # as Go's dialer says it: "dial tcp 10.96.0.12:443: connect: connection refused"
            reason = os.strerror(exc.os_error.errno).lower()
            raise CallError(f"dial tcp {exc.host}:{exc.port}: connect: {reason}") from None
        except (aiohttp.ClientError, OSError, ssl.SSLError) as exc:
            raise CallError(str(exc) or type(exc).__name__) from None

    def _endpoint(self, name: str, client: Mapping[str, Any]) -> _Endpoint:
        tls = self._tls(name, client.get("caBundle"))
        if client.get("url"):
            url = str(client["url"])
            return _Endpoint(url, urlsplit(url).hostname or "", tls)
        service = client.get("service") or {}
        namespace, service_name = service.get("namespace", ""), service.get("name", "")
        port = int(service.get("port") or 443)
        dns_name = service_host(namespace, service_name)
        if self._endpoints.get((namespace, service_name, port)) is None:
            raise CallError(
                f'failed calling webhook "{name}": failed to call webhook: service '
                f'"{namespace}/{service_name}:{port}" is not mapped to an address '
                "(volcano-guard sandbox --service NAMESPACE/NAME:PORT=HOST:PORT)"
            )
        path = service.get("path") or "/"
        return _Endpoint(f"https://{dns_name}:{port}{path}", dns_name, tls)

    def _tls(self, name: str, ca_bundle: Any) -> ssl.SSLContext:
        """A client context trusting caBundle (base64 PEM), or the system's roots without one."""
        key = ca_bundle if isinstance(ca_bundle, str) else ""
        if key not in self._contexts:
            try:
                pem = base64.b64decode(key, validate=True).decode("ascii") if key else None
                self._contexts[key] = ssl.create_default_context(cadata=pem)
            except (binascii.Error, UnicodeDecodeError, ssl.SSLError) as exc:
                raise CallError(
                    f'failed calling webhook "{name}": could not get REST client: caBundle: {exc}'
                ) from None
        return self._contexts[key]


async def _read_at_most(stream: aiohttp.StreamReader, limit: int) -> bytes:
    """The body up to limit bytes: StreamReader.read(n) answers with what has arrived, so an
    answer larger than a few TCP segments takes several reads."""
    chunks: list[bytes] = []
    size = 0
    while size < limit and (chunk := await stream.read(limit - size)):
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _verified(body: bytes, uid: str, mutating: bool) -> dict[str, Any]:
    """request/admissionreview.go VerifyAdmissionResponse, for admission.k8s.io/v1."""
    try:
        review = decode(body)
    except BodyError as exc:
        raise CallError(str(exc)) from None
    if not isinstance(review, dict):
        raise CallError("expected an AdmissionReview object")
    response = review.get("response")
    if not isinstance(response, dict):
        raise CallError("webhook response was absent")
    if response.get("uid") != uid:
        raise CallError(f'expected response.uid="{uid}", got "{response.get("uid")}"')
    if (review.get("apiVersion"), review.get("kind")) != (REVIEW_VERSION, "AdmissionReview"):
        raise CallError(
            f"expected webhook response of {REVIEW_VERSION}, Kind=AdmissionReview, "
            f"got {review.get('apiVersion')}, Kind={review.get('kind')}"
        )
    patch, patch_type = response.get("patch"), response.get("patchType")
    if not mutating:
        if patch:
            raise CallError("validating webhook may not return response.patch")
        if patch_type is not None:
            raise CallError("validating webhook may not return response.patchType")
    elif patch and patch_type is None:
        raise CallError("webhook returned response.patch but not response.patchType")
    elif not patch and patch_type is not None:
        raise CallError("webhook returned response.patchType but not response.patch")
    return response


def _patched(name: str, obj: dict[str, Any] | None, response: dict[str, Any]) -> dict[str, Any]:
    if response.get("patchType") != "JSONPatch":
        raise CallError(
            f'failed calling webhook "{name}": unsupported patch type "{response.get("patchType")}"'
        )
    try:
        operations = json.loads(base64.b64decode(str(response["patch"]), validate=True))
    except (binascii.Error, ValueError) as exc:
        raise CallError(
            f'failed calling webhook "{name}": received undecodable patch in '
            f"webhook response: {exc}"
        ) from None
    try:
        patched = apply_patch(obj, operations)
    except JsonPatchError as exc:  # not a call failure: no failurePolicy applies
        raise _internal(str(exc)) from None
    if not isinstance(patched, dict):
        raise _internal(f'admission webhook "{name}" patched the object into a non-object')
    return patched


def _fail_or_go_on(hook: Mapping[str, Any], exc: CallError, record: Record, key: str) -> None:
    name = str(hook.get("name", ""))
    if hook.get("failurePolicy", "Fail") == "Ignore":
        log.warning("Failed calling webhook, failing open %s: %s", name, exc)
        record.annotations[key] = name
        return
    log.warning("Failed calling webhook, failing closed %s: %s", name, exc)
    raise _internal(str(exc))


def _denied(name: str, status: Any, attributes: Attributes) -> ApiError:
    """errors/statuserror.go ToStatusErr (v1.32)."""
    status = status if isinstance(status, dict) else {}
    code = status.get("code") if isinstance(status.get("code"), int) else 0
    message, reason = str(status.get("message") or ""), str(status.get("reason") or "")
    denied_by = f'admission webhook "{name}" denied the request'
    if message:
        text = f"{denied_by}: {message}"
    elif reason:
        text = f"{denied_by}: {reason}"
    else:
        text = f"{denied_by} without explanation"
    details = status.get("details") if isinstance(status.get("details"), dict) else None
    return ApiError(max(code, 400), reason, text, details)


def forbidden(attributes: Attributes, cause: str) -> ApiError:
    """admission.NewForbidden: apierrors.NewForbidden(resource, name, err), the name as
    extractResourceName finds it (the request's, the object's, its generateName, "Unknown")."""
    resource = (
        f"{attributes.resource}.{attributes.group}" if attributes.group else attributes.resource
    )
    metadata = (attributes.object or {}).get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    name = (
        attributes.name
        or str(metadata.get("name") or "")
        or str(metadata.get("generateName") or "")
        or "Unknown"
    )
    return ApiError(
        403,
        "Forbidden",
        f'{resource} "{name}" is forbidden: {cause}',
        {"name": name, "group": attributes.group, "kind": attributes.resource},
    )


def _internal(cause: str) -> ApiError:
    """apierrors.NewInternalError(err)."""
    return ApiError(
        500, "InternalError", f"Internal error occurred: {cause}", {"causes": [{"message": cause}]}
    )


# OpenSSL's verify messages as Go's crypto/x509 words the same failures.
_X509_WORDS = {
    "unable to get local issuer certificate": "certificate signed by unknown authority",
    "self-signed certificate": "certificate signed by unknown authority",
    "self signed certificate": "certificate signed by unknown authority",
    "certificate has expired": "certificate has expired or is not yet valid",
    "certificate is not yet valid": "certificate has expired or is not yet valid",
}


def _x509_words(error: BaseException) -> str:
    message = getattr(error, "verify_message", None) or str(error)
    return _X509_WORDS.get(message, message)
