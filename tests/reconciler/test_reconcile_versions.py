"""The reconciler against the sandbox playing the Kubernetes versions the guard supports: where
discovery serves ValidatingAdmissionPolicies (every version from 1.30), a first pass installs
the in-server policies and their bindings beside the registrations."""

from __future__ import annotations

import pytest

from tests.reconciler.test_reconcile import NS, live, put_config
from volcano_guard.base.api_client import api_client
from volcano_guard.base.kubeconfig import Cluster
from volcano_guard.reconciler.discovery import policies_served
from volcano_guard.reconciler.reconcile import Reconciler, Settings
from volcano_guard.webhook.config import config_from_dict
from volcano_guard.webhook.manifests import BINDING, POLICY, admission_objects
from volcano_guard_sandbox.apiserver.runner import SandboxThread
from volcano_guard_sandbox.apiserver.versions import KubernetesVersion


@pytest.mark.slow  # 4 s each; test_reconcile.py's first pass runs in the default suite
@pytest.mark.parametrize("minor", [30, 36])
def test_a_first_pass_installs_the_in_server_policies_where_they_are_served(minor):
    with SandboxThread(kubernetes_version=KubernetesVersion(minor)) as cluster:
        cluster.seed([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}])
        client = api_client(Cluster(cluster.url))
        assert policies_served(client)
        put_config(client, {})
        assert Reconciler(client, Settings(NS)).reconcile_once()
        wanted = admission_objects(config_from_dict({}), NS, policies_served=True)
        in_server = [owned for owned in wanted if owned.kind in (POLICY, BINDING)]
        assert in_server  # the shipped config calls for some
        for owned in in_server:
            found = live(client, owned)
            assert found is not None, owned
            assert found["apiVersion"] == "admissionregistration.k8s.io/v1"
