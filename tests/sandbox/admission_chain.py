"""Helpers for the admission-chain tests: a scripted webhook, and a client for a sandbox whose
service map sends webhook calls to it (the fixtures are in conftest.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from tests.conftest import NAMESPACE, SERVICE

PODS = "/api/v1/namespaces/team-a/pods"
MUTATING = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
VALIDATING = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
POD_RULE = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["*"], "resources": ["pods"]}


def pod(name: str = "p1", **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


@dataclass
class ScriptedWebhook:
    """Answers every AdmissionReview with answer(request) (a response's fields, or an
    aiohttp response as is); records what it was sent."""

    port: int = 0
    calls: list[tuple[str, dict[str, str], dict[str, Any]]] = field(default_factory=list)
    answer: Callable[[dict[str, Any]], Any] = lambda request: {"allowed": True}

    async def handle(self, request: web.Request) -> web.StreamResponse:
        review = await request.json()
        self.calls.append((request.path, dict(request.query), review))
        result = self.answer(review["request"])
        if asyncio.iscoroutine(result):
            result = await result
        if isinstance(result, web.StreamResponse):
            return result
        return web.json_response(
            {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "response": {"uid": review["request"]["uid"], **result},
            }
        )

    def requests(self, path: str | None = None) -> list[dict[str, Any]]:
        return [
            review["request"] for called, _, review in self.calls if path is None or called == path
        ]


@dataclass
class Box:
    url: str
    session: aiohttp.ClientSession
    ca_bundle: str

    async def call(
        self, method: str, path: str, body: Any = None, token: str | None = None
    ) -> tuple[int, Any, list[str]]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with self.session.request(
            method, self.url + path, json=body, headers=headers
        ) as response:
            return (
                response.status,
                await response.json(content_type=None),
                response.headers.getall("Warning", []),
            )

    async def register(self, kind: str, name: str, *hooks: dict[str, Any]) -> None:
        path = MUTATING if kind == "mutating" else VALIDATING
        status, body, _ = await self.call(
            "POST", path, {"metadata": {"name": name}, "webhooks": list(hooks)}
        )
        assert status == 201, body

    def hook(self, name: str, path: str = "/validate", **fields: Any) -> dict[str, Any]:
        return {
            "name": name,
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "clientConfig": {
                "service": {"namespace": NAMESPACE, "name": SERVICE, "path": path, "port": 443},
                "caBundle": self.ca_bundle,
            },
            "rules": [POD_RULE],
            **fields,
        }

    async def audit(self) -> list[dict[str, Any]]:
        async with self.session.get(self.url + "/sandbox/audit") as response:
            return (await response.json())["items"]
