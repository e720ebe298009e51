"""Which admission webhooks kube-apiserver calls for a request, and what a request meets while
none of them answers: a test-friendly request record over the sandbox's own matching
(volcano_guard_sandbox.apiserver.matching, which follows k8s.io/apiserver's and is pinned by
tests/sandbox/test_sandbox_admission.py), with matchConditions evaluated by CEL's C++ runtime,
and the ValidatingAdmissionPolicies among the manifests run by the sandbox's plugin."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from volcano_guard_sandbox.apiserver import matching, policies
from volcano_guard_sandbox.apiserver.admission import Record
from volcano_guard_sandbox.apiserver.store import ApiError


@dataclass(frozen=True)
class Request:
    """An API request as the admission chain sees it."""

    operation: str
    group: str
    version: str
    resource: str
    kind: str
    namespace: str
    name: str
    object: dict[str, Any] | None = None
    old_object: dict[str, Any] | None = None
    sub_resource: str = ""
    username: str = "alice"
    groups: tuple[str, ...] = ("system:authenticated",)
    options: dict[str, Any] | None = None
    namespace_labels: Mapping[str, str] = field(default_factory=dict)

    def admission_request(self) -> dict[str, Any]:
        """The AdmissionRequest the API server would send."""
        return self.attributes().request(uid="0")

    def attributes(self) -> matching.Attributes:
        kind_group = "" if self.kind == "Binding" else self.group
        # The API server labels every namespace with its name.
        labels = (
            {**self.namespace_labels, "kubernetes.io/metadata.name": self.namespace}
            if self.namespace
            else {}
        )
        return matching.Attributes(
            operation=self.operation,
            group=self.group,
            version=self.version,
            resource=self.resource,
            kind=(kind_group, self.version, self.kind),
            namespace=self.namespace,
            name=self.name,
            user=matching.User(self.username, "", self.groups),
            subresource=self.sub_resource,
            object=self.object,
            old_object=self.old_object,
            options=self.options,
            namespace_labels=labels,
        )


def called(
    configurations: Iterable[Mapping[str, Any]], request: Request
) -> list[Mapping[str, Any]]:
    """The webhooks the request is sent to, in order (ConditionError if a condition fails
    under failurePolicy Fail)."""
    attributes = request.attributes()
    return [
        hook
        for _, hook in matching.configured_webhooks(configurations)
        if matching.should_call(hook, attributes)
    ]


def during_outage(manifests: Iterable[Mapping[str, Any]], request: Request) -> str:
    """What happens to the request while none of these webhooks answers: "admitted", or
    "refused by NAME" for the first refusal in the API server's order: a called mutating
    webhook whose failurePolicy is Fail (the default), a ValidatingAdmissionPolicy that denies
    the request as sent, a called validating webhook that fails closed."""
    manifests = list(manifests)
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        if kind == "ValidatingWebhookConfiguration" and (
            refusal := _policy_refusal(manifests, request)
        ):
            return refusal
        for webhook in called([m for m in manifests if m.get("kind") == kind], request):
            if webhook.get("failurePolicy", "Fail") == "Fail":
                return f"refused by {webhook['name']}"
    return "admitted"


def _policy_refusal(manifests: list[Mapping[str, Any]], request: Request) -> str | None:
    def of_kind(kind: str) -> list[Mapping[str, Any]]:
        return [m for m in manifests if m.get("kind") == kind]

    attributes = request.attributes()
    namespace = {
        "metadata": {"name": request.namespace, "labels": dict(attributes.namespace_labels)}
    }
    try:
        policies.dispatch(
            attributes,
            of_kind("ValidatingAdmissionPolicy"),
            of_kind("ValidatingAdmissionPolicyBinding"),
            _no_config_maps,
            namespace if request.namespace else None,
            Record(),
        )
    except ApiError as refusal:
        return "refused by " + refusal.message.split("'")[1]  # ...AdmissionPolicy 'NAME'...
    return None


def _no_config_maps(api_version: str, kind: str) -> policies.ParamSource | None:
    """Params as in a cluster where the guard has published none yet: ConfigMaps, but none."""
    if (api_version, kind) != ("v1", "ConfigMap"):
        return None
    return policies.ParamSource(True, lambda namespace: [])
