"""Objects of a real Volcano installation, transcribed from volcano-sh/volcano (commit in
tests/upstream.py); tests/webhook/test_registrations.py checks them against that source.

- CONTROL_PLANE: the pods of Volcano's installer (installer/volcano-development.yaml, rendered
  from installer/helm/chart/volcano/templates/{admission,admission-init,controllers,
  scheduler}.yaml): workload, namespace, pod template labels, service account. None sets
  schedulerName or nodeName, so the API server defaults them to default-scheduler and "".
- POD_WEBHOOKS: Volcano's own pod webhooks (templates/webhooks.yaml, `mutatepod.volcano.sh` and
  `validatepod.volcano.sh`) for the release `volcano` in `volcano-system`. They exist only when
  `custom.enabled_admissions` names /pods/mutate and /pods/validate: Volcano's e2e setup
  (hack/run-e2e-kind.sh) does, the installer's default values.yaml does not.
"""

from __future__ import annotations

from typing import Any

VOLCANO_NAMESPACE = "volcano-system"

# (workload kind, workload name, pod template labels, service account)
CONTROL_PLANE: tuple[tuple[str, str, dict[str, str], str], ...] = (
    ("Deployment", "volcano-admission", {"app": "volcano-admission"}, "volcano-admission"),
    ("Job", "volcano-admission-init", {}, "volcano-admission-init"),
    ("Deployment", "volcano-controllers", {"app": "volcano-controller"}, "volcano-controllers"),
    ("Deployment", "volcano-scheduler", {"app": "volcano-scheduler"}, "volcano-scheduler"),
)


def control_plane_pod(
    kind: str, name: str, labels: dict[str, str], service_account: str
) -> dict[str, Any]:
    """The pod its workload's controller creates, after the API server's defaulting."""
    owner = "ReplicaSet" if kind == "Deployment" else kind
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"{name}-",
            "namespace": VOLCANO_NAMESPACE,
            "labels": dict(labels),
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1" if owner == "ReplicaSet" else "batch/v1",
                    "kind": owner,
                    "name": name,
                    "uid": f"{name}-uid",
                    "controller": True,
                }
            ],
        },
        "spec": {
            "serviceAccountName": service_account,
            "schedulerName": "default-scheduler",
            "priorityClassName": "system-cluster-critical",
            "containers": [{"name": "main", "image": "volcanosh/x:latest"}],
        },
    }


def _pod_webhook(kind: str, name: str, path: str) -> dict[str, Any]:
    webhook: dict[str, Any] = {
        "admissionReviewVersions": ["v1"],
        "clientConfig": {
            "service": {
                "name": "volcano-admission-service",
                "namespace": VOLCANO_NAMESPACE,
                "path": path,
                "port": 443,
            }
        },
        "failurePolicy": "Fail",
        "matchPolicy": "Equivalent",
        "name": name,
        "namespaceSelector": {
            "matchExpressions": [
                {
                    "key": "kubernetes.io/metadata.name",
                    "operator": "NotIn",
                    "values": [VOLCANO_NAMESPACE, "kube-system"],
                }
            ]
        },
        "objectSelector": {},
        "rules": [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["CREATE"],
                "resources": ["pods"],
                "scope": "*",
            }
        ],
        "sideEffects": "NoneOnDryRun",
        "timeoutSeconds": 10,
    }
    if kind == "MutatingWebhookConfiguration":
        webhook["reinvocationPolicy"] = "Never"
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": f"volcano-admission-service-{path.strip('/').replace('/', '-')}"},
        "webhooks": [webhook],
    }


POD_WEBHOOKS = (
    _pod_webhook("MutatingWebhookConfiguration", "mutatepod.volcano.sh", "/pods/mutate"),
    _pod_webhook("ValidatingWebhookConfiguration", "validatepod.volcano.sh", "/pods/validate"),
)
# Volcano's two configurations, by which pod webhooks each registers.
VOLCANO_CONFIGURATIONS = {"installer defaults": (), "e2e setup": POD_WEBHOOKS}
