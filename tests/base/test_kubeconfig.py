"""Reading a kubeconfig: the cluster, its CA and the user's bearer token."""

import os

import yaml

from volcano_guard.base.kubeconfig import context_namespace, kubernetes_configuration, resolve

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://localhost:6443/", certificate-authority: CA}}]
users: [{name: u, user: {token: "s3cret"}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
"""


def test_a_kubeconfig_users_static_token_is_sent(tmp_path):
    (tmp_path / "ca.crt").write_text("")
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG.replace("CA", str(tmp_path / "ca.crt")))
    cluster = resolve(kubeconfig=str(path))
    assert (cluster.url, cluster.token) == ("https://localhost:6443", "s3cret")
    settings = kubernetes_configuration(cluster).auth_settings()
    assert settings["BearerToken"]["value"] == "Bearer s3cret"


def test_the_context_namespace_is_read_as_kubectl_reads_it(tmp_path, monkeypatch):
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump({
        "current-context": "work",
        "contexts": [{"name": "home", "context": {"cluster": "c", "namespace": "mine"}},
                     {"name": "work", "context": {"cluster": "c", "namespace": "ops"}}]}))
    assert context_namespace(str(path)) == "ops"
    monkeypatch.setenv("KUBECONFIG", f"{path}{os.pathsep}{tmp_path / 'other'}")
    assert context_namespace() == "ops"  # the first file of $KUBECONFIG
    path.write_text(yaml.safe_dump({"current-context": "home", "contexts": [
        {"name": "home", "context": {"cluster": "c"}}]}))
    assert context_namespace(str(path)) is None  # none named: the caller's default
    assert context_namespace(str(tmp_path / "missing")) is None
