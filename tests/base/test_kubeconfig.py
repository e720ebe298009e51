"""Reading a kubeconfig as kubectl does: which files, how they merge, which context; the
cluster, its CA, the user's bearer token and the context's namespace. kubectl itself is the
reference: `kubectl config view --minify --raw` over the same files must agree."""

import base64
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from volcano_guard.base.kubeconfig import (
    KubeconfigError,
    kubernetes_configuration,
    load_kubeconfig,
    resolve,
)

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://localhost:6443/", certificate-authority: CA}}]
users: [{name: u, user: {token: "s3cret"}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
"""


@pytest.fixture
def no_cluster_around(monkeypatch, tmp_path):
    """No $KUBECONFIG, an empty home and no in-cluster service: what a fresh shell has."""
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    return tmp_path / "home"


def test_a_kubeconfig_users_static_token_is_sent(tmp_path):
    (tmp_path / "ca.crt").write_text("")
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG.replace("CA", str(tmp_path / "ca.crt")))
    cluster = resolve(kubeconfig=str(path))
    assert (cluster.url, cluster.token) == ("https://localhost:6443", "s3cret")
    settings = kubernetes_configuration(cluster).auth_settings()
    assert settings["BearerToken"]["value"] == "Bearer s3cret"


def test_home_kube_config_is_read_when_kubeconfig_is_unset(no_cluster_around):
    (no_cluster_around / ".kube").mkdir()
    (no_cluster_around / ".kube" / "config").write_text(KUBECONFIG.replace("CA", "ca.crt"))
    (no_cluster_around / ".kube" / "ca.crt").write_text("")
    cluster = resolve()
    assert cluster.url == "https://localhost:6443"
    assert cluster.ca_file == str(no_cluster_around / ".kube" / "ca.crt")  # beside its file
    assert cluster.default_namespace() == "default"


def test_with_no_kubeconfig_anywhere_the_error_says_where_it_looked(no_cluster_around, monkeypatch):
    with pytest.raises(KubeconfigError) as error:
        resolve()
    assert str(no_cluster_around / ".kube" / "config") in str(error.value)
    assert "--kubeconfig" in str(error.value) and "--upstream" not in str(error.value)
    monkeypatch.setenv("KUBECONFIG", "/nonexistent/a:/nonexistent/b")
    with pytest.raises(KubeconfigError, match=r"no file of \$KUBECONFIG"):
        resolve()


def test_a_missing_kubeconfig_flag_file_is_an_error_not_a_fallback(no_cluster_around):
    with pytest.raises(KubeconfigError, match="--kubeconfig /nonexistent: no such file"):
        resolve(kubeconfig="/nonexistent")


def test_malformed_yaml_names_the_file_and_line(tmp_path):
    path = tmp_path / "config"
    path.write_text("apiVersion: v1\nclusters:\n  - name: [unclosed\n")
    with pytest.raises(KubeconfigError) as error:
        resolve(kubeconfig=str(path))
    message = str(error.value)
    assert message.startswith(f"kubeconfig {path} line ") and "\n" not in message


def test_a_file_that_is_not_a_kubeconfig_says_so(tmp_path):
    path = tmp_path / "config"
    path.write_text("- just\n- a list\n")
    with pytest.raises(KubeconfigError, match="not a kubeconfig"):
        resolve(kubeconfig=str(path))
    path.write_text("clusters: {a: b}\n")
    with pytest.raises(KubeconfigError, match="clusters must be a list"):
        resolve(kubeconfig=str(path))


def test_an_unknown_context_lists_the_ones_there_are(tmp_path):
    path = tmp_path / "config"
    path.write_text(KUBECONFIG.replace("CA", "ca.crt"))
    with pytest.raises(KubeconfigError, match=r"no context 'prod' \(contexts: c\)"):
        resolve(kubeconfig=str(path), context="prod")


# kubectl as the reference. Each example writes up to three files for $KUBECONFIG (one may be
# missing, one empty), naming overlapping clusters, users and contexts, and asks both kubectl
# and resolve() which server, CA file, token and namespace they use.

NAMES = st.sampled_from(["a", "b"])


@st.composite
def kubeconfig_files(draw):
    files = []
    for index in range(draw(st.integers(1, 3))):
        shape = draw(st.sampled_from(["full", "full", "full", "full", "empty", "missing"]))
        if shape != "full":
            files.append(shape)
            continue
        clusters = [
            {
                "name": name,
                "cluster": {
                    "server": f"https://cluster-{name}-{index}.example:6443",
                    "certificate-authority": f"ca-{name}-{index}.crt",
                },
            }
            for name in draw(st.sets(NAMES))
        ]
        users = [
            {"name": name, "user": {"token": f"token-{name}-{index}"}}
            for name in draw(st.sets(NAMES))
        ]
        contexts = []
        for name in draw(st.sets(NAMES)):
            context = {"cluster": draw(NAMES), "user": draw(NAMES)}
            if draw(st.booleans()):
                context["namespace"] = f"ns-{name}-{index}"
            contexts.append({"name": name, "context": context})
        document = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": clusters,
            "users": users,
            "contexts": contexts,
        }
        if draw(st.booleans()):
            document["current-context"] = draw(NAMES)
        files.append(document)
    return files, draw(st.one_of(st.none(), NAMES))


def _config(index, current):
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": current,
        "clusters": [
            {
                "name": "a",
                "cluster": {
                    "server": f"https://cluster-a-{index}.example:6443",
                    "certificate-authority": f"ca-a-{index}.crt",
                },
            }
        ],
        "users": [{"name": "a", "user": {"token": f"token-a-{index}"}}],
        "contexts": [
            {
                "name": name,
                "context": {"cluster": "a", "user": "a", "namespace": f"ns-{name}-{index}"},
            }
            for name in ("a", "b")
        ],
    }


FIRST_WINS = [_config(0, "a"), _config(1, "b")]


def kubectl_view(env, context):
    # --flatten reads each file a path names (resolved as kubectl resolves it) into *-data.
    command = ["kubectl", "config", "view", "--minify", "--flatten", "-o", "json"]
    result = subprocess.run(
        command + ([f"--context={context}"] if context else []),
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )
    # A context whose user no file names: kubectl would prompt for a password (we send none).
    assume("cannot locate user" not in result.stderr)
    if result.returncode != 0:
        return None
    view = json.loads(result.stdout)
    [cluster], [user], [entry] = view["clusters"], view["users"], view["contexts"]
    ca = base64.b64decode(cluster["cluster"]["certificate-authority-data"]).decode()
    return (
        cluster["cluster"]["server"],
        ca,
        user["user"].get("token"),
        entry["context"].get("namespace") or "default",
    )


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(setup=kubeconfig_files())
@example(setup=(FIRST_WINS, None))  # two current-contexts; a cluster and a context named twice
@example(setup=([*FIRST_WINS[::-1]], None))
@example(setup=(["missing", "empty", FIRST_WINS[1]], "a"))
def test_files_merge_and_a_context_is_chosen_as_kubectl_does(setup, tmp_path_factory, monkeypatch):
    files, context = setup
    directory = tmp_path_factory.mktemp("kubeconfigs")
    paths = []
    for index, document in enumerate(files):
        path = directory / f"config-{index}"
        paths.append(str(path))
        if document == "empty":
            path.write_text("")
        elif document != "missing":
            path.write_text(yaml.safe_dump(document))
            for cluster in document["clusters"]:
                ca = cluster["cluster"]["certificate-authority"]
                (directory / ca).write_text(ca)  # its content says which file was read
    env = {"PATH": os.environ["PATH"], "HOME": str(directory), "KUBECONFIG": os.pathsep.join(paths)}
    monkeypatch.setenv("KUBECONFIG", env["KUBECONFIG"])
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    expected = kubectl_view(env, context)
    if expected is None:
        with pytest.raises(KubeconfigError):
            resolve(context=context)
        return
    cluster = resolve(context=context)
    assert (
        cluster.url,
        Path(cluster.ca_file).read_text(),
        cluster.token,
        cluster.default_namespace(),
    ) == (expected[0].rstrip("/"), *expected[1:])


def test_merged_files_list_only_those_that_exist(tmp_path, monkeypatch):
    first, second = tmp_path / "first", tmp_path / "second"
    first.write_text(KUBECONFIG.replace("CA", "ca.crt"))
    monkeypatch.setenv(
        "KUBECONFIG", os.pathsep.join([str(tmp_path / "gone"), str(first), str(second), str(first)])
    )
    loaded = load_kubeconfig()
    assert loaded is not None and loaded.files == (str(first),)


def test_missing_client_certificate_files_are_named_as_kubectl_refuses_them(tmp_path):
    path = tmp_path / "config"
    path.write_text(
        KUBECONFIG.replace(", certificate-authority: CA", "").replace(
            '{token: "s3cret"}', "{client-certificate: gone.crt, client-key: gone.key}"
        )
    )
    with pytest.raises(KubeconfigError) as error:
        resolve(kubeconfig=str(path))
    assert str(tmp_path / "gone.crt") in str(error.value)


def test_an_exec_plugin_that_fails_is_one_error_naming_it(tmp_path, caplog):
    path = tmp_path / "config"
    path.write_text(
        KUBECONFIG.replace(", certificate-authority: CA", "").replace(
            '{token: "s3cret"}',
            "{exec: {apiVersion: client.authentication.k8s.io/v1beta1, command: /bin/false}}",
        )
    )
    with pytest.raises(KubeconfigError, match="the exec plugin '/bin/false' gave no credentials"):
        resolve(kubeconfig=str(path))
    assert not caplog.records
