"""Fields an update may not change, refused (422) with kube-apiserver's messages.

- batch/v1 Job: spec.selector and spec.template (Kubernetes pkg/apis/batch/validation
  validation.go ValidateJobSpecUpdate, validatePodTemplateUpdate; the sandbox does not model
  the changes a suspended Job's template may take).
- apps/v1 Deployment: spec.selector (pkg/apis/apps/validation validation.go
  ValidateDeploymentUpdate).
- ConfigMap and Secret with `immutable: true`: data, binaryData and immutable itself (pkg/apis/
  core/validation validation.go ValidateConfigMapUpdate, ValidateSecretUpdate); a Secret's type
  never changes.

The apiserver prints a struct's Go value (%#v, field.Error.ErrorBody) in "Invalid value"; the
sandbox prints its Go type and `{...}` in its place.
"""

from __future__ import annotations

from typing import Any

from volcano_guard_sandbox.apiserver.resources import ResourceType
from volcano_guard_sandbox.apiserver.store import invalid_fields

IMMUTABLE = "field is immutable"
WHEN_SET = "Forbidden: field is immutable when `immutable` is set"
# kind -> (spec field, the Go type kube prints for its value)
_SPEC_FIELDS: dict[tuple[str, str], tuple[tuple[str, str], ...]] = {
    ("batch", "Job"): (("selector", "v1.LabelSelector"), ("template", "core.PodTemplateSpec")),
    ("apps", "Deployment"): (("selector", "v1.LabelSelector"),),
}


def check_update(resource: ResourceType, new: dict[str, Any], old: dict[str, Any]) -> None:
    errors = _spec_errors(resource, new, old) + _data_errors(resource, new, old)
    if errors:
        raise invalid_fields(resource, str(new["metadata"].get("name", "")), errors)


def _spec_errors(
    resource: ResourceType, new: dict[str, Any], old: dict[str, Any]
) -> list[tuple[str, str]]:
    fields = _SPEC_FIELDS.get((resource.group, resource.kind), ())
    new_spec, old_spec = new.get("spec") or {}, old.get("spec") or {}
    return [
        (f"spec.{name}", f"Invalid value: {go_type}{{...}}: {IMMUTABLE}")
        for name, go_type in fields
        if new_spec.get(name) != old_spec.get(name)
    ]


def _data_errors(
    resource: ResourceType, new: dict[str, Any], old: dict[str, Any]
) -> list[tuple[str, str]]:
    if resource.group or resource.kind not in ("ConfigMap", "Secret"):
        return []
    errors: list[tuple[str, str]] = []
    if resource.kind == "Secret" and new.get("type", "Opaque") != old.get("type", "Opaque"):
        errors.append(("type", f'Invalid value: "{new.get("type", "")}": {IMMUTABLE}'))
    if old.get("immutable") is not True:
        return errors
    if new.get("immutable") is not True:
        errors.append(("immutable", WHEN_SET))
    keys = ("data", "binaryData") if resource.kind == "ConfigMap" else ("data",)
    errors += [(key, WHEN_SET) for key in keys if (new.get(key) or {}) != (old.get(key) or {})]
    return errors
