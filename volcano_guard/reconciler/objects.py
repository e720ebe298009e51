"""The owned admission objects as the API server holds them, and how the reconciler writes them.

Each is read and written by its name only, which is all the reconciler's RBAC allows. A missing
one is created by server-side apply: kube-apiserver authorizes an apply that creates as verb
`create` with the object's name (staging/src/k8s.io/apiserver/pkg/endpoints/handlers/patch.go,
PatchResource), so a `create` rule naming the object allows exactly that and nothing else,
where a POST carries no name to authorize. An existing one is replaced whole (PUT with its
resourceVersion): what someone else added goes too.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from volcano_guard.webhook.admission_policies import GROUP, NEWEST, PolicyApis
from volcano_guard.webhook.manifests import (
    BINDING,
    MUTATING,
    MUTATING_BINDING,
    MUTATING_POLICY,
    PLURALS,
    POLICY,
    VALIDATING,
    Owned,
)

FIELD_MANAGER = "volcano-guard-reconciler"


def differs(desired: Any, live: Any) -> bool:
    """Whether live lacks something desired says: every key desired sets must hold the same
    value in live (the API server adds defaults, which are not drift); lists must match item
    by item."""
    if isinstance(desired, Mapping):
        return not isinstance(live, Mapping) or any(
            differs(value, live.get(key)) for key, value in desired.items()
        )
    if isinstance(desired, list):
        return (
            not isinstance(live, list)
            or len(desired) != len(live)
            or any(differs(d, v) for d, v in zip(desired, live, strict=True))
        )
    return bool(desired != live)


def spec_of(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What of an object the reconciler owns: all but its metadata (and status)."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


def with_ca_bundles(
    desired: Mapping[str, Any], live: Mapping[str, Any] | None, fallback: bytes
) -> dict[str, Any]:
    """A webhook configuration with each webhook's caBundle: the one live holds for the webhook
    of that name (the certificates step keeps those current), else fallback (the CAs the CA
    Secret trusts), else none yet."""
    if desired["kind"] not in (MUTATING, VALIDATING):
        return dict(desired)
    held = {
        webhook.get("name"): (webhook.get("clientConfig") or {}).get("caBundle")
        for webhook in (live or {}).get("webhooks") or ()
    }
    encoded = base64.b64encode(fallback).decode("ascii") if fallback else None
    webhooks = []
    for webhook in desired["webhooks"]:
        bundle = held.get(webhook["name"]) or encoded
        client_config = dict(webhook["clientConfig"])
        if bundle:
            client_config["caBundle"] = bundle
        webhooks.append({**webhook, "clientConfig": client_config})
    return {**desired, "webhooks": webhooks}


def without_ca_bundles(obj: Mapping[str, Any] | None) -> Any:
    """obj with no webhook's caBundle: what the config decides, apart from the certificates."""
    if not obj or "webhooks" not in obj:
        return obj
    webhooks = [
        {**w, "clientConfig": {k: v for k, v in w["clientConfig"].items() if k != "caBundle"}}
        for w in obj["webhooks"]
    ]
    return {**obj, "webhooks": webhooks}


class AdmissionObjects:
    """get, apply (create), replace and delete of owned objects, by name, as plain dicts, each
    kind at the version `apis` says the cluster serves it; one it does not serve is none."""

    def __init__(self, api_client: Any, apis: PolicyApis = NEWEST) -> None:
        self._api = api_client
        self.apis = apis

    def version(self, kind: str) -> str | None:
        """The version of admissionregistration.k8s.io a kind is served at (None: not)."""
        if kind in (POLICY, BINDING):
            return self.apis.validating
        if kind in (MUTATING_POLICY, MUTATING_BINDING):
            return self.apis.mutating
        return "v1"

    def get(self, owned: Owned) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        if self.version(owned.kind) is None:
            return None
        try:
            return dict(self._call("GET", owned))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def create(self, obj: dict[str, Any]) -> None:
        """Server-side apply of an object that does not exist (RBAC: create, by name)."""
        owned = Owned(obj["kind"], obj["metadata"]["name"])
        self._call(
            "PATCH",
            owned,
            body=obj,
            query=[("fieldManager", FIELD_MANAGER), ("force", "true")],
            content_type="application/apply-patch+yaml",  # JSON is YAML
        )

    def replace(self, obj: dict[str, Any], live: Mapping[str, Any]) -> None:
        """PUT obj over live, failing with 409 if live changed since it was read."""
        metadata = live.get("metadata") or {}
        body = {
            **obj,
            "metadata": {
                **obj["metadata"],
                "resourceVersion": metadata.get("resourceVersion"),
                "labels": {**(metadata.get("labels") or {}), **obj["metadata"].get("labels", {})},
            },
        }
        if metadata.get("annotations"):
            body["metadata"]["annotations"] = metadata["annotations"]
        self._call("PUT", Owned(obj["kind"], obj["metadata"]["name"]), body=body)

    def delete(self, owned: Owned) -> None:
        from kubernetes.client.exceptions import ApiException

        if self.version(owned.kind) is None:
            return
        try:
            self._call("DELETE", owned)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def _call(
        self,
        method: str,
        owned: Owned,
        body: Any = None,
        query: list[tuple[str, str]] | None = None,
        content_type: str = "application/json",
    ) -> Any:
        from volcano_guard.base.api_client import request_json

        path = f"/apis/{GROUP}/{self.version(owned.kind)}/{PLURALS[owned.kind]}/{owned.name}"
        return request_json(
            self._api, method, path, body=body, query=query, content_type=content_type
        )
