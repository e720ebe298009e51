"""A sandbox holding the guard's webhook configurations (without a caBundle) and its
namespace, and a kubeconfig for it, as the certificate commands meet a cluster."""

import pytest
from kubernetes import client

from tests.conftest import NAMESPACE, SERVICE
from volcano_guard.base.kubeconfig import write_kubeconfig
from volcano_guard_sandbox.apiserver.runner import SandboxThread


def webhook_configuration(kind, name, hooks):
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": hook,
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "clientConfig": {
                    "service": {"name": SERVICE, "namespace": NAMESPACE, "path": "/validate"}
                },
            }
            for hook in hooks
        ],
    }


@pytest.fixture
def cluster(tmp_path):
    with SandboxThread() as sandbox:
        sandbox.seed(
            [
                webhook_configuration(
                    "MutatingWebhookConfiguration", "volcano-guard", ["mutate.volcano-guard.io"]
                ),
                webhook_configuration(
                    "ValidatingWebhookConfiguration",
                    "volcano-guard",
                    ["validate.volcano-guard.io", "bindings.volcano-guard.io"],
                ),
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
            ]
        )
        kubeconfig = tmp_path / "kubeconfig"
        write_kubeconfig(str(kubeconfig), sandbox.url)
        yield sandbox, str(kubeconfig), client.ApiClient(client.Configuration(host=sandbox.url))
