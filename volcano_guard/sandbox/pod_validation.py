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
            return ('Pod in version "v1" cannot be handled as a Pod: quantities must be a '
                    'string or a number')
        try:
            parse_quantity(quantity)
        except QuantityError:
            reason = ("unable to parse quantity's suffix" if re.match(SPLIT, str(quantity))
                      else FORMAT_WRONG)
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
                errors.append((f"{path}.requests", f'Invalid value: "{_text(requests[name])}": '
                               f"must be less than or equal to {name} limit of "
                               f"{_text(limits[name])}"))
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
