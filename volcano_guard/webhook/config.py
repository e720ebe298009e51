"""The webhook's configuration: one YAML file, camelCase keys, validated before anything starts.

Each section is a frozen msgspec Struct whose fields carry their safe defaults and their bounds
(msgspec.Meta), so a key's name, type, range and default are written down exactly once. msgspec
checks a whole file in one pass, unknown keys included; the values with a grammar of their own
(quantities, durations, node selectors) are str types checked in that pass (_decode). A bad key
raises ConfigError naming its full path (`policies.resourceRequests.mode`).
"""

from __future__ import annotations

import datetime
import re
import typing
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

import msgspec
import yaml

from volcano_guard import __version__
from volcano_guard.base.connections import ConnectionLimits
from volcano_guard.base.durations import parse_duration
from volcano_guard.base.files import FileProblem, read_text, yaml_error_line, yaml_error_problem
from volcano_guard.base.jsonbody import shown
from volcano_guard.base.node_selectors import kept_selector, selector_set
from volcano_guard.base.quantity import QuantityError, parse_quantity
from volcano_guard.base.volcano import COMPONENT_IMAGES

Mode = Literal["enforce", "warn", "audit", "off"]
VolcanoComponent = Literal[
    "scheduler",
    "agent-scheduler",
    "controller-manager",
    "hypernode-controller-manager",
    "admission",
]
MODES: tuple[str, ...] = get_args(Mode)
DEFAULT_MAX_REQUEST_BYTES = 7 * 1024 * 1024

Name = Annotated[str, msgspec.Meta(min_length=1)]
Positive = Annotated[int, msgspec.Meta(gt=0)]
Seconds = Annotated[float, msgspec.Meta(gt=0)]
Port = Annotated[int, msgspec.Meta(ge=1, le=65535)]


class ConfigError(ValueError):
    """A configuration value is wrong; the message names the key."""


class QuantityText(str):
    """A Kubernetes quantity as written ("100m", "128Mi"); YAML's unquoted `cpu: 1` reads as 1."""


class DurationText(str):
    """A duration as operators write it: 90s, 5m, 1h, 30d."""


class NodeSelector(str):
    """One entry of the Volcano scheduler's --node-selector: key:value."""


class _Section(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """A config section: immutable once loaded, and a key it does not declare is an error."""


class ResourceRequestsConfig(_Section, frozen=True):
    mode: Mode = "enforce"
    resources: tuple[Name, ...] = ("cpu", "memory")
    # Filled in by /mutate for a missing request, e.g. {cpu: 100m, memory: 128Mi}.
    defaults: dict[Name, QuantityText] = msgspec.field(default_factory=dict)


class BindingGuardConfig(_Section, frozen=True):
    mode: Mode = "audit"
    allowedBinders: tuple[Name, ...] = ("system:serviceaccount:volcano-system:volcano-scheduler",)


class NodeNameConfig(_Section, frozen=True, dict=True):  # dict: room for a cached_property
    mode: Mode = "enforce"
    action: Literal["deny", "rewrite"] = "deny"
    managedNodeSelectors: tuple[NodeSelector, ...] = ()
    unknownNodes: Literal["deny", "allow"] = "deny"
    exemptNamespaces: tuple[Name, ...] = ("kube-system",)
    exemptUsers: tuple[Name, ...] = ()
    exemptGroups: tuple[Name, ...] = ()
    allowDaemonSets: bool = True
    # Who creates DaemonSet pods: the DaemonSet controller's identity (kube-controller-manager
    # with --use-service-account-credentials; without it, system:kube-controller-manager).
    daemonSetControllers: tuple[Name, ...] = (
        "system:serviceaccount:kube-system:daemon-set-controller",
    )
    bindingGuard: BindingGuardConfig = msgspec.field(default_factory=BindingGuardConfig)

    @cached_property
    def managed_selectors(self) -> frozenset[str]:
        """managedNodeSelectors as Volcano's scheduler holds them (node_selectors)."""
        return selector_set(self.managedNodeSelectors)


class DeleteGuardConfig(_Section, frozen=True):
    mode: Mode = "enforce"
    exemptUsers: tuple[Name, ...] = ()
    exemptGroups: tuple[Name, ...] = ()


class PodGroupsConfig(_Section, frozen=True):
    stampGenerationId: bool = True
    deleteGuard: DeleteGuardConfig = msgspec.field(default_factory=DeleteGuardConfig)


class SidecarInjectionConfig(_Section, frozen=True):
    mode: Mode = "enforce"
    image: Name = f"volcano-guard:{__version__}"  # this release's own image, never :latest
    nativeSidecar: bool = True
    port: Port = 8001
    metricsPort: Port = 9091
    # per pod: annotation volcano-guard.io/flush-interval, within the same bounds
    flushInterval: Annotated[float, msgspec.Meta(ge=0.05, le=60)] = 1.0
    ack: Literal["async", "sync"] = "async"  # per pod: annotation volcano-guard.io/ack
    drainTimeout: Seconds = 20.0
    proxyMode: Literal["args", "env"] = "args"  # per pod: annotation volcano-guard.io/proxy-mode
    # A hostNetwork pod's loopback is the node's: every process there could reach the sidecar.
    hostNetwork: Literal["refuse", "warn"] = "refuse"
    # The sidecar's own requests and limits, so injected pods pass resourceRequests.
    requests: dict[Name, QuantityText] = msgspec.field(
        default_factory=lambda: {"cpu": QuantityText("50m"), "memory": QuantityText("64Mi")}
    )
    limits: dict[Name, QuantityText] = msgspec.field(
        default_factory=lambda: {"cpu": QuantityText("1"), "memory": QuantityText("256Mi")}
    )


class PoliciesConfig(_Section, frozen=True):
    resourceRequests: ResourceRequestsConfig = msgspec.field(default_factory=ResourceRequestsConfig)
    nodeName: NodeNameConfig = msgspec.field(default_factory=NodeNameConfig)
    podGroups: PodGroupsConfig = msgspec.field(default_factory=PodGroupsConfig)
    sidecarInjection: SidecarInjectionConfig = msgspec.field(default_factory=SidecarInjectionConfig)


class AuditConfig(_Section, frozen=True, dict=True):
    """`volcano-guard audit`: what already exists in the cluster."""

    # A pod naming a PodGroup that does not exist is reported once it is this old (a duration:
    # 90s, 5m, 1h): younger ones may be waiting for their PodGroup to be created.
    orphanGracePeriod: DurationText = DurationText("5m")
    # A pod bound to a node that does not exist is reported once it has been so this long:
    # kube-controller-manager's pod garbage collector deletes such pods within about a minute.
    missingNodeGracePeriod: DurationText = DurationText("2m")
    # A Volcano control-plane container's non-zero exit is reported for this long after it.
    restartWindow: DurationText = DurationText("1h")
    # Image names (the last path segment, without registry or tag) of Volcano components
    # besides the installer's own (vc-scheduler...), e.g. a mirror's renamed copy.
    volcanoImages: dict[Name, VolcanoComponent] = msgspec.field(default_factory=dict)
    # A managed node updated more often than this a minute (smoothed over minutes) is counted
    # as churning: every update of a node reaches Volcano's scheduler cache (SetNode).
    nodeUpdatesPerMinute: Annotated[float, msgspec.Meta(gt=0)] = 6.0
    # Whether Volcano's scheduler runs with device sharing (its deviceshare plugin: GPU
    # sharing, vGPU, vNPU), where node updates race its scheduling (the churn alert's gate).
    schedulerDeviceSharing: bool = False
    maxResultsPerReport: Positive = 100  # results a PolicyReport lists; the total is kept apart

    @cached_property
    def orphan_grace(self) -> datetime.timedelta:
        return parse_duration(self.orphanGracePeriod)

    @cached_property
    def missing_node_grace(self) -> datetime.timedelta:
        return parse_duration(self.missingNodeGracePeriod)

    @cached_property
    def restart_window(self) -> datetime.timedelta:
        return parse_duration(self.restartWindow)

    @cached_property
    def component_images(self) -> Mapping[str, str]:
        return {**COMPONENT_IMAGES, **self.volcanoImages}


class Config(_Section, frozen=True):
    volcanoSchedulerNames: Annotated[tuple[Name, ...], msgspec.Meta(min_length=1)] = ("volcano",)
    # What to answer when a cache a decision needs is not synced: deny (true) or allow.
    failClosed: bool = True
    # Larger admission bodies get 413 without being read whole (the apiserver caps at 3 MiB
    # for etcd objects; 7 MiB leaves room for oldObject on UPDATE).
    maxRequestBytes: Positive = DEFAULT_MAX_REQUEST_BYTES
    # Connections a webhook pod holds open, split evenly among its --workers; at the cap a new
    # one takes the place of the one idle longest (a hostile connection costs up to 75 KiB).
    maxConnections: Positive = ConnectionLimits.max_connections
    # Also enforce the denies the API server can decide alone as ValidatingAdmissionPolicies
    # (`manifests` prints them; Kubernetes 1.30+), and let the webhook registrations they
    # cover fail open. false for clusters older than 1.30.
    validatingAdmissionPolicies: bool = True
    policies: PoliciesConfig = msgspec.field(default_factory=PoliciesConfig)
    audit: AuditConfig = msgspec.field(default_factory=AuditConfig)


class _ConfigLoader(yaml.SafeLoader):
    """YAML whose only booleans are true and false (as in YAML 1.2): YAML 1.1 also reads an
    unquoted on/off/yes/no as a boolean, which would turn `mode: off` into false."""


_ConfigLoader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_ConfigLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


def load_config(path: str | Path | None) -> Config:
    """Read and validate the YAML file at path; None means every default."""
    if path is None:
        return Config()
    try:
        text = read_text(path, "config file")
    except FileProblem as exc:
        raise ConfigError(str(exc)) from None
    try:
        return parse_config(text)
    except yaml.YAMLError as exc:
        raise ConfigError(
            f"config file {path}{yaml_error_line(exc)}: not YAML: {yaml_error_problem(exc)}"
        ) from None


def parse_config(text: str) -> Config:
    """The config in YAML text (yaml.YAMLError when it is not YAML)."""
    data = read_yaml(text)
    return config_from_dict({} if data is None else data)


def read_yaml(text: str) -> Any:
    """YAML text as the config reads it: true and false are the only booleans. yaml.YAMLError
    when it is not YAML, or nests too deeply to read."""
    try:
        return yaml.load(text, Loader=_ConfigLoader)  # a SafeLoader
    except RecursionError:
        raise yaml.YAMLError("it nests too deeply") from None


def config_from_dict(data: object) -> Config:
    try:
        return msgspec.convert(_empty_sections_dropped(data, Config), Config, dec_hook=_decode)
    except msgspec.ValidationError as exc:
        raise _config_error(str(exc), data) from None
    except RecursionError:
        raise ConfigError("config: nests too deeply") from None


def _empty_sections_dropped(data: object, section: type) -> object:
    """data without the sections written empty (`nodeName:` with every line under it commented
    out), which then take their defaults."""
    if not isinstance(data, dict):
        return data
    fields = _field_types(section)
    kept = {}
    for key, value in data.items():
        declared = _declared(fields.get(key))
        if isinstance(declared, type) and issubclass(declared, _Section):
            if value is None:
                continue
            value = _empty_sections_dropped(value, declared)
        kept[key] = value
    return kept


def _decode(kind: type, value: Any) -> Any:
    """Check and build the str types with a grammar of their own."""
    if kind is QuantityText:
        if isinstance(value, int | float) and not isinstance(value, bool):
            value = str(value)  # quantities are often written unquoted
        text = _text(value)
        try:
            quantity = parse_quantity(text)
        except QuantityError as exc:
            raise ValueError(f"{shown(text)}: {exc}") from None
        if quantity < 0:
            raise ValueError(f"{shown(text)} is negative")
        return QuantityText(text)
    if kind is DurationText:
        text = _text(value)
        parse_duration(text)  # ValueError naming the forms it takes
        return DurationText(text)
    if kind is NodeSelector:
        return NodeSelector(_node_selector(_text(value)))
    raise NotImplementedError(kind)


def _text(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise TypeError(f"expected a non-empty string, got {_describe(value)}")
    return value


def _node_selector(selector: str) -> str:
    # Volcano's scheduler silently ignores such an entry; refusing it keeps both lists equal in
    # effect instead of leaving an operator to wonder which nodes are protected.
    if "," in selector:
        raise ValueError(
            f"{shown(selector)} holds a comma; the scheduler's --node-selector "
            "splits on commas, so write one key:value a list item"
        )
    if kept_selector(selector) is None:
        raise ValueError(
            f"{shown(selector)} is not in the Volcano scheduler's --node-selector "
            "format key:value (a ':' followed by a value); the scheduler ignores "
            "such an entry"
        )
    return selector


# msgspec names JSON types; the config is YAML.
_TYPE_NAMES = {
    "`int` >= 1": "a positive integer",
    "`float` > 0.0": "a positive number",
    "`object`": "a mapping",
    "`array`": "a list",
    "`str`": "a string",
    "`int`": "an integer",
    "`float`": "a number",
    "`bool`": "true or false",
    "`null`": "nothing (null)",
}
_UNKNOWN_FIELD = re.compile(r"Object contains unknown field `(.*)`")


def _config_error(message: str, data: object) -> ConfigError:
    """ConfigError from msgspec's message (`Expected ... - at `$.a.b[0]``): the path first, as
    the operator writes it, then what is wrong and the value found there."""
    if " - at `" in message:  # rpartition: a key's own name may hold " - at `"
        message, _, at = message.rpartition(" - at `")
    else:  # at the top
        at = ""
    is_key, _, at = at.rpartition("in `")  # `key` in `$.a.b`: a mapping's key is wrong
    parts = re.findall(r"\.([^.\[`]+)|(\[[^\]]+\])", at)
    where, value, hint = _locate(data, parts)
    if unknown := _UNKNOWN_FIELD.fullmatch(message):
        known = ", ".join(sorted(field.name for field in msgspec.structs.fields(hint)))
        key = unknown.group(1)
        named = key if re.fullmatch(r"[\w/-]+", key) else shown(key)  # "", a space, ...
        return ConfigError(f"{_join(where, named)}: unknown key (known here: {known})")
    where = where or "config"
    if get_origin(hint) is Literal and not is_key:
        choices = " | ".join(str(choice) for choice in get_args(hint))
        return ConfigError(f"{where}: {_describe(value)} is not one of {choices}")
    if not message.startswith("Expected"):  # a check of ours (_decode), which shows the value
        return ConfigError(f"{where}: {message}")
    message = message.partition(", got ")[0]
    for name, readable in _TYPE_NAMES.items():
        message = message.replace(name, readable)
    if is_key:
        keys = ", ".join(shown(key) for key in value) if isinstance(value, dict) else ""
        return ConfigError(f"{where}: each key: {message.lower()}; the keys are {keys}")
    return ConfigError(f"{where}: {message.lower()}, got {_describe(value)}")


def _locate(data: object, parts: list[tuple[str, str]]) -> tuple[str, object, Any]:
    """The readable path of msgspec's path parts, the value there and its declared type. A
    mapping's value is shown by msgspec as `[...]`: the entry that fails is found again."""
    where, value, hint = "", data, Config
    for field_name, index in parts:
        hint = _declared(hint)
        if field_name:
            where, hint = _join(where, field_name), _field_types(hint)[field_name]
            value = value.get(field_name) if isinstance(value, dict) else None
        elif index == "[...]" and isinstance(value, dict):
            hint = get_args(hint)[1]
            key, value = next(
                ((key, item) for key, item in value.items() if not _valid(item, hint)), ("?", None)
            )
            where = _join(where, str(key))
        else:
            hint = get_args(hint)[0]
            value = value[int(index[1:-1])] if isinstance(value, list) else None
            where += index
    return where, value, _declared(hint)


def _declared(hint: Any) -> Any:
    """hint without its Annotated bounds."""
    return get_args(hint)[0] if get_origin(hint) is Annotated else hint


def _field_types(struct: type) -> dict[str, Any]:
    return typing.get_type_hints(struct, include_extras=True)


def _valid(value: object, hint: Any) -> bool:
    try:
        msgspec.convert(value, hint, dec_hook=_decode)
    except msgspec.ValidationError:
        return False
    return True


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _describe(value: object) -> str:
    if value is None:
        return "nothing (null)"
    kind = {
        dict: "a mapping",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
    }.get(type(value), type(value).__name__)
    return f"{kind} {shown(value)}" if isinstance(value, str | bool | int | float) else kind


def exempt_own_namespace(config: Config, namespace: str | None) -> Config:
    """The guard's own namespace is exempt from nodeName, so it can always repair itself."""
    node_name = config.policies.nodeName
    if not namespace or namespace in node_name.exemptNamespaces:
        return config
    node_name = msgspec.structs.replace(
        node_name, exemptNamespaces=(*node_name.exemptNamespaces, namespace)
    )
    return msgspec.structs.replace(
        config, policies=msgspec.structs.replace(config.policies, nodeName=node_name)
    )
