"""Offline check: the webhook's own policy code over manifests, for CI pipelines.

Each document goes through the same path as an admission: a CREATE AdmissionRequest is built
for it (a raw AdmissionReview is used as it is), /mutate's patch is applied, then /validate's
violations are reported. There is no requester offline: a pod is judged as a user's, and a
mirror or DaemonSet pod's violation says that only its creator could exempt it.
Exit codes: 0 clean, 1 violations, 2 unusable input.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import msgspec
import yaml

from volcano_guard.base.informer import Snapshot, static_snapshot
from volcano_guard.base.jsonbody import object_at
from volcano_guard.base.jsonpatch import JsonPatchError, apply_patch
from volcano_guard.base.volcano import (
    NEGATIVE_IDLE_RISK,
    SCHEDULER_PANICS,
    armed_schedulers,
    panic_message,
    pod_template_spec,
)
from volcano_guard.webhook import review
from volcano_guard.webhook.config import Config
from volcano_guard.webhook.policies import evaluate
from volcano_guard.webhook.policies.base import PolicyContext
from volcano_guard.webhook.policies.node_name import NAME as NODE_NAME
from volcano_guard.webhook.policies.node_name import NODES, node_labels, unvouched_claim
from volcano_guard.webhook.policies.pod_groups import (
    GENERATION_ID,
    is_pod_group,
    podgroup_generation,
)
from volcano_guard.webhook.review import AdmissionRequest, GroupVersionKind, GroupVersionResource
from volcano_guard.webhook.workloads import POD, ObjectShapeError, group_of

EXIT_CLEAN, EXIT_VIOLATIONS, EXIT_UNUSABLE = 0, 1, 2
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class UnusableInput(Exception):
    """A file that cannot be read as manifests; the message names it."""


@dataclass(frozen=True)
class Violation:
    file: str
    document: int
    kind: str
    name: str
    policy: str
    mode: str
    message: str

    def line(self) -> str:
        flag = "" if self.mode == "enforce" else f"[{self.mode}] "
        return f"{self.file}:{self.document} {self.kind}/{self.name}: {flag}{self.message}"


@dataclass(frozen=True)
class Report:
    violations: tuple[Violation, ...]
    documents: int

    @property
    def exit_code(self) -> int:
        enforced = any(v.mode == "enforce" for v in self.violations)
        return EXIT_VIOLATIONS if enforced else EXIT_CLEAN


def run_check(paths: list[str], config: Config, nodes_file: str | None = None) -> Report:
    """Check every manifest under paths; UnusableInput if any file cannot be used.

    Nodes come from nodes_file (a NodeList or Node documents); without it every node counts
    as Volcano-managed, the safe answer for a pipeline that cannot see the cluster."""
    context = offline_context(config, nodes_file)
    violations: list[Violation] = []
    documents = 0
    for file in manifest_files(paths):
        for index, document in enumerate(load_documents(file)):
            documents += 1
            violations.extend(check_document(str(file), index, document, context))
    return Report(tuple(violations), documents)


def offline_context(config: Config, nodes_file: str | None) -> PolicyContext:
    if nodes_file is None:
        node_name = msgspec.structs.replace(config.policies.nodeName, managedNodeSelectors=())
        config = msgspec.structs.replace(
            config, policies=msgspec.structs.replace(config.policies, nodeName=node_name))
        return PolicyContext(config, {NODES: Snapshot(_EveryNode(), synced=True)})
    nodes: dict[str, Mapping[str, str]] = {}
    for document in load_documents(Path(nodes_file)):
        items = document.get("items") if isinstance(document, dict) else None
        for obj in items if isinstance(items, list) else [document]:
            if not isinstance(obj, dict) or obj.get("kind") != "Node":
                raise UnusableInput(f"{nodes_file}: expected Node objects or a NodeList")
            try:
                nodes[obj["metadata"]["name"]] = node_labels(obj)
            except (KeyError, TypeError, AttributeError):
                raise UnusableInput(f"{nodes_file}: a Node without metadata.name") from None
    return PolicyContext(config, {NODES: static_snapshot(nodes)})


class _EveryNode(Mapping[str, Mapping[str, str]]):
    """A node list that knows every name (with no labels): all nodes count as managed."""

    def __getitem__(self, name: str) -> Mapping[str, str]:
        return {}

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


def manifest_files(paths: list[str]) -> Iterator[Path]:
    for text in paths:
        path = Path(text)
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.suffix in MANIFEST_SUFFIXES)
            yield from (p for p in found if p.is_file())
        elif path.is_file():
            yield path
        else:
            raise UnusableInput(f"{text}: no such file or directory")


def load_documents(file: Path) -> list[Any]:
    """Every non-empty YAML/JSON document in file (a JSON file is one YAML document)."""
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UnusableInput(f"{file}: cannot read: {exc}") from None
    try:
        documents = [d for d in yaml.load_all(text, Loader=_Loader) if d is not None]
    except yaml.YAMLError as exc:
        raise UnusableInput(f"{file}: not valid YAML or JSON: {exc}") from None
    except RecursionError:
        raise UnusableInput(f"{file}: nested too deeply") from None
    return documents


def check_document(file: str, index: int, document: Any,
                   context: PolicyContext) -> list[Violation]:
    if not isinstance(document, dict):
        raise UnusableInput(f"{file}:{index}: expected a Kubernetes object (a mapping)")
    if document.get("kind") == "List" and isinstance(document.get("items"), list):
        return [v for item in document["items"]
                for v in check_document(file, index, item, context)]
    try:
        request = _request_for(document)
        if request is None:
            return []
        return list(_violations(file, index, request, context))
    except (review.ReviewError, ObjectShapeError, JsonPatchError) as exc:
        raise UnusableInput(f"{file}:{index}: {exc}") from None


def _request_for(document: dict[str, Any]) -> AdmissionRequest | None:
    """The AdmissionRequest the API server would send for document; None if not an object."""
    if document.get("kind") == "AdmissionReview":
        return review.from_document(document)
    api_version, kind = document.get("apiVersion"), document.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return None  # not a Kubernetes object (e.g. a kustomization): nothing to check
    metadata = object_at(document, "metadata")
    group, _, version = api_version.rpartition("/")
    return AdmissionRequest(
        uid="offline-check",
        kind=GroupVersionKind(group_of(api_version), version, kind),
        # Policies decide by kind; the plural here only fills the field the API server sends.
        resource=GroupVersionResource(group, version, kind.lower() + "s"),
        operation="CREATE",
        namespace=_text(metadata.get("namespace")),
        name=_text(metadata.get("name")),
        object=document,
    )


def _violations(
    file: str, index: int, request: AdmissionRequest, context: PolicyContext
) -> Iterator[Violation]:
    if is_pod_group(request) and not podgroup_generation(request.object or {}):
        yield Violation(file, index, request.kind.kind, request.object_name, "podGroups", "info",
                        f"{request.describe()} has no {GENERATION_ID} yet; the webhook stamps "
                        "one when the PodGroup is created through the API server")
    for container in armed_schedulers(pod_template_spec(request.object or {}),
                                      context.config.volcanoSchedulerNames,
                                      context.config.audit.component_images):
        yield Violation(file, index, request.kind.kind, request.object_name, SCHEDULER_PANICS,
                        "warn", panic_message(container, NEGATIVE_IDLE_RISK))
    mutation = evaluate("mutate", request, context)
    if mutation.decision.patch and request.object is not None:
        patched = apply_patch(request.object, list(mutation.decision.patch))
        request = msgspec.structs.replace(request, object=patched)
    claim = (unvouched_claim(request.object or {}, context.config.policies.nodeName)
             if request.created(*POD) is not None else None)
    for result in evaluate("validate", request, context).results:
        for message in result.verdict.violations:
            if claim and result.policy == NODE_NAME:
                message = f"{message} ({claim})"
            yield Violation(
                file, index, request.kind.kind, request.object_name, result.policy,
                result.mode, message,
            )


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def format_report(report: Report, output: str) -> str:
    if output == "json":
        return json.dumps(
            {
                "documents": report.documents,
                "violations": [asdict(v) for v in report.violations],
                "exitCode": report.exit_code,
            },
            indent=2,
        )
    lines = [v.line() for v in report.violations]
    lines.append(f"{report.documents} documents checked, {len(report.violations)} violations")
    return "\n".join(lines)
