"""bench.sandbox_admission registers whatever `volcano-guard manifests` prints: each printed
object goes to its own collection, by apiVersion, kind and namespace, so MutatingAdmission-
Policies (v1 at 1.36, v1beta1 at 1.34) need no change to the bench when manifests prints them."""

from __future__ import annotations

import pytest

from bench.sandbox_admission import collection

GROUP = "admissionregistration.k8s.io"


@pytest.mark.parametrize(
    ("api_version", "kind", "namespace", "path"),
    [
        (
            f"{GROUP}/v1",
            "ValidatingAdmissionPolicy",
            None,
            f"/apis/{GROUP}/v1/validatingadmissionpolicies",
        ),
        (
            f"{GROUP}/v1",
            "MutatingWebhookConfiguration",
            None,
            f"/apis/{GROUP}/v1/mutatingwebhookconfigurations",
        ),
        (
            f"{GROUP}/v1beta1",
            "MutatingAdmissionPolicyBinding",
            None,
            f"/apis/{GROUP}/v1beta1/mutatingadmissionpolicybindings",
        ),
        ("v1", "ConfigMap", "volcano-guard", "/api/v1/namespaces/volcano-guard/configmaps"),
    ],
)
def test_each_printed_object_goes_to_its_kinds_collection(api_version, kind, namespace, path):
    metadata = {"name": "x", **({"namespace": namespace} if namespace else {})}
    assert collection({"apiVersion": api_version, "kind": kind, "metadata": metadata}) == path
