"""What kube-apiserver itself refuses in a pod's resources, before and around admission.

Decoding (before any admission plugin): a quantity that does not parse makes the body a bad
request, 400 (resource.Quantity UnmarshalJSON: ErrFormatWrong, or the suffix error). The Pod
strategy's validation (after the mutating webhooks, before the validating plugins:
registry/generic Store.Create runs BeforeCreate, then createValidation): a negative quantity,
or a request above its limit, makes it invalid, 422 (pkg/apis/core/validation
ValidateResourceRequirements; values printed as resource.Quantity.String() prints them).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from volcano_guard.base.quantity import QuantityError, canonical_quantity, parse_quantity

SPLIT = r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"  # resource's splitREString
FORMAT_WRONG = f"quantities must match the regular expression '{SPLIT}'"
_CONTAINER_LISTS = ("containers", "initContainers")  # ValidatePodSpec's order


def decode_error(pod: Any) -> str | None:
    """Why the pod cannot be decoded (`Pod in version "v1" cannot be handled as a Pod: ...`),
    or None."""
    for _, quantity in _quantities(pod):
        if isinstance(quantity, bool) or not isinstance(quantity, str | int | float):
            return (
                'Pod in version "v1" cannot be handled as a Pod: quantities must be a '
                "string or a number"
            )
        try:
            parse_quantity(quantity)
        except QuantityError:
            reason = (
                "unable to parse quantity's suffix"
                if re.match(SPLIT, str(quantity))
                else FORMAT_WRONG
            )
            return f'Pod in version "v1" cannot be handled as a Pod: {reason}'
    return None


def resource_errors(pod: Any) -> list[tuple[str, str]]:
    """(FIELD, `Invalid value: "VALUE": DETAIL`) for each negative quantity and each request
    above its limit, containers in order, resources by name (Go ranges over a map)."""
    errors = []
    for path, resources in _requirements(pod):
        limits, requests = resources.get("limits"), resources.get("requests")
        limits = limits if isinstance(limits, dict) else {}
        requests = requests if isinstance(requests, dict) else {}
        for name in sorted(limits):
            errors += _negative(f"{path}.limits[{name}]", limits[name])
        for name in sorted(requests):
            errors += _negative(f"{path}.requests[{name}]", requests[name])
            if name in limits and _value(requests[name]) > _value(limits[name]):
                errors.append(
                    (
                        f"{path}.requests",
                        f'Invalid value: "{_text(requests[name])}": '
                        f"must be less than or equal to {name} limit of "
                        f"{_text(limits[name])}",
                    )
                )
    return errors


def _negative(path: str, quantity: Any) -> list[tuple[str, str]]:
    if _value(quantity) < 0:
        return [(path, f'Invalid value: "{_text(quantity)}": must be greater than or equal to 0')]
    return []


def _value(quantity: Any) -> Any:
    return parse_quantity(quantity)


def _text(quantity: Any) -> str:
    return canonical_quantity(str(quantity))


def _requirements(pod: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    spec = pod.get("spec") if isinstance(pod, dict) else None
    if not isinstance(spec, dict):
        return
    for field in _CONTAINER_LISTS:
        containers = spec.get(field)
        for index, container in enumerate(containers if isinstance(containers, list) else ()):
            resources = container.get("resources") if isinstance(container, dict) else None
            if isinstance(resources, dict):
                yield f"spec.{field}[{index}].resources", resources


def _quantities(pod: Any) -> Iterator[tuple[str, Any]]:
    for path, resources in _requirements(pod):
        for kind in ("limits", "requests"):
            values = resources.get(kind)
            if isinstance(values, dict):
                for name, quantity in values.items():
                    yield f"{path}.{kind}[{name}]", quantity


# What a pod update may change (pkg/apis/core/validation/validation.go updatablePodSpecFields,
# in its words: the message lists them).
UPDATABLE_POD_SPEC_FIELDS = (
    "`spec.containers[*].image`",
    "`spec.initContainers[*].image`",
    "`spec.activeDeadlineSeconds`",
    "`spec.tolerations` (only additions to existing tolerations)",
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
)


def update_errors(new: dict[str, Any], old: dict[str, Any]) -> list[tuple[str, str]]:
    """What kube-apiserver refuses in an update of a pod's spec through the pod itself
    (validation.go ValidatePodUpdate): containers neither added nor removed, images only
    replaced, activeDeadlineSeconds only set or lowered, tolerations only added, scheduling
    gates only removed, nodeSelector only added to while the pod is gated, and nothing else
    changed (nodeName and resources included: a scheduler binds through pods/binding).
    A gated pod's node affinity may change in kube-apiserver under rules not modelled here:
    the sandbox refuses that change."""
    new_spec, old_spec = _mapping(new.get("spec")), _mapping(old.get("spec"))
    errors: list[tuple[str, str]] = []
    for key in ("containers", "initContainers"):
        new_list, old_list = _list(new_spec.get(key)), _list(old_spec.get(key))
        if len(new_list) != len(old_list):
            return [(f"spec.{key}", "Forbidden: pod updates may not add or remove containers")]
        errors += [
            (f"spec.{key}[{index}].image", "Required value")
            for index, container in enumerate(new_list)
            if not _mapping(container).get("image")
        ]
    errors += _deadline_errors(
        new_spec.get("activeDeadlineSeconds"), old_spec.get("activeDeadlineSeconds")
    )
    old_tolerations, new_tolerations = (
        _list(old_spec.get("tolerations")),
        _list(new_spec.get("tolerations")),
    )
    if any(_pruned(t) not in [_pruned(n) for n in new_tolerations] for t in old_tolerations):
        errors.append(
            (
                "spec.tolerations",
                "Forbidden: existing toleration can not be modified except its tolerationSeconds",
            )
        )
    old_gates = [_mapping(g).get("name") for g in _list(old_spec.get("schedulingGates"))]
    for gate in _list(new_spec.get("schedulingGates")):
        if _mapping(gate).get("name") not in old_gates:
            errors.append(
                (
                    "spec.schedulingGates",
                    "Forbidden: only deletion is allowed, but "
                    f"found new scheduling gate '{_mapping(gate).get('name')}'",
                )
            )
    if _pruned(_munged(new_spec, old_spec)) != _pruned(old_spec):
        errors.append(
            (
                "spec",
                "Forbidden: pod updates may not change fields other than "
                + ",".join(UPDATABLE_POD_SPEC_FIELDS),
            )
        )
    return errors


def _deadline_errors(new: Any, old: Any) -> list[tuple[str, str]]:
    """Set from nothing to a value, or lowered; never raised or removed."""
    path = "spec.activeDeadlineSeconds"
    if new is None:
        return (
            []
            if old is None
            else [
                (path, "Invalid value: null: must not update from a positive integer to nil value")
            ]
        )
    if not isinstance(new, int) or isinstance(new, bool) or not 0 <= new <= 2**31 - 1:
        return [(path, f"Invalid value: {new!r}: must be between 0 and 2147483647, inclusive")]
    if isinstance(old, int) and old < new:
        return [(path, f"Invalid value: {new}: must be less than or equal to previous value")]
    return []


def _munged(new_spec: dict[str, Any], old_spec: dict[str, Any]) -> dict[str, Any]:
    """new_spec with what an update may change put back as it was, to compare with the old."""
    munged = dict(new_spec)
    for key in ("containers", "initContainers"):
        if key in munged:
            munged[key] = [
                {**_mapping(container), "image": _mapping(old).get("image")}
                for container, old in zip(_list(munged[key]), _list(old_spec.get(key)), strict=True)
            ]
    for key in ("activeDeadlineSeconds", "schedulingGates", "tolerations"):
        munged.pop(key, None)
        if key in old_spec:
            munged[key] = old_spec[key]
    old_grace, new_grace = (
        old_spec.get("terminationGracePeriodSeconds"),
        munged.get("terminationGracePeriodSeconds"),
    )
    if isinstance(old_grace, int) and old_grace < 0 and new_grace == 1:
        munged["terminationGracePeriodSeconds"] = old_grace
    if old_spec.get("schedulingGates"):  # a gated pod's nodeSelector may only grow
        old_selector = _mapping(old_spec.get("nodeSelector"))
        if _mapping(munged.get("nodeSelector")).items() >= old_selector.items():
            munged["nodeSelector"] = old_spec.get("nodeSelector")
    return munged


def _pruned(value: Any) -> Any:
    """value without empty fields: JSON leaves out what Go's omitempty leaves out, so an
    absent list, map or null and an empty one are the same field."""
    if isinstance(value, dict):
        return {
            key: _pruned(item)
            for key, item in value.items()
            if item is not None and item != [] and item != {}
        }
    if isinstance(value, list):
        return [_pruned(item) for item in value]
    return value


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
