"""How Volcano's scheduler counts a resource list (pkg/scheduler/api/resource_info.go
`NewResource`): cpu in milli-units (MilliValue), memory and pods in units (Value),
ephemeral-storage and the scalar resources in milli-units, each rounded up; count/ quotas and
every other name not at all. The scalar resources are Kubernetes' v1helper
`IsScalarResourceName`: extended resources, huge pages, kubernetes.io-prefixed names and
attachable volumes.

One place for that fact: the Queue policy compares quantities so, and the audit counts pods,
nodes and Queue guarantees so.
"""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, Decimal
from functools import lru_cache

from volcano_guard.base.quantity import EXACT

_QUALIFIED = re.compile(
    r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
)
_BINARY_SUFFIXES = ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei")


def is_scalar(resource: str) -> bool:
    """Kubernetes' v1helper.IsScalarResourceName: extended resources (a domain-prefixed name
    outside kubernetes.io), huge pages, kubernetes.io-prefixed and attachable volumes."""
    if resource.startswith(("hugepages-", "attachable-volumes-")) or "kubernetes.io/" in resource:
        return True
    if "/" not in resource or resource.startswith("requests."):
        return False
    qualified = f"requests.{resource}"
    prefix = qualified.rpartition("/")[0]
    return len(prefix) <= 253 and _QUALIFIED.fullmatch(qualified) is not None


@lru_cache(maxsize=4096)  # the same few names in every object
def volcano_scale(resource: str) -> int | None:
    """1000 for the resources Volcano counts in milli-units, 1 for units, None: not counted."""
    if resource in ("memory", "pods"):
        return 1
    if resource in ("cpu", "ephemeral-storage") or (
        not resource.startswith("count/") and is_scalar(resource)
    ):
        return 1000
    return None


def scaled(quantity: Decimal, scale: int) -> Decimal:
    """quantity in units of 1/scale, rounded up, as MilliValue (1000) and Value (1) round."""
    units = EXACT.multiply(quantity, Decimal(scale)) if scale != 1 else quantity
    return units.to_integral_value(rounding=ROUND_CEILING, context=EXACT)


def volcano_units(resource: str, quantity: Decimal) -> Decimal | None:
    """How Volcano counts quantity of resource; None for what it does not count."""
    scale = volcano_scale(resource)
    return None if scale is None else scaled(quantity, scale)


def shown_units(resource: str, units: Decimal) -> str:
    """Volcano's count of resource as a quantity a user writes (2, 500m, 24Gi); exact to
    10**40 (EXACT: the default context cannot take the remainder of 1e33 by 1000)."""
    if abs(units.adjusted()) >= 40:  # a forged amount: as Decimal writes it
        return str(units)
    if volcano_scale(resource) == 1:
        whole = units
    elif EXACT.remainder(units, Decimal(1000)):
        return f"{_plain(units)}m"
    else:
        whole = EXACT.divide(units, Decimal(1000))
    if resource in ("memory", "ephemeral-storage") and whole >= 1024:
        for power, suffix in reversed(tuple(enumerate(_BINARY_SUFFIXES, 1))):
            if not EXACT.remainder(whole, Decimal(1024**power)):
                return f"{_plain(EXACT.divide(whole, Decimal(1024**power)))}{suffix}"
    return _plain(whole)


def _plain(value: Decimal) -> str:
    return f"{value.normalize(EXACT):f}" if abs(value.adjusted()) < 40 else str(value)
