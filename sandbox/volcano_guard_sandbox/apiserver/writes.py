"""Writes through the admission chain, in the order of kube-apiserver's handlers (k8s.io/apiserver
pkg/endpoints/handlers create.go, update.go, patch.go, delete.go and pkg/registry/generic
registry/store.go):

    decode + default -> mutating webhooks -> the kind's own preparation and validation
    (name, uid, status, generation; preconditions) -> ValidatingAdmissionPolicies ->
    validating webhooks -> store

An update whose object changed while its webhooks were being called is done again from the
start, as the apiserver's GuaranteedUpdate retries; a precondition the client set still fails.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from volcano_guard_sandbox.apiserver import (
    admission_shapes,
    apply,
    crd_schemas,
    immutable,
    label_selectors,
    mutating_admission,
    pod_validation,
    policies,
)
from volcano_guard_sandbox.apiserver.admission import Dispatcher, Record
from volcano_guard_sandbox.apiserver.matching import Attributes, User, configuration_errors
from volcano_guard_sandbox.apiserver.policy_validation import compile_errors
from volcano_guard_sandbox.apiserver.reinvocation import ReinvocationContext
from volcano_guard_sandbox.apiserver.resources import ADMISSION, ResourceType, served
from volcano_guard_sandbox.apiserver.store import (
    APPLY_PATCH,
    ApiError,
    Stale,
    Store,
    Stored,
    default,
    invalid_fields,
)
from volcano_guard_sandbox.apiserver.versions import DEFAULT, KubernetesVersion

MAX_ATTEMPTS = 5
NAMESPACES = served("", "v1", "namespaces")
MUTATING = served(ADMISSION, "v1", "mutatingwebhookconfigurations")
VALIDATING = served(ADMISSION, "v1", "validatingwebhookconfigurations")
POLICIES = served(ADMISSION, "v1", "validatingadmissionpolicies")
BINDINGS = served(ADMISSION, "v1", "validatingadmissionpolicybindings")
PODS = served("", "v1", "pods")
JOBS = served("batch", "v1", "jobs")
JOB_CONTROLLER = User("system:serviceaccount:kube-system:job-controller")
log = logging.getLogger("volcano_guard_sandbox.apiserver.writes")
_CONTROLLERS: set[asyncio.Task[None]] = set()  # the controllers' running steps, kept referenced
BINDING_KIND = ("", "v1", "Binding")


@dataclass
class Write:
    """One write request: where it goes, who sends it, and what admission left."""

    store: Store
    dispatcher: Dispatcher
    user: User
    resource: ResourceType
    namespace: str
    name: str = ""
    subresource: str = ""
    query: Mapping[str, str] = field(default_factory=dict)
    record: Record = field(default_factory=Record)
    manager: str = "unknown"  # the fieldManager of managedFields
    dry_run: bool = False  # dryRun=All: admitted and answered as if stored, nothing stored
    created: bool = False  # an apply that created its object (201)
    kubernetes_version: KubernetesVersion = DEFAULT  # the kinds and CEL environment played

    def attributes(
        self,
        operation: str,
        obj: dict[str, Any] | None,
        old: dict[str, Any] | None,
        options: dict[str, Any] | None,
        kind: tuple[str, str, str] | None = None,
    ) -> Attributes:
        resource, name = self.resource, self.name
        namespace = self.namespace or (name if resource is NAMESPACES else "")
        return Attributes(
            operation=operation,
            group=resource.group,
            version=resource.version,
            resource=resource.plural,
            subresource=self.subresource,
            kind=kind or (resource.group, resource.version, resource.kind),
            namespace=namespace,
            name=name,
            user=self.user,
            object=obj,
            old_object=old,
            options=options,
            namespace_labels=self._namespace_labels(operation, obj, namespace),
            dry_run=self.dry_run,
        )

    def _namespace_labels(
        self, operation: str, obj: dict[str, Any] | None, namespace: str
    ) -> Mapping[str, str]:
        """predicates/namespace GetNamespaceLabels: a Namespace being created or updated is
        judged by its own labels, anything else by its namespace's."""
        if (
            self.resource is NAMESPACES
            and not self.subresource
            and operation in ("CREATE", "UPDATE")
        ):
            labels = ((obj or {}).get("metadata") or {}).get("labels")
            return labels if isinstance(labels, dict) else {}
        if not namespace:
            return {}
        try:
            return self.store.get(NAMESPACES, "", namespace).labels
        except ApiError:
            return {}

    def options(self, kind: str) -> dict[str, Any]:
        """The CreateOptions/UpdateOptions the webhooks see, from the request's query."""
        options: dict[str, Any] = {"kind": kind, "apiVersion": "meta.k8s.io/v1"}
        for key in ("fieldManager", "fieldValidation"):
            if self.query.get(key):
                options[key] = self.query[key]
        if self.dry_run:
            options["dryRun"] = ["All"]
        return options

    def configurations(self, resource: ResourceType) -> list[dict[str, Any]]:
        return self._objects(resource, "")

    async def mutate(self, attributes: Attributes) -> dict[str, Any] | None:
        """The mutating plugins (plugins.go's order: the policies, then the webhooks), once
        more when one asks for it (admission/reinvocation.go)."""
        context = ReinvocationContext()
        namespace = self._namespace_object(attributes)
        obj = await self._mutating_plugins(attributes, context, namespace)
        if context.should_reinvoke:
            context.is_reinvoke = True
            attributes = replace(attributes, object=obj)
            obj = await self._mutating_plugins(attributes, context, namespace)
        return obj

    async def _mutating_plugins(
        self,
        attributes: Attributes,
        context: ReinvocationContext,
        namespace: dict[str, Any] | None,
    ) -> dict[str, Any] | None:
        defaults = functools.partial(default, self.resource)
        policy_kinds = mutating_admission.served_kinds(self.kubernetes_version)
        if policy_kinds is not None:
            obj = mutating_admission.admit(
                attributes,
                mutating_admission.stored(self.store.list(policy_kinds[0], "")[0]),
                mutating_admission.stored(self.store.list(policy_kinds[1], "")[0]),
                self.params,
                namespace,
                self.record,
                self.kubernetes_version,
                context,
                defaults,
                builtin=self.resource.strategic_merge,  # Kubernetes' own kind: its list keys
            )
            attributes = replace(attributes, object=obj)
        return await self.dispatcher.mutate(
            attributes, self.configurations(MUTATING), self.record, defaults, context
        )

    async def validate(self, attributes: Attributes) -> None:
        """The admission policies, then the validating webhooks (plugins.go's order)."""
        policies.dispatch(
            attributes,
            self.configurations(POLICIES),
            self.configurations(BINDINGS),
            self.params,
            self._namespace_object(attributes),
            self.record,
            self.kubernetes_version,
        )
        await self.dispatcher.validate(attributes, self.configurations(VALIDATING), self.record)

    def params(self, api_version: str, kind: str) -> policies.ParamSource | None:
        """Where a binding's params are: objects of a paramKind the sandbox serves."""
        group, _, version = api_version.rpartition("/")
        for resource in self.kubernetes_version.resources:
            if (resource.group, resource.version, resource.kind) == (group, version, kind):
                return policies.ParamSource(
                    resource.namespaced, functools.partial(self._objects, resource)
                )
        return None

    def _objects(self, resource: ResourceType, namespace: str) -> list[dict[str, Any]]:
        items, _ = self.store.list(resource, namespace)
        return [stored.object() for stored in items]

    def _namespace_object(self, attributes: Attributes) -> dict[str, Any] | None:
        """The request's Namespace (none for cluster-scoped objects and for a Namespace)."""
        if not attributes.namespace or self.resource is NAMESPACES:
            return None
        try:
            return self.store.get(NAMESPACES, "", attributes.namespace).object()
        except ApiError:
            return None


async def create(write: Write, body: Any) -> Stored:
    store, resource, namespace = write.store, write.resource, write.namespace
    options = write.options("CreateOptions")
    obj = store.new_object(resource, namespace, body)
    _check_decodes(resource, obj)
    # The request's name is the body's: empty with generateName, for both kinds of webhook.
    write.name = str(obj["metadata"].get("name") or "")
    obj = await write.mutate(write.attributes("CREATE", obj, None, options)) or obj
    obj = store.prepare_create(resource, namespace, obj)
    _check_valid(resource, obj, write.kubernetes_version)
    await write.validate(write.attributes("CREATE", obj, None, options))
    write.name = obj["metadata"]["name"]
    if write.dry_run:
        return store.preview(resource, obj, None)
    stored = store.commit_create(resource, namespace, obj)
    if resource is JOBS:
        # After the answer, as the controller acts on the Job it watched being created: a slow
        # webhook on the pod holds up the pod, never the Job's create.
        task = asyncio.get_running_loop().create_task(_start_job(write, stored.object()))
        _CONTROLLERS.add(task)
        task.add_done_callback(_CONTROLLERS.discard)
    return stored


async def _start_job(write: Write, job: dict[str, Any]) -> None:
    """The Job controller's first step, played at once: one pod from the Job's template,
    created through admission as the controller's own create is (Kubernetes pkg/controller/
    job/job_controller.go manageJob -> podControl.CreatePodsWithGenerateName). The pod stays
    Pending: the sandbox runs no containers. A pod admission refuses is left uncreated (the
    controller would retry and record an Event)."""
    template = (job.get("spec") or {}).get("template") or {}
    metadata = job["metadata"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"{metadata['name']}-",
            "labels": dict((template.get("metadata") or {}).get("labels") or {}),
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": metadata["name"],
                    "uid": metadata["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": template.get("spec") or {},
    }
    controller = Write(
        write.store,
        write.dispatcher,
        JOB_CONTROLLER,
        PODS,
        write.namespace,
        manager="job-controller",
    )
    try:
        await create(controller, pod)
    except (ApiError, Stale) as exc:
        log.info("the sandbox's Job controller created no pod for %s: %s", metadata["name"], exc)


async def update(write: Write, body: Any) -> Stored:
    return await _update(
        write, lambda: write.store.replacement(write.resource, write.namespace, write.name, body)
    )


async def patch(write: Write, content_type: str, body: Any) -> Stored:
    if content_type == APPLY_PATCH:
        return await _apply(write, body)
    return await _update(
        write,
        lambda: write.store.patched(
            write.resource, write.namespace, write.name, content_type, body
        ),
    )


async def _apply(write: Write, body: Any) -> Stored:
    """Server-side apply: Kubernetes staging/src/k8s.io/apiserver/pkg/endpoints/handlers/patch.go
    PatchResource (applyPatcher); an absent object is created, admitted as a CREATE."""
    store, resource = write.store, write.resource
    applied = _applied_object(write, body)
    force = write.query.get("force") in ("true", "1")
    builtin = resource.strategic_merge
    try:
        store.get(resource, write.namespace, write.name)
    except ApiError as exc:
        if exc.code != 404:
            raise
        obj = apply.apply(None, applied, write.manager, force, builtin)
        obj["apiVersion"], obj["kind"] = resource.api_version, resource.kind
        write.created = True
        return await create(write, obj)

    def read() -> tuple[Stored, dict[str, Any]]:
        current = store.get(resource, write.namespace, write.name)
        merged = apply.apply(current.object(), applied, write.manager, force, builtin)
        return store.replacement(resource, write.namespace, write.name, merged)

    return await _update(write, read, applying=True)


def _applied_object(write: Write, body: Any) -> dict[str, Any]:
    resource = write.resource
    if write.subresource:
        raise ApiError(
            415,
            "UnsupportedMediaType",
            f"the sandbox does not model server-side apply to {resource.plural}/"
            f"{write.subresource}",
        )
    apply.check_manager(write.query)
    if not isinstance(body, dict):
        raise ApiError(400, "BadRequest", "an apply patch must be an object")
    if body.get("apiVersion") != resource.api_version or body.get("kind") != resource.kind:
        raise ApiError(
            400,
            "BadRequest",
            f"the apply patch's apiVersion and kind must be {resource.api_version} "
            f"{resource.kind}, got {body.get('apiVersion')} {body.get('kind')}",
        )
    metadata = body.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    if name != write.name:
        raise ApiError(
            400,
            "BadRequest",
            f"the name of the object ({name}) does not match the name on the URL ({write.name})",
        )
    return body


async def _update(write: Write, read: Any, applying: bool = False) -> Stored:
    store, resource, namespace, name = write.store, write.resource, write.namespace, write.name
    options = write.options("UpdateOptions")
    for _ in range(MAX_ATTEMPTS):
        current, obj = read()
        _check_decodes(resource, obj)
        old = current.object()
        obj = await write.mutate(write.attributes("UPDATE", obj, old, options)) or obj
        new = store.prepare_update(resource, namespace, name, current, obj, write.subresource)
        if not applying:
            apply.record_update(old, new, write.manager, resource.strategic_merge)
        _check_valid(resource, new, write.kubernetes_version)
        immutable.check_update(resource, new, old)
        if resource is PODS and not write.subresource:
            _check_pod_update(new, old)
        await write.validate(write.attributes("UPDATE", new, old, options))
        if write.dry_run:
            return store.preview(resource, new, current)
        try:
            return store.commit_update(resource, namespace, name, current, new)
        except Stale:
            write.record = Record()  # the next attempt's admission is what counts
    raise ApiError(
        409,
        "Conflict",
        f"the object {name!r} kept changing while it was being "
        f"updated ({MAX_ATTEMPTS} attempts); try again",
    )


def _check_decodes(resource: ResourceType, obj: dict[str, Any]) -> None:
    """A pod whose quantities do not parse, or an admission configuration or policy with a
    field of the wrong JSON type, is a bad request (400), before any admission."""
    if resource is PODS:
        error = pod_validation.decode_error(obj)
    else:
        error = admission_shapes.decode_error(resource.kind, obj)
    if error:
        raise ApiError(400, "BadRequest", error)


def _check_pod_update(new: dict[str, Any], old: dict[str, Any]) -> None:
    """A pod's spec changes only where kube-apiserver lets it (ValidatePodUpdate), 422."""
    errors = pod_validation.update_errors(new, old)
    if errors:
        raise invalid_fields(PODS, new["metadata"].get("name", ""), errors)


def _check_valid(resource: ResourceType, obj: dict[str, Any], version: KubernetesVersion) -> None:
    """What the resource's own validation refuses (422), after the mutating webhooks and
    before the validating plugins: a pod's negative quantities and requests above limits; a
    webhook configuration the sandbox could not match by, or an admission policy whose
    expressions do not compile."""
    if resource.group == ADMISSION and resource.kind in mutating_admission.KINDS:
        mutating_admission.check_write(resource.kind, obj, version)
        return
    schema = crd_schemas.schema_of(resource)
    if schema is not None:
        crd_errors = crd_schemas.validation_errors(schema, obj)
        if crd_errors:
            name, qualified = obj["metadata"].get("name", ""), f"{resource.kind}.{resource.group}"
            raise invalid_fields(resource, name, crd_errors, qualified)
        return
    if resource is PODS:
        pod_errors = pod_validation.resource_errors(obj)
        if pod_errors:
            raise invalid_fields(resource, obj["metadata"].get("name", ""), pod_errors)
        return
    if resource in (MUTATING, VALIDATING):
        errors = configuration_errors(obj, version)
    elif resource is POLICIES:
        spec = obj.get("spec") or {}
        errors = compile_errors(spec, version) + label_selectors.policy_errors(spec)
    elif resource is BINDINGS:
        errors = policies.binding_errors(obj.get("spec") or {})
    else:
        return
    if errors:
        name = obj["metadata"].get("name", "")
        raise ApiError(
            422,
            "Invalid",
            f'{resource.kind}.admissionregistration.k8s.io "{name}" '
            f"is invalid: {'; '.join(errors)}",
        )


async def delete(
    write: Write, options: dict[str, Any] | None, *, collection: bool = False
) -> Stored:
    """One object deleted through admission; an item of a collection delete is admitted with
    the collection's empty name, its oldObject saying which (kube-apiserver's DeleteCollection:
    handlers/delete.go, rest.AdmissionToValidateObjectDeleteFunc)."""
    store, resource, namespace, name = write.store, write.resource, write.namespace, write.name
    delete_options = {"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1", **(options or {})}
    admitted = replace(write, name="") if collection else write
    current = store.get(resource, namespace, name)
    await write.mutate(admitted.attributes("DELETE", None, current.object(), delete_options))
    current = store.before_delete(resource, namespace, name, options)
    await write.validate(admitted.attributes("DELETE", None, current.object(), delete_options))
    if write.dry_run:
        return current
    deleted = store.delete(resource, namespace, name, options)
    if resource is JOBS and (options or {}).get("propagationPolicy") != "Orphan":
        store.delete_dependents(PODS, namespace, current.uid)
    return deleted


async def bind(write: Write, binding: Any) -> None:
    """pods/binding (or the bindings resource): admitted as a CREATE of a Binding."""
    if not isinstance(binding, dict):
        raise ApiError(400, "BadRequest", "the body is not a Binding object")
    options = write.options("CreateOptions")
    attributes = write.attributes("CREATE", binding, None, options, kind=BINDING_KIND)
    binding = await write.mutate(attributes) or binding
    await write.validate(write.attributes("CREATE", binding, None, options, kind=BINDING_KIND))
    write.store.bind(write.namespace, write.name, binding)
