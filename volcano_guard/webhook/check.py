"""Offline check: the webhook's own policy code over manifests, for CI pipelines.

Each document goes through the same path as an admission: a CREATE AdmissionRequest is built
for it (a raw AdmissionReview is used as it is), /mutate's patch is applied, then /validate's
violations are reported. There is no requester offline: a pod is judged as a user's, and a
mirror or DaemonSet pod's violation says that only its creator could exempt it.
Files are read as `kubectl apply -f` reads them: `-` is standard input, a directory is its
manifest files (its whole tree with `recursive`), and a List's items are objects of their own.
A Volcano Queue is judged among the Queues the manifests hold, as if they were the cluster's.
A file or document that cannot be used is reported and the rest are still checked.
Exit codes: 0 clean, 1 violations, 2 unusable input (after everything else was checked).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

import msgspec
import yaml

from volcano_guard.base.files import FileProblem, read_text, yaml_error_line, yaml_error_problem
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
from volcano_guard.webhook.evaluation import evaluate
from volcano_guard.webhook.policies.base import PolicyContext
from volcano_guard.webhook.policies.node_name import NAME as NODE_NAME
from volcano_guard.webhook.policies.node_name import (
    NODES,
    node_labels,
    unvouched_claim,
    with_settings,
)
from volcano_guard.webhook.policies.pod_groups import (
    GENERATION_ID,
    is_pod_group,
    podgroup_generation,
)
from volcano_guard.webhook.policies.queues import MANIFESTS_ONLY, QUEUES, is_queue, queue_record
from volcano_guard.webhook.review import AdmissionRequest, GroupVersionKind, GroupVersionResource
from volcano_guard.webhook.volcano_versions import (
    SERVING_KINDS,
    template_labels,
    workload_notices,
)
from volcano_guard.webhook.workloads import POD, ObjectShapeError, format_path, group_of

EXIT_CLEAN, EXIT_VIOLATIONS, EXIT_UNUSABLE = 0, 1, 2
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class UnusableInput(Exception):
    """A file that cannot be read as manifests; the message names it."""


INFO = "info"  # the mode of a note: printed, never counted as a violation
STDIN = "<stdin>"


@dataclass(frozen=True)
class Violation:
    file: str
    document: int
    kind: str
    name: str
    policy: str
    mode: str
    message: str
    item: int | None = None  # the index in a List's items

    def line(self) -> str:
        flag = "" if self.mode == "enforce" else f"[{self.mode}] "
        where = f"{self.document}" if self.item is None else f"{self.document}[{self.item}]"
        return f"{self.file}:{where} {self.kind}/{self.name}: {flag}{self.message}"


@dataclass(frozen=True)
class Report:
    violations: tuple[Violation, ...]
    documents: int
    notes: tuple[Violation, ...] = ()
    problems: tuple[str, ...] = ()  # files and documents that could not be used, named

    @property
    def exit_code(self) -> int:
        if self.problems:
            return EXIT_UNUSABLE
        enforced = any(v.mode == "enforce" for v in self.violations)
        return EXIT_VIOLATIONS if enforced else EXIT_CLEAN


def run_check(
    paths: list[str],
    config: Config,
    nodes_file: str | None = None,
    *,
    recursive: bool = False,
    stdin: Callable[[], str] | None = None,
) -> Report:
    """Check every manifest under paths. UnusableInput if the nodes file cannot be used;
    any other file or document that cannot be is in the report's problems.

    Nodes come from nodes_file (a NodeList or Node documents); without it every node counts
    as Volcano-managed, the safe answer for a pipeline that cannot see the cluster."""
    context = offline_context(config, nodes_file)
    found: list[Violation] = []
    problems: list[str] = []
    documents = 0
    read_stdin = stdin or _read_stdin
    # Every file is read first: a Queue is judged among all the manifests' Queues. A file that
    # cannot be read is reported where it was met, among the documents' problems.
    unread: list[str] = []
    sources = [
        (source, len(unread)) for source in manifest_sources(paths, recursive, read_stdin, unread)
    ]
    queues = manifest_queues([source for source, _ in sources])
    context = msgspec.structs.replace(context, snapshots={**context.snapshots, QUEUES: queues})
    told = 0
    for (name, text), unread_before in sources:
        problems += unread[told:unread_before]
        told = unread_before
        try:
            for index, document in enumerate(yaml.load_all(text, Loader=_Loader)):
                if document is None:
                    continue
                documents += 1
                for item, obj in _objects(document):
                    try:
                        found.extend(check_document(name, index, obj, context, item))
                    except UnusableInput as exc:
                        problems.append(str(exc))
        except yaml.YAMLError as exc:  # the documents before it were checked
            problems.append(
                f"{name}{yaml_error_line(exc)}: not YAML or JSON: {yaml_error_problem(exc)}"
            )
        except RecursionError:
            problems.append(f"{name}: nested too deeply")
    problems += unread[told:]
    return Report(
        tuple(v for v in found if v.mode != INFO),
        documents,
        tuple(v for v in found if v.mode == INFO),
        tuple(problems),
    )


def offline_context(config: Config, nodes_file: str | None) -> PolicyContext:
    if nodes_file is None:
        config = with_settings(config, managedNodeSelectors=())  # every node is managed
        return PolicyContext(config, {NODES: Snapshot(_EveryNode(), synced=True)})
    nodes: dict[str, Mapping[str, str]] = {}
    for document in load_documents(nodes_file):
        items = document.get("items") if isinstance(document, dict) else None
        for obj in items if isinstance(items, list) else [document]:
            if not isinstance(obj, dict) or obj.get("kind") != "Node":
                raise UnusableInput(f"{nodes_file}: expected Node objects or a NodeList")
            try:
                nodes[obj["metadata"]["name"]] = node_labels(obj)
            except (KeyError, TypeError, AttributeError):
                raise UnusableInput(f"{nodes_file}: a Node without metadata.name") from None
    return PolicyContext(config, {NODES: static_snapshot(nodes)})


def manifest_queues(sources: list[tuple[str, str]]) -> Snapshot[Any]:
    """The Queues among the manifests, as the webhook's cache holds Queues: the hierarchy a
    Queue is judged in (a parent not among them may be in the cluster: not judged)."""
    queues = {}
    for _, text in sources:
        try:
            for document in yaml.load_all(text, Loader=_Loader):
                for _, obj in _objects(document):
                    if isinstance(obj, dict) and obj.get("kind") == "Queue":
                        record = queue_record(obj)
                        queues[record.name] = record
        except (yaml.YAMLError, RecursionError):
            continue  # reported when the documents are checked
    return Snapshot(MappingProxyType(queues), synced=True, resource_version=MANIFESTS_ONLY)


class _EveryNode(Mapping[str, Mapping[str, str]]):
    """A node list that knows every name (with no labels): all nodes count as managed."""

    def __getitem__(self, name: str) -> Mapping[str, str]:
        return {}

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


def _read_stdin() -> str:
    """Standard input as UTF-8 text, as a file is read (base.files.read_text): its bytes, not
    the terminal's decoding, which smuggles undecodable bytes through as surrogates."""
    data = sys.stdin.buffer.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise FileProblem(f"{STDIN}: not text (UTF-8)") from None


def manifest_sources(
    paths: list[str], recursive: bool, stdin: Callable[[], str], problems: list[str]
) -> Iterator[tuple[str, str]]:
    """(name, text) of each manifest file under paths, as kubectl -f finds them; a path that
    cannot be read goes to problems."""
    for text in paths:
        if text == "-":
            try:
                yield STDIN, stdin()
            except FileProblem as exc:
                problems.append(str(exc))
            continue
        path = Path(text)
        if path.is_dir():
            found = path.rglob("*") if recursive else path.glob("*")
            files = sorted(p for p in found if p.suffix in MANIFEST_SUFFIXES and p.is_file())
        elif path.exists():
            files = [path]
        else:
            problems.append(f"{text}: no such file or directory")
            continue
        for file in files:
            try:
                yield str(file), read_text(file)
            except FileProblem as exc:
                problems.append(str(exc))


def load_documents(path: str) -> list[Any]:
    """Every non-empty YAML/JSON document in the file; UnusableInput naming it otherwise."""
    try:
        text = read_text(path)
        return [d for d in yaml.load_all(text, Loader=_Loader) if d is not None]
    except FileProblem as exc:
        raise UnusableInput(str(exc)) from None
    except yaml.YAMLError as exc:
        raise UnusableInput(
            f"{path}{yaml_error_line(exc)}: not YAML or JSON: {yaml_error_problem(exc)}"
        ) from None
    except RecursionError:
        raise UnusableInput(f"{path}: nested too deeply") from None


def _objects(document: Any) -> Iterator[tuple[int | None, Any]]:
    """The objects a document holds: itself, or each item of a List (kubectl takes any kind
    ending in List with items, a PodList too), by index."""
    kind = document.get("kind") if isinstance(document, dict) else None
    if isinstance(kind, str) and kind.endswith("List") and isinstance(document.get("items"), list):
        yield from enumerate(document["items"])
    else:
        yield None, document


def check_document(
    file: str, index: int, document: Any, context: PolicyContext, item: int | None = None
) -> list[Violation]:
    where = f"{file}:{index}" if item is None else f"{file}:{index}[{item}]"
    if not isinstance(document, dict):
        raise UnusableInput(f"{where}: expected a Kubernetes object (a mapping)")
    try:
        request = _request_for(document)
        if request is None:
            return []
        if is_queue(request):
            _queue_shape(document)
        return [replace(v, item=item) for v in _violations(file, index, request, context)]
    except (review.ReviewError, ObjectShapeError, JsonPatchError) as exc:
        raise UnusableInput(f"{where}: {exc}") from None


def _queue_shape(queue: dict[str, Any]) -> None:
    """ObjectShapeError naming the first Queue field of a type Volcano's CRD refuses: in a
    cluster the API server refuses it before any webhook sees it, so the policies read such
    fields as unset; offline that would call the Queue clean. null is unset, as there."""
    spec = _shaped(queue, ("spec",), dict, "an object")
    _shaped(spec, ("spec", "parent"), str, "a string")
    guarantee = _shaped(spec, ("spec", "guarantee"), dict, "an object")
    lists = (("capability",), ("deserved",), ("guarantee", "resource"))
    for path in lists:
        holder = guarantee if path[0] == "guarantee" else spec
        resources = _shaped(holder, ("spec", *path), dict, "an object")
        for resource in resources:
            where = ("spec", *path, resource)
            _shaped(resources, where, str | int | float, "a quantity (a string or a number)")


def _shaped(holder: dict[str, Any], path: tuple[str, ...], kind: Any, what: str) -> Any:
    """holder's value at path[-1] ({} for an absent or null object); ObjectShapeError when it
    is not of kind."""
    value = holder.get(path[-1])
    if value is None:
        return {} if kind is dict else None
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ObjectShapeError(f"{format_path(path)} must be {what}")
    return value


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
        yield Violation(
            file,
            index,
            request.kind.kind,
            request.object_name,
            "podGroups",
            INFO,
            f"{request.describe()} has no {GENERATION_ID} yet; the webhook stamps "
            "one when the PodGroup is created through the API server",
        )
    for container in armed_schedulers(
        pod_template_spec(request.object or {}),
        context.config.volcanoSchedulerNames,
        context.config.audit.component_images,
    ):
        yield Violation(
            file,
            index,
            request.kind.kind,
            request.object_name,
            SCHEDULER_PANICS,
            "warn",
            panic_message(container, NEGATIVE_IDLE_RISK),
        )
    serving = request.kind.kind in SERVING_KINDS
    for notice in workload_notices(
        pod_template_spec(request.object or {}) if serving else None,
        template_labels(request.object or {}),
        context.config,
    ):
        mode = "enforce" if notice.result == "fail" else notice.result  # fail: a violation
        yield Violation(
            file, index, request.kind.kind, request.object_name, notice.policy, mode, notice.message
        )
    mutation = evaluate("mutate", request, context)
    if mutation.decision.patch and request.object is not None:
        patched = apply_patch(request.object, list(mutation.decision.patch))
        request = msgspec.structs.replace(request, object=patched)
    claim = (
        unvouched_claim(request.object or {}, context.config.policies.nodeName)
        if request.created(*POD) is not None
        else None
    )
    for result in evaluate("validate", request, context).results:
        for message in result.verdict.violations:
            if claim and result.policy == NODE_NAME:
                message = f"{message} ({claim})"
            yield Violation(
                file,
                index,
                request.kind.kind,
                request.object_name,
                result.policy,
                result.mode,
                message,
            )


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def format_report(report: Report, output: str) -> str:
    """The report for stdout (text output leaves the problems to stderr)."""
    if output == "json":
        return json.dumps(
            {
                "documents": report.documents,
                "violations": [asdict(v) for v in report.violations],
                "notes": [asdict(v) for v in report.notes],
                "problems": list(report.problems),
                "exitCode": report.exit_code,
            },
            indent=2,
        )
    lines = [v.line() for v in (*report.violations, *report.notes)]
    # Only enforce-mode violations fail the check; the rest are counted apart, as the audit does.
    warned = sum(v.mode != "enforce" for v in report.violations)
    enforced = len(report.violations) - warned
    summary = f"{report.documents} documents checked, {enforced} violations"
    if warned:
        summary += f", {warned} warnings"
    if report.notes:
        summary += f", {len(report.notes)} notes"
    if report.problems:
        summary += f", {len(report.problems)} unusable (listed on stderr)"
    return "\n".join([*lines, summary])
