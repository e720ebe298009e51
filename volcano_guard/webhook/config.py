"""The webhook's configuration: one YAML file, camelCase keys, validated before anything starts.

Each section is a frozen msgspec Struct whose fields carry their safe defaults and their bounds
(msgspec.Meta), so a key's name, type, range and default are written down exactly once. Each
policy owns its section (`policies.<name>`), defined beside its checks; this module gathers them
under `policies` with the guard's own keys and the audit's, and reads a file in one pass
(webhook.sections), unknown keys included. A bad key raises ConfigError naming its full path
(`policies.resourceRequests.mode`).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import Annotated, Literal

import msgspec
import yaml

from volcano_guard.base.connections import ConnectionLimits
from volcano_guard.base.durations import parse_duration
from volcano_guard.base.files import FileProblem, read_bytes, yaml_error_line, yaml_error_problem
from volcano_guard.base.volcano import COMPONENT_IMAGES
from volcano_guard.webhook.policies.node_name import NodeNameConfig, exempt_own_namespace
from volcano_guard.webhook.policies.pod_groups import PodGroupsConfig
from volcano_guard.webhook.policies.queues import QueuesConfig
from volcano_guard.webhook.policies.resource_requests import ResourceRequestsConfig
from volcano_guard.webhook.policies.sidecar_injection import SidecarInjectionConfig
from volcano_guard.webhook.sections import (
    MODES,
    ConfigError,
    DurationText,
    ImageName,
    Mode,
    Name,
    Positive,
    Section,
    convert,
    read_yaml,
)

__all__ = [
    "DEFAULT_MAX_REQUEST_BYTES",
    "MODES",
    "AuditConfig",
    "Config",
    "ConfigError",
    "Mode",
    "PoliciesConfig",
    "config_from_bytes",
    "config_from_dict",
    "exempt_own_namespace",  # the nodeName policy's; the webhook command applies it
    "load_config",
    "parse_config",
    "read_yaml",
]

VolcanoComponent = Literal[
    "scheduler",
    "agent-scheduler",
    "controller-manager",
    "hypernode-controller-manager",
    "admission",
]
DEFAULT_MAX_REQUEST_BYTES = 7 * 1024 * 1024


class PoliciesConfig(Section, frozen=True):
    """One section a policy, defined by the policy (webhook/policies/<name>)."""

    resourceRequests: ResourceRequestsConfig = msgspec.field(default_factory=ResourceRequestsConfig)
    nodeName: NodeNameConfig = msgspec.field(default_factory=NodeNameConfig)
    podGroups: PodGroupsConfig = msgspec.field(default_factory=PodGroupsConfig)
    queues: QueuesConfig = msgspec.field(default_factory=QueuesConfig)
    sidecarInjection: SidecarInjectionConfig = msgspec.field(default_factory=SidecarInjectionConfig)


class AuditConfig(Section, frozen=True, dict=True):
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
    volcanoImages: dict[ImageName, VolcanoComponent] = msgspec.field(default_factory=dict)
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


class Config(Section, frozen=True):
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
    # Also run the pod mutations the API server can make alone as MutatingAdmissionPolicies
    # where the cluster serves them (admissionregistration.k8s.io/v1, Kubernetes 1.36+), and
    # leave them out of the webhook registrations.
    mutatingAdmissionPolicies: bool = True
    # Kubernetes 1.34 and 1.35 serve them as v1beta1 only when kube-apiserver runs with
    # --runtime-config=admissionregistration.k8s.io/v1beta1=true and the
    # MutatingAdmissionPolicy feature gate: true says it does, and they are installed there.
    mutatingAdmissionPolicyBeta: bool = False
    policies: PoliciesConfig = msgspec.field(default_factory=PoliciesConfig)
    audit: AuditConfig = msgspec.field(default_factory=AuditConfig)


CONFIG_MAP_KEY = "config.yaml"  # where a ConfigMap manifest (deploy/base/config.yaml) holds it


def load_config(path: str | Path | None) -> Config:
    """Read and validate the YAML file at path (a config, or a ConfigMap manifest holding one
    under data.config.yaml); None means every default."""
    if path is None:
        return Config()
    try:
        data = read_bytes(path, "config file")
    except FileProblem as exc:
        raise ConfigError(str(exc)) from None
    return config_from_bytes(data, path)


def config_from_bytes(data: bytes, path: str | Path) -> Config:
    """The config in a file's bytes (path names the file in errors); ConfigError naming what is
    wrong."""
    try:
        parsed = _yaml(data.decode("utf-8"), f"config file {path}")
    except UnicodeDecodeError:
        raise ConfigError(f"config file {path}: not text (UTF-8)") from None
    if isinstance(parsed, dict) and _is_config_map(parsed):
        parsed = _yaml(_config_map_text(parsed, path), f"config file {path} key {CONFIG_MAP_KEY}")
    return config_from_dict({} if parsed is None else parsed)


def _yaml(text: str, name: str) -> object:
    try:
        return read_yaml(text)
    except yaml.YAMLError as exc:
        raise ConfigError(
            f"{name}{yaml_error_line(exc)}: not YAML: {yaml_error_problem(exc)}"
        ) from None


def _is_config_map(parsed: Mapping[str, object]) -> bool:
    return parsed.get("kind") == "ConfigMap" and "apiVersion" in parsed


def _config_map_text(manifest: Mapping[str, object], path: str | Path) -> str:
    data = manifest.get("data")
    text = data.get(CONFIG_MAP_KEY) if isinstance(data, dict) else None
    if not isinstance(text, str):
        raise ConfigError(
            f"config file {path}: a ConfigMap with no data key {CONFIG_MAP_KEY!r} (the config)"
        )
    return text


def parse_config(text: str) -> Config:
    """The config in YAML text (yaml.YAMLError when it is not YAML)."""
    data = read_yaml(text)
    return config_from_dict({} if data is None else data)


def config_from_dict(data: object) -> Config:
    return convert(data, Config)
