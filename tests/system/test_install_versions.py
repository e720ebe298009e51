"""The guard installed as docs/install.md says (`kubectl apply -k deploy/base`) into the sandbox
playing the oldest and the newest Kubernetes release the guard supports, its reconciler run as
its Deployment says: the reconciler installs the in-server policies and their bindings of each
kind the version serves (ValidatingAdmissionPolicies from 1.30, MutatingAdmissionPolicies at
v1 from 1.36), and no other."""

from __future__ import annotations

import shutil

import pytest

from tests.conftest import REPO
from volcano_guard.webhook.admission_policies import apis_at
from volcano_guard.webhook.config import config_from_dict
from volcano_guard.webhook.manifests import (
    BINDING,
    MUTATING_BINDING,
    MUTATING_POLICY,
    POLICY,
    admission_objects,
)
from volcano_guard_sandbox.apiserver.versions import KubernetesVersion
from volcano_guard_sandbox.installed import NAMESPACE, RECONCILER, installed_sandbox, wait_until

NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-1"}}


@pytest.mark.slow  # the reconciler as a process: about 5 s each
@pytest.mark.parametrize("minor", [30, 36])
def test_the_installed_reconciler_makes_the_in_server_policies_at_the_version(tmp_path, minor):
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed (.ci/run installs it)")
    played = KubernetesVersion(minor)
    served = apis_at((1, minor))
    wanted = admission_objects(config_from_dict({}), NAMESPACE, served=served)
    in_server = sorted(o.name for o in wanted if o.kind in (POLICY, BINDING))
    mutating = sorted(o.name for o in wanted if o.kind in (MUTATING_POLICY, MUTATING_BINDING))
    with installed_sandbox(
        tmp_path / "cluster", REPO / "deploy" / "base", [NODE], kubernetes_version=played
    ) as cluster:
        assert f"v1.{minor}.0" in cluster.kubectl("version").stdout
        reconciler = cluster.start(RECONCILER)

        def listed(kinds: str) -> list[str]:
            found = cluster.get(
                kinds, "-l", "app.kubernetes.io/managed-by=volcano-guard-reconciler"
            )
            return sorted(item["metadata"]["name"] for item in found["items"])

        def installed() -> tuple[list[str], list[str]]:
            validating = listed("validatingadmissionpolicies,validatingadmissionpolicybindings")
            if not served.mutating:  # the kinds 1.30 does not serve, kubectl cannot list there
                return validating, []
            return validating, listed("mutatingadmissionpolicies,mutatingadmissionpolicybindings")

        # The reconciler writes one object at a time, so wait for every kind, not the first.
        took = wait_until(
            lambda: installed() == (in_server, mutating), "the in-server policies", pod=reconciler
        )
        print(f"1.{minor}: {len(in_server) + len(mutating)} policies and bindings in {took:.1f}s")
