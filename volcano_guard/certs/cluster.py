"""Putting certificates into the cluster: the caBundle of the webhook configurations, and the
serving certificate's Secret. Both through the `kubernetes` client."""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path
from typing import Any

from volcano_guard.base.files import FileProblem, read_bytes
from volcano_guard.base.tls import ca_bundle_problem, pair_problem
from volcano_guard.certs.generate import CA_FILE, CERT_FILE, KEY_FILE, CertsError


def inject_ca_bundle(
    api_client: Any, pem: bytes, mutating: list[str], validating: list[str]
) -> list[str]:
    """Set clientConfig.caBundle to pem (from read_ca_bundle) on every webhook of the named
    configurations; returns what was patched. Each patch tests the webhook's name first, so a
    configuration edited meanwhile fails loudly instead of receiving a bundle at the wrong
    index."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from volcano_guard.base.api_client import api_error_text

    bundle = base64.b64encode(pem).decode("ascii")
    api = client.AdmissionregistrationV1Api(api_client)
    targets: list[tuple[str, str, Callable[..., Any], Callable[..., Any]]]
    targets = [
        (
            "MutatingWebhookConfiguration",
            name,
            api.read_mutating_webhook_configuration,
            api.patch_mutating_webhook_configuration,
        )
        for name in mutating
    ]
    targets += [
        (
            "ValidatingWebhookConfiguration",
            name,
            api.read_validating_webhook_configuration,
            api.patch_validating_webhook_configuration,
        )
        for name in validating
    ]
    patched = []
    for kind, name, read, patch in targets:
        try:
            webhooks = read(name).webhooks or []
            operations: list[dict[str, Any]] = []
            for index, webhook in enumerate(webhooks):
                operations.append(
                    {"op": "test", "path": f"/webhooks/{index}/name", "value": webhook.name}
                )
                operations.append(
                    {
                        "op": "add",
                        "path": f"/webhooks/{index}/clientConfig/caBundle",
                        "value": bundle,
                    }
                )
            if operations:
                patch(name, operations, _content_type="application/json-patch+json")
        except ApiException as exc:
            raise CertsError(f"{kind} {name}: {api_error_text(exc)}") from None
        patched.append(f"{kind}/{name} ({len(webhooks)} webhooks)")
    return patched


class UnfitCABundle(CertsError):
    """A file that must not become a caBundle; the message names it and says why."""


def read_ca_bundle(ca_file: str | Path) -> bytes:
    """The PEM CA certificates in ca_file, checked fit for a caBundle; UnfitCABundle naming
    the file and what is wrong otherwise."""
    try:
        pem = Path(ca_file).read_bytes()
    except OSError as exc:
        raise UnfitCABundle(f"{ca_file}: cannot read it ({exc.strerror or exc})") from None
    problem = ca_bundle_problem(pem)
    if problem:
        raise UnfitCABundle(f"{ca_file}: {problem}; no caBundle was changed")
    return pem


def write_secret(api_client: Any, directory: str | Path, namespace: str, name: str) -> str:
    """Create or update the kubernetes.io/tls Secret holding tls.crt, tls.key and ca.crt."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from volcano_guard.base.api_client import api_error_text

    folder = Path(directory)
    try:
        files = {key: read_bytes(folder / key) for key in (CERT_FILE, KEY_FILE, CA_FILE)}
    except FileProblem as exc:
        raise CertsError(str(exc)) from None
    problem = pair_problem(
        files[CERT_FILE], files[KEY_FILE], str(folder / CERT_FILE), str(folder / KEY_FILE)
    )
    if problem:  # the webhook could not serve it: refuse before the Secret is written
        raise CertsError(f"{problem}; the Secret was not changed")
    data = {key: base64.b64encode(content).decode("ascii") for key, content in files.items()}
    core = client.CoreV1Api(api_client)
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/name": "volcano-guard"},
        },
        "data": data,
    }
    try:
        core.create_namespaced_secret(namespace, body)  # type: ignore[arg-type]  # a dict works
        return "created"
    except ApiException as exc:
        if exc.status != 409:
            raise CertsError(f"Secret {namespace}/{name}: {api_error_text(exc)}") from None
    try:
        core.patch_namespaced_secret(
            name, namespace, {"data": data}, _content_type="application/merge-patch+json"
        )
    except ApiException as exc:
        raise CertsError(f"Secret {namespace}/{name}: {api_error_text(exc)}") from None
    return "updated"
