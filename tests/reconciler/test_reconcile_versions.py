"""The reconciler against the sandbox playing the Kubernetes versions the guard supports: it
reads from discovery which in-server policy kinds are served at which version, installs what the
config calls for there (ValidatingAdmissionPolicies from 1.30, MutatingAdmissionPolicies at v1
from 1.36 and at v1beta1 on 1.34 with the beta turned on and the config saying so), and deletes
them when the config stops calling for them or at uninstall."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from tests.reconciler.test_reconcile import NS, live, put_config
from tests.webhook.test_mutating_policies import BETA, NO_OTHERS, toy, with_policy  # noqa: F401 (fixture)
from volcano_guard.base.api_client import api_client
from volcano_guard.base.kubeconfig import Cluster
from volcano_guard.reconciler.discovery import served_apis
from volcano_guard.reconciler.objects import AdmissionObjects
from volcano_guard.reconciler.reconcile import Reconciler, Settings, uninstall
from volcano_guard.webhook.admission_policies import PREFIX, PolicyApis
from volcano_guard.webhook.config import config_from_dict
from volcano_guard.webhook.manifests import (
    BINDING,
    MUTATING,
    MUTATING_BINDING,
    MUTATING_POLICY,
    NAME,
    OWNED,
    POLICY,
    Owned,
    admission_objects,
)
from volcano_guard_sandbox.apiserver.runner import SandboxThread
from volcano_guard_sandbox.apiserver.versions import KubernetesVersion

MUTATION = Owned(MUTATING_POLICY, "volcano-guard-default-requests")
MUTATION_BINDING = Owned(MUTATING_BINDING, "volcano-guard-default-requests")
SETTINGS = Settings(NS, certificates="external")  # the certificates are test_reconcile.py's
NAMESPACE = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}


def sandbox(version: KubernetesVersion) -> SandboxThread:
    return SandboxThread(kubernetes_version=version)


@contextlib.contextmanager
def reconciled(version: KubernetesVersion) -> Iterator[tuple[Any, AdmissionObjects]]:
    """A client of the sandbox playing version (the guard's namespace made), and the owned
    objects read at the versions it serves."""
    with sandbox(version) as cluster:
        cluster.seed([NAMESPACE])
        client = api_client(Cluster(cluster.url))
        yield client, AdmissionObjects(client, served_apis(client))


@pytest.mark.parametrize(
    ("version", "served"),
    [
        (KubernetesVersion(30), PolicyApis("v1", None)),
        (KubernetesVersion(34), PolicyApis("v1", None)),
        (KubernetesVersion(34, frozenset({BETA})), PolicyApis("v1", "v1beta1")),
        (KubernetesVersion(36), PolicyApis("v1", "v1")),
    ],
    ids=["1.30", "1.34", "1.34 with the beta", "1.36"],
)
def test_discovery_says_which_policy_kinds_are_served_at_which_version(version, served):
    with sandbox(version) as cluster:
        assert served_apis(api_client(Cluster(cluster.url))) == served


@pytest.mark.slow  # 4 s each; test_reconcile.py's first pass runs in the default suite
@pytest.mark.parametrize("minor", [30, 36])
def test_a_first_pass_installs_the_in_server_policies_where_they_are_served(minor):
    with sandbox(KubernetesVersion(minor)) as cluster:
        cluster.seed([NAMESPACE])
        client = api_client(Cluster(cluster.url))
        put_config(client, {})
        assert Reconciler(client, SETTINGS).reconcile_once()
        served = served_apis(client)
        wanted = admission_objects(config_from_dict({}), NS, served=served)
        in_server = [owned for owned in wanted if owned.kind in (POLICY, BINDING)]
        assert in_server  # the shipped config calls for some
        for owned in in_server:
            found = live(client, owned)
            assert found is not None, owned
            assert found["apiVersion"] == "admissionregistration.k8s.io/v1"


ON_1_34 = KubernetesVersion(34, frozenset({BETA}))


@pytest.mark.slow  # about 2 s each; the beta's and the uninstall's tests run in the default suite
@pytest.mark.parametrize(
    ("version", "config", "served"),
    [
        (KubernetesVersion(36), {}, "v1"),
        (ON_1_34, {"mutatingAdmissionPolicyBeta": True}, "v1beta1"),
    ],
    ids=["1.36", "1.34 with the beta"],
)
def test_mutating_policies_are_installed_then_deleted_when_the_config_turns_them_off(
    with_policy,  # noqa: F811
    version,
    config,
    served,
):
    with_policy(toy())
    with reconciled(version) as (client, objects):
        put_config(client, config)
        assert Reconciler(client, SETTINGS).reconcile_once()
        for owned in (MUTATION, MUTATION_BINDING):
            found = objects.get(owned)
            assert found is not None, owned
            assert found["apiVersion"] == f"admissionregistration.k8s.io/{served}"
        put_config(client, {**config, "mutatingAdmissionPolicies": False})
        assert Reconciler(client, SETTINGS).reconcile_once()
        assert objects.get(MUTATION) is None and objects.get(MUTATION_BINDING) is None


def test_on_1_34_the_beta_is_used_only_when_the_config_says_it_is_on(with_policy):  # noqa: F811
    """Served is not enough: the operator says so (mutatingAdmissionPolicyBeta); saying so
    again false deletes what was installed."""
    with_policy(toy())
    with reconciled(ON_1_34) as (client, objects):
        put_config(client, NO_OTHERS)
        assert Reconciler(client, SETTINGS).reconcile_once()
        assert objects.get(MUTATION) is None
        put_config(client, {**NO_OTHERS, "mutatingAdmissionPolicyBeta": True})
        reconciler = Reconciler(client, SETTINGS)
        assert reconciler.reconcile_once()
        assert objects.get(MUTATION) is not None
        put_config(client, {**NO_OTHERS, "mutatingAdmissionPolicyBeta": False})
        assert reconciler.reconcile_once()
        assert objects.get(MUTATION) is None and objects.get(MUTATION_BINDING) is None


def test_the_uninstall_deletes_the_mutating_policies_too(with_policy):  # noqa: F811
    with_policy(toy())
    with reconciled(KubernetesVersion(36)) as (client, objects):
        put_config(client, NO_OTHERS)
        assert Reconciler(client, SETTINGS).reconcile_once()
        assert objects.get(MUTATION) is not None
        uninstall(client, SETTINGS, interval=0.01)
        assert all(objects.get(owned) is None for owned in OWNED)


@pytest.mark.slow  # 3 s: the default suite's uninstall test covers every owned name
def test_the_uninstall_deletes_the_queue_resources_policy_and_its_binding():
    queue_resources = [Owned(kind, PREFIX + "queue-resources") for kind in (POLICY, BINDING)]
    with reconciled(KubernetesVersion(32)) as (client, objects):
        put_config(client, {})  # the queues policy on, as by default
        assert Reconciler(client, SETTINGS).reconcile_once()
        assert all(objects.get(owned) is not None for owned in queue_resources)
        uninstall(client, SETTINGS, interval=0.01)
        assert all(objects.get(owned) is None for owned in OWNED)


def test_a_mutation_leaves_the_registrations_only_once_its_policy_is_written():
    """Turning the mutating policies on (or upgrading to 1.36): the pass writes the policies
    and bindings before the webhook configuration that stops sending their pods, so no pod
    falls between the two."""
    injection = PREFIX + "sidecar-injection"
    with reconciled(KubernetesVersion(36)) as (client, objects):
        put_config(client, {"mutatingAdmissionPolicies": False})
        assert Reconciler(client, SETTINGS).reconcile_once()
        assert objects.get(Owned(MUTATING_POLICY, injection)) is None
        put_config(client, {})
        assert Reconciler(client, SETTINGS).reconcile_once()
        registrations = objects.get(Owned(MUTATING, NAME))
        assert registrations is not None
        assert not [w for w in registrations["webhooks"] if w["name"].startswith("inject.")]
        for kind in (MUTATING_POLICY, MUTATING_BINDING):
            written = objects.get(Owned(kind, injection))
            assert written is not None
            assert int(written["metadata"]["resourceVersion"]) < int(
                registrations["metadata"]["resourceVersion"]
            ), kind
