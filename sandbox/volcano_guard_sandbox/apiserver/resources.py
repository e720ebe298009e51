"""The resource types the sandbox serves, as discovery describes them."""

from __future__ import annotations

from dataclasses import dataclass

from volcano_guard.base.apipaths import group_version_path

CORE, SCHEDULING, BATCH = "", "scheduling.volcano.sh", "batch.volcano.sh"
FLOW = "flow.volcano.sh"
ADMISSION = "admissionregistration.k8s.io"
COORDINATION, POLICY_REPORTS = "coordination.k8s.io", "wgpolicyk8s.io"
APPS = "apps"
K8S_BATCH, POLICY, RBAC = "batch", "policy", "rbac.authorization.k8s.io"
APIEXTENSIONS, NETWORKING = "apiextensions.k8s.io", "networking.k8s.io"
MONITORING = "monitoring.coreos.com"  # the Prometheus Operator's kinds, as if its CRDs were in
_ROLE_BINDING_FIELDS = ("subjects", "roleRef")
_REPORT_FIELDS = ("scope", "scopeSelector", "summary", "results")


@dataclass(frozen=True)
class ResourceType:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    status_subresource: bool = False
    binding_subresource: bool = False
    # Built-in kinds accept strategic merge patch; custom resources answer 415, as the
    # apiserver does.
    strategic_merge: bool = False
    create_only: bool = False  # bindings: a verb, not stored objects
    # The object's top-level fields besides apiVersion, kind and metadata (fieldValidation).
    fields: tuple[str, ...] = ("spec", "status")
    # The Kubernetes minors (1.x) whose API server serves this group version of the kind:
    # from served_from, until removed_in (0: not removed); an alpha or beta one off by default
    # only when --runtime-config turns its group version on (versions.py: what changes).
    served_from: int = 0
    removed_in: int = 0
    off_by_default: bool = False

    @property
    def verbs(self) -> tuple[str, ...]:
        if self.create_only:
            return ("create",)
        return ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    def prefix(self) -> str:
        return group_version_path(self.group, self.version)


def _prerelease(
    version: str, plural: str, kind: str, introduced: int, removed: int
) -> ResourceType:
    """An alpha or beta admission kind: served only where --runtime-config turns it on."""
    return ResourceType(
        ADMISSION,
        version,
        plural,
        kind,
        False,
        strategic_merge=True,
        fields=("spec", "status") if kind == "ValidatingAdmissionPolicy" else ("spec",),
        status_subresource=kind == "ValidatingAdmissionPolicy",
        served_from=introduced,
        removed_in=removed,
        off_by_default=True,
    )


# k8s.io/api admissionregistration: each kind's `introduced` tag, and the release
# zz_generated.prerelease-lifecycle.go's APILifecycleRemoved says it is no longer served in.
PRERELEASE: tuple[ResourceType, ...] = tuple(
    _prerelease(version, plural, kind, introduced, removed)
    for version, policy, introduced, removed in (
        ("v1alpha1", "ValidatingAdmissionPolicy", 26, 32),
        ("v1beta1", "ValidatingAdmissionPolicy", 28, 34),
        ("v1alpha1", "MutatingAdmissionPolicy", 32, 38),
        ("v1beta1", "MutatingAdmissionPolicy", 34, 40),
    )
    for plural, kind in (
        (f"{policy.lower()[:-1]}ies", policy),
        (f"{policy.lower()}bindings", f"{policy}Binding"),
    )
)


RESOURCES: tuple[ResourceType, ...] = (
    ResourceType(
        CORE,
        "v1",
        "namespaces",
        "Namespace",
        False,
        ("ns",),
        status_subresource=True,
        strategic_merge=True,
    ),
    ResourceType(
        CORE, "v1", "nodes", "Node", False, ("no",), status_subresource=True, strategic_merge=True
    ),
    ResourceType(
        CORE,
        "v1",
        "pods",
        "Pod",
        True,
        ("po",),
        status_subresource=True,
        binding_subresource=True,
        strategic_merge=True,
    ),
    ResourceType(CORE, "v1", "bindings", "Binding", True, create_only=True),
    ResourceType(
        CORE,
        "v1",
        "secrets",
        "Secret",
        True,
        strategic_merge=True,
        fields=("data", "stringData", "type", "immutable"),
    ),
    # The audit reads DaemonSets: they vouch for the pods that name them as their controller.
    ResourceType(
        APPS,
        "v1",
        "daemonsets",
        "DaemonSet",
        True,
        ("ds",),
        status_subresource=True,
        strategic_merge=True,
    ),
    # The owners whose pods Volcano's PodGroup controller groups (podgroup-<owner uid>).
    ResourceType(
        APPS,
        "v1",
        "statefulsets",
        "StatefulSet",
        True,
        ("sts",),
        status_subresource=True,
        strategic_merge=True,
    ),
    ResourceType(
        APPS,
        "v1",
        "replicasets",
        "ReplicaSet",
        True,
        ("rs",),
        status_subresource=True,
        strategic_merge=True,
    ),
    ResourceType(
        ADMISSION,
        "v1",
        "mutatingwebhookconfigurations",
        "MutatingWebhookConfiguration",
        False,
        strategic_merge=True,
        fields=("webhooks",),
    ),
    ResourceType(
        ADMISSION,
        "v1",
        "validatingwebhookconfigurations",
        "ValidatingWebhookConfiguration",
        False,
        strategic_merge=True,
        fields=("webhooks",),
    ),
    ResourceType(
        ADMISSION,
        "v1",
        "validatingadmissionpolicies",
        "ValidatingAdmissionPolicy",
        False,
        status_subresource=True,
        strategic_merge=True,
        served_from=30,
    ),
    ResourceType(
        ADMISSION,
        "v1",
        "validatingadmissionpolicybindings",
        "ValidatingAdmissionPolicyBinding",
        False,
        strategic_merge=True,
        fields=("spec",),
        served_from=30,
    ),
    # Mutating admission policies: stored and served where the version plays them (v1 from
    # 1.36; v1alpha1 and v1beta1 before it are off by default), and run on writes
    # (mutating_admission).
    ResourceType(
        ADMISSION,
        "v1",
        "mutatingadmissionpolicies",
        "MutatingAdmissionPolicy",
        False,
        strategic_merge=True,
        fields=("spec",),
        served_from=36,
    ),
    ResourceType(
        ADMISSION,
        "v1",
        "mutatingadmissionpolicybindings",
        "MutatingAdmissionPolicyBinding",
        False,
        strategic_merge=True,
        fields=("spec",),
        served_from=36,
    ),
    # The reconciler records a refused config and repaired drift as Events on its ConfigMap.
    ResourceType(
        CORE,
        "v1",
        "events",
        "Event",
        True,
        ("ev",),
        fields=(
            "involvedObject",
            "reason",
            "message",
            "type",
            "source",
            "firstTimestamp",
            "lastTimestamp",
            "count",
            "action",
            "eventTime",
            "related",
            "reportingComponent",
            "reportingInstance",
            "series",
        ),
    ),
    # Params of admission policies (paramKind v1 ConfigMap).
    ResourceType(
        CORE,
        "v1",
        "configmaps",
        "ConfigMap",
        True,
        ("cm",),
        strategic_merge=True,
        fields=("data", "binaryData", "immutable"),
    ),
    # What `kubectl apply -k` of deploy/base, deploy/audit, deploy/monitoring and the
    # network-policy component sends (docs/install.md is rehearsed against the sandbox).
    ResourceType(
        CORE,
        "v1",
        "serviceaccounts",
        "ServiceAccount",
        True,
        ("sa",),
        strategic_merge=True,
        fields=("secrets", "imagePullSecrets", "automountServiceAccountToken"),
    ),
    ResourceType(
        CORE,
        "v1",
        "services",
        "Service",
        True,
        ("svc",),
        status_subresource=True,
        strategic_merge=True,
    ),
    ResourceType(
        APPS,
        "v1",
        "deployments",
        "Deployment",
        True,
        ("deploy",),
        status_subresource=True,
        strategic_merge=True,
    ),
    ResourceType(
        K8S_BATCH, "v1", "jobs", "Job", True, status_subresource=True, strategic_merge=True
    ),
    ResourceType(
        K8S_BATCH,
        "v1",
        "cronjobs",
        "CronJob",
        True,
        ("cj",),
        status_subresource=True,
        strategic_merge=True,
    ),
    ResourceType(
        POLICY,
        "v1",
        "poddisruptionbudgets",
        "PodDisruptionBudget",
        True,
        ("pdb",),
        status_subresource=True,
        strategic_merge=True,
    ),
    ResourceType(
        RBAC,
        "v1",
        "clusterroles",
        "ClusterRole",
        False,
        strategic_merge=True,
        fields=("rules", "aggregationRule"),
    ),
    ResourceType(
        RBAC,
        "v1",
        "clusterrolebindings",
        "ClusterRoleBinding",
        False,
        strategic_merge=True,
        fields=_ROLE_BINDING_FIELDS,
    ),
    ResourceType(RBAC, "v1", "roles", "Role", True, strategic_merge=True, fields=("rules",)),
    ResourceType(
        RBAC,
        "v1",
        "rolebindings",
        "RoleBinding",
        True,
        strategic_merge=True,
        fields=_ROLE_BINDING_FIELDS,
    ),
    ResourceType(
        APIEXTENSIONS,
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        False,
        ("crd", "crds"),
        status_subresource=True,
        strategic_merge=True,
    ),
    ResourceType(
        NETWORKING,
        "v1",
        "networkpolicies",
        "NetworkPolicy",
        True,
        ("netpol",),
        strategic_merge=True,
    ),
    ResourceType(MONITORING, "v1", "servicemonitors", "ServiceMonitor", True, ("smon",)),
    ResourceType(MONITORING, "v1", "podmonitors", "PodMonitor", True, ("pmon",)),
    ResourceType(MONITORING, "v1", "prometheusrules", "PrometheusRule", True, ("promrule",)),
    ResourceType(
        SCHEDULING,
        "v1beta1",
        "queues",
        "Queue",
        False,
        ("q", "queue-v1beta1"),
        status_subresource=True,
    ),
    # Volcano's PodGroup CRD has no status subresource: status is written with the object.
    ResourceType(SCHEDULING, "v1beta1", "podgroups", "PodGroup", True, ("pg", "podgroup-v1beta1")),
    ResourceType(BATCH, "v1alpha1", "jobs", "Job", True, ("vcjob", "vj"), status_subresource=True),
    # The Volcano kinds whose controllers make Jobs from the Job spec they carry.
    ResourceType(
        BATCH,
        "v1alpha1",
        "cronjobs",
        "CronJob",
        True,
        ("cronvcjob", "cronvj"),
        status_subresource=True,
    ),
    ResourceType(
        FLOW, "v1alpha1", "jobtemplates", "JobTemplate", True, ("jt",), status_subresource=True
    ),
    # The audit's leader election and its reports (the PolicyReport format of the Kubernetes
    # policy working group, which Kyverno and Policy Reporter read).
    ResourceType(COORDINATION, "v1", "leases", "Lease", True),
    ResourceType(
        POLICY_REPORTS,
        "v1alpha2",
        "policyreports",
        "PolicyReport",
        True,
        ("polr",),
        fields=_REPORT_FIELDS,
    ),
    ResourceType(
        POLICY_REPORTS,
        "v1alpha2",
        "clusterpolicyreports",
        "ClusterPolicyReport",
        False,
        ("cpolr",),
        fields=_REPORT_FIELDS,
    ),
    # Last: a search by plural alone finds the kind served by default first.
    *PRERELEASE,
)


def group_versions(
    resources: tuple[ResourceType, ...] = RESOURCES,
) -> dict[tuple[str, str], list[ResourceType]]:
    """(group, version) -> its resource types, in a stable order."""
    out: dict[tuple[str, str], list[ResourceType]] = {}
    for resource in resources:
        out.setdefault((resource.group, resource.version), []).append(resource)
    return out


def find(
    group: str, version: str, plural: str, resources: tuple[ResourceType, ...] = RESOURCES
) -> ResourceType | None:
    for resource in resources:
        if (resource.group, resource.version, resource.plural) == (group, version, plural):
            return resource
    return None


def served(group: str, version: str, plural: str) -> ResourceType:
    """A resource type the sandbox is known to serve (a KeyError names one it does not)."""
    resource = find(group, version, plural)
    if resource is None:
        raise KeyError(f"the sandbox does not serve {plural} ({group or 'core'}/{version})")
    return resource
