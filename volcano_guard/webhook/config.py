"""The webhook's configuration: one YAML file, camelCase keys, validated before anything starts.

Each section is a frozen dataclass whose fields carry their safe defaults; the loader walks the
dataclasses, so a key's name, type and default are written down exactly once. A bad key raises
ConfigError naming its full path (`policies.resourceRequests.mode`).
"""

from __future__ import annotations

import dataclasses
import datetime
import typing
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import yaml

from volcano_guard.base.connections import ConnectionLimits
from volcano_guard.base.durations import parse_duration
from volcano_guard.base.node_selectors import kept_selector, selector_set
from volcano_guard.base.quantity import QuantityError, parse_quantity

Mode = Literal["enforce", "warn", "audit", "off"]
MODES: tuple[str, ...] = get_args(Mode)
DEFAULT_MAX_REQUEST_BYTES = 7 * 1024 * 1024


class ConfigError(ValueError):
    """A configuration value is wrong; the message names the key."""


@dataclass(frozen=True)
class ResourceRequestsConfig:
    mode: Mode = "enforce"
    resources: tuple[str, ...] = ("cpu", "memory")
    # Filled in by /mutate for a missing request, e.g. {cpu: 100m, memory: 128Mi}.
    defaults: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class BindingGuardConfig:
    mode: Mode = "audit"
    allowedBinders: tuple[str, ...] = (
        "system:serviceaccount:volcano-system:volcano-scheduler",
    )


@dataclass(frozen=True)
class NodeNameConfig:
    mode: Mode = "enforce"
    action: Literal["deny", "rewrite"] = "deny"
    managedNodeSelectors: tuple[str, ...] = ()
    unknownNodes: Literal["deny", "allow"] = "deny"
    exemptNamespaces: tuple[str, ...] = ("kube-system",)
    exemptUsers: tuple[str, ...] = ()
    exemptGroups: tuple[str, ...] = ()
    allowDaemonSets: bool = True
    bindingGuard: BindingGuardConfig = field(default_factory=BindingGuardConfig)

    @cached_property
    def managed_selectors(self) -> frozenset[str]:
        """managedNodeSelectors as Volcano's scheduler holds them (node_selectors)."""
        return selector_set(self.managedNodeSelectors)


@dataclass(frozen=True)
class DeleteGuardConfig:
    mode: Mode = "enforce"
    exemptUsers: tuple[str, ...] = ()
    exemptGroups: tuple[str, ...] = ()


@dataclass(frozen=True)
class PodGroupsConfig:
    stampGenerationId: bool = True
    deleteGuard: DeleteGuardConfig = field(default_factory=DeleteGuardConfig)


@dataclass(frozen=True)
class SidecarInjectionConfig:
    mode: Mode = "enforce"
    image: str = "volcano-guard:latest"
    nativeSidecar: bool = True
    port: int = 8001
    metricsPort: int = 9091
    flushInterval: float = 1.0  # per pod: annotation volcano-guard.io/flush-interval
    ack: Literal["async", "sync"] = "async"  # per pod: annotation volcano-guard.io/ack
    drainTimeout: float = 20.0
    proxyMode: Literal["args", "env"] = "args"  # per pod: annotation volcano-guard.io/proxy-mode
    # The sidecar's own requests and limits, so injected pods pass resourceRequests.
    requests: dict[str, str] = field(default_factory=lambda: {"cpu": "50m", "memory": "64Mi"})
    limits: dict[str, str] = field(default_factory=lambda: {"cpu": "1", "memory": "256Mi"})


@dataclass(frozen=True)
class PoliciesConfig:
    resourceRequests: ResourceRequestsConfig = field(default_factory=ResourceRequestsConfig)
    nodeName: NodeNameConfig = field(default_factory=NodeNameConfig)
    podGroups: PodGroupsConfig = field(default_factory=PodGroupsConfig)
    sidecarInjection: SidecarInjectionConfig = field(default_factory=SidecarInjectionConfig)


@dataclass(frozen=True)
class AuditConfig:
    """`volcano-guard audit`: what already exists in the cluster."""

    # A pod naming a PodGroup that does not exist is reported once it is this old (a duration:
    # 90s, 5m, 1h): younger ones may be waiting for their PodGroup to be created.
    orphanGracePeriod: str = "5m"
    maxResultsPerReport: int = 100  # results a PolicyReport lists; the total is kept apart

    @cached_property
    def orphan_grace(self) -> datetime.timedelta:
        return parse_duration(self.orphanGracePeriod)


@dataclass(frozen=True)
class Config:
    volcanoSchedulerNames: tuple[str, ...] = ("volcano",)
    # What to answer when a cache a decision needs is not synced: deny (true) or allow.
    failClosed: bool = True
    # Larger admission bodies get 413 without being read whole (the apiserver caps at 3 MiB
    # for etcd objects; 7 MiB leaves room for oldObject on UPDATE).
    maxRequestBytes: int = DEFAULT_MAX_REQUEST_BYTES
    # Connections one webhook process holds open; past it new ones are closed on arrival and
    # those open keep being served (an idle TLS connection costs tens of KiB).
    maxConnections: int = ConnectionLimits.max_connections
    policies: PoliciesConfig = field(default_factory=PoliciesConfig)
    audit: AuditConfig = field(default_factory=AuditConfig)


def load_config(path: str | Path | None) -> Config:
    """Read and validate the YAML file at path; None means every default."""
    if path is None:
        return Config()
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {exc}") from None
    return config_from_dict({} if data is None else data)


def config_from_dict(data: object) -> Config:
    config = _read_dataclass(Config, data, "")
    _check_semantics(config)
    return config


def _read_dataclass(cls: type, data: object, where: str) -> Any:
    if not isinstance(data, dict):
        raise ConfigError(f"{where or 'config'}: expected a mapping, got {_describe(data)}")
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    for key in data:
        if key not in known:
            raise ConfigError(
                f"{_join(where, str(key))}: unknown key (known here: {', '.join(sorted(known))})"
            )
    values = {key: _read_value(hints[key], value, _join(where, key)) for key, value in data.items()}
    return cls(**values)


def _read_value(hint: Any, value: object, where: str) -> Any:
    origin = get_origin(hint)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _read_dataclass(hint, {} if value is None else value, where)
    if origin is Literal:
        if value is False and "off" in get_args(hint):
            return "off"  # YAML 1.1 reads an unquoted `off` as false
        if value not in get_args(hint):
            choices = " | ".join(str(choice) for choice in get_args(hint))
            raise ConfigError(f"{where}: {value!r} is not one of {choices}")
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {_describe(value)}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ConfigError(f"{where}: expected a positive integer, got {_describe(value)}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise ConfigError(f"{where}: expected a positive number, got {_describe(value)}")
        return float(value)
    if hint is str:
        return _read_string(value, where)
    if origin is tuple:
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected a list, got {_describe(value)}")
        return tuple(_read_string(item, f"{where}[{i}]") for i, item in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {_describe(value)}")
        return {
            _read_string(key, where): _read_scalar_text(item, _join(where, str(key)))
            for key, item in value.items()
        }
    raise TypeError(f"config field {where} has unsupported type {hint}")  # a bug, not input


def _read_string(value: object, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: expected a non-empty string, got {_describe(value)}")
    return value


def _read_scalar_text(value: object, where: str) -> str:
    # Quantities are often written unquoted in YAML (cpu: 1); keep them as text.
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return _read_string(value, where)


def _check_semantics(config: Config) -> None:
    if not config.volcanoSchedulerNames:
        raise ConfigError("volcanoSchedulerNames: must name at least one scheduler")
    sidecar = config.policies.sidecarInjection
    for where, quantities in (
        ("policies.resourceRequests.defaults", config.policies.resourceRequests.defaults),
        ("policies.sidecarInjection.requests", sidecar.requests),
        ("policies.sidecarInjection.limits", sidecar.limits),
    ):
        for name, text in quantities.items():
            try:
                quantity = parse_quantity(text)
            except QuantityError as exc:
                raise ConfigError(f"{where}.{name}: {text!r}: {exc}") from None
            if quantity < 0:
                raise ConfigError(f"{where}.{name}: {text!r} is negative")
    try:
        parse_duration(config.audit.orphanGracePeriod)
    except ValueError as exc:
        raise ConfigError(f"audit.orphanGracePeriod: {exc}") from None
    for i, selector in enumerate(config.policies.nodeName.managedNodeSelectors):
        _check_node_selector(selector, f"policies.nodeName.managedNodeSelectors[{i}]")


def _check_node_selector(selector: str, where: str) -> None:
    # Volcano's scheduler silently ignores such an entry; refusing it keeps both lists equal in
    # effect instead of leaving an operator to wonder which nodes are protected.
    if "," in selector:
        raise ConfigError(f"{where}: {selector!r} holds a comma; the scheduler's --node-selector "
                          "splits on commas, so write one key:value a list item")
    if kept_selector(selector) is None:
        raise ConfigError(f"{where}: {selector!r} is not in the Volcano scheduler's "
                          "--node-selector format key:value (a ':' followed by a value); "
                          "the scheduler ignores such an entry")


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _describe(value: object) -> str:
    if value is None:
        return "nothing (null)"
    kind = {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), type(value).__name__
    )
    return f"{kind} {value!r}" if isinstance(value, str | bool | int | float) else kind



def exempt_own_namespace(config: Config, namespace: str | None) -> Config:
    """The guard's own namespace is exempt from nodeName, so it can always repair itself."""
    node_name = config.policies.nodeName
    if not namespace or namespace in node_name.exemptNamespaces:
        return config
    node_name = dataclasses.replace(
        node_name, exemptNamespaces=(*node_name.exemptNamespaces, namespace))
    return dataclasses.replace(config, policies=dataclasses.replace(config.policies,
                                                                    nodeName=node_name))
