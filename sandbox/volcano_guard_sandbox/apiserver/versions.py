"""The Kubernetes version the sandbox plays (1.30 to 1.36): what its discovery says, which kinds
it serves, and which CEL environment its admission expressions compile and run in.

What changes between those versions, for what the guard and its tests touch (docs/decisions/
sandbox.md, "One version knob", has the table and its sources):
- admissionregistration.k8s.io/v1 serves ValidatingAdmissionPolicy(Binding) from 1.30 and
  MutatingAdmissionPolicy(Binding) from 1.36; v1beta1 and v1alpha1 are off by default at every
  version (kube-apiserver serves new beta APIs only when asked): `--runtime-config` turns one
  on, within the releases its kinds are served in (resources.PRERELEASE), provided no kind is
  then served at two versions (the sandbox keeps one version of each kind, converting none).
- CEL: kube-apiserver compiles a new expression in the environment of its compatibility
  version, one minor below its own (1.30 says 1.29; from 1.31 the effective version's
  MinCompatibilityVersion), and runs stored expressions in the environment of its own version.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

from aiohttp import web
from cel_expr_python import cel
from google.protobuf import descriptor_pool

from volcano_guard_sandbox.apiserver import kubernetes_cel
from volcano_guard_sandbox.apiserver.resources import RESOURCES, ResourceType, find, group_versions

OLDEST, NEWEST = 30, 36  # the minors of Kubernetes 1.x the sandbox plays
# kube-apiserver's order of preference among a group's versions (GA, then beta, then alpha).
_STABILITY = {"": 0, "beta": 1, "alpha": 2}


@dataclass(frozen=True)
class KubernetesVersion:
    """Kubernetes 1.<minor>, as one sandbox plays it: the app holds it (SandboxSettings).
    runtime_config: the group versions off by default that kube-apiserver's --runtime-config
    turned on (their feature gates taken as on too)."""

    minor: int
    runtime_config: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if not OLDEST <= self.minor <= NEWEST:
            raise ValueError(
                f"the sandbox plays Kubernetes 1.{OLDEST} to 1.{NEWEST}, not 1.{self.minor}"
            )
        self._check_runtime_config()

    def _check_runtime_config(self) -> None:
        """ValueError for a group version this release lacks, or a kind served twice."""
        available = {r.api_version for r in RESOURCES if r.off_by_default and self._in_release(r)}
        if unknown := sorted(self.runtime_config - available):
            offered = ", ".join(sorted(available)) or "none"
            raise ValueError(
                f"--runtime-config: {unknown[0]} is not a group version Kubernetes {self} "
                f"has off by default (it has: {offered})"
            )
        kinds = [(r.group, r.kind) for r in self.resources]
        if twice := sorted({k for k in kinds if kinds.count(k) > 1}):
            served_at = [r.version for r in self.resources if (r.group, r.kind) == twice[0]]
            raise ValueError(
                f"--runtime-config: {twice[0][1]} would be served at {' and '.join(served_at)}; "
                "the sandbox serves each kind at one version"
            )

    @classmethod
    def parse(cls, text: str) -> KubernetesVersion:
        """'1.30' or 'v1.30'; ValueError in one line naming the text otherwise."""
        match = re.fullmatch(r"v?1\.(\d{1,3})", text.strip())
        if not match:
            raise ValueError(f"{text!r} is not a Kubernetes version such as 1.{NEWEST}")
        return cls(int(match[1]))

    def __str__(self) -> str:
        return f"1.{self.minor}"

    def _in_release(self, resource: ResourceType) -> bool:
        removed = resource.removed_in or NEWEST + 1
        return resource.served_from <= self.minor < removed

    @property
    def git_version(self) -> str:
        return f"v1.{self.minor}.0"

    @cached_property
    def resources(self) -> tuple[ResourceType, ...]:
        """The resource types this version serves: by default, and as runtime_config asks."""
        return tuple(
            r
            for r in RESOURCES
            if self._in_release(r)
            and (not r.off_by_default or r.api_version in self.runtime_config)
        )

    def find(self, group: str, version: str, plural: str) -> ResourceType | None:
        return find(group, version, plural, self.resources)

    def group_versions(self) -> dict[tuple[str, str], list[ResourceType]]:
        return group_versions(self.resources)

    def groups(self) -> dict[str, list[str]]:
        """Each named group -> its served versions, the preferred one first."""
        out: dict[str, list[str]] = {}
        for group, version in self.group_versions():
            if group:
                out.setdefault(group, []).append(version)
        return {group: sorted(versions, key=version_priority) for group, versions in out.items()}

    @property
    def cel_for_new_expressions(self) -> tuple[int, int]:
        """The CEL environment version an expression being written is compiled in."""
        return (1, self.minor - 1)

    @property
    def cel_for_stored_expressions(self) -> tuple[int, int]:
        """The CEL environment version a stored expression is compiled in and runs in."""
        return (1, self.minor)


DEFAULT = KubernetesVersion(32)
VERSION_KEY = web.AppKey("kubernetes_version", KubernetesVersion)  # the version an app plays


def parse_runtime_config(text: str) -> frozenset[str]:
    """kube-apiserver's --runtime-config, as far as the sandbox models it: comma-separated
    GROUP/VERSION or GROUP/VERSION=true (turned on) or =false (off, as by default)."""
    enabled: set[str] = set()
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, _, value = item.partition("=")
        if not re.fullmatch(r"[a-z0-9.-]+\.[a-z]+/v\d+(alpha|beta)\d+", key) or value not in (
            "",
            "true",
            "false",
        ):
            raise ValueError(
                f"--runtime-config: {item!r} is not GROUP/VERSION=true or =false for an alpha or "
                "beta group version (the sandbox models no other key)"
            )
        if value != "false":
            enabled.add(key)
    return frozenset(enabled)


def version_priority(version: str) -> tuple[int, int, int]:
    """apimachinery's version priority: v2 > v1 > v1beta2 > v1beta1 > v1alpha1."""
    match = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", version)
    if not match:
        return (3, 0, 0)
    return (_STABILITY[match[2] or ""], -int(match[1]), -int(match[3] or 0))


def cel_environment(
    variables: Mapping[str, cel.Type],
    cel_version: tuple[int, int],
    pool: descriptor_pool.DescriptorPool = kubernetes_cel.POOL,
    extensions: Sequence[cel.CelExtensionBase] = (),
) -> cel.Env:
    """The one place the sandbox makes an admission expression's CEL environment for a version:
    the base environment of kubernetes_cel with the libraries that version offers (and
    extensions: a mutation's jsonpatch library)."""
    return kubernetes_cel.environment(
        variables, version=cel_version, extensions=extensions, pool=pool
    )
