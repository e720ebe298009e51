"""Reading a kubeconfig: the cluster, its CA and the user's bearer token."""

from volcano_guard.base.kubeconfig import kubernetes_configuration, resolve

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
