"""How volcano-guard reaches an API server: an explicit URL, a kubeconfig, or in-cluster.

The one place kubeconfig and service-account files are read. Tokens come from a TokenSource that
re-reads its file when it changes, because projected service-account tokens rotate.
"""

from __future__ import annotations

import json
import os
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from volcano_guard.base.tls import client_context

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class KubeconfigError(ValueError):
    """No usable way to reach the API server; the message says what is missing."""


@dataclass(frozen=True)
class Cluster:
    url: str
    token_file: str | None = None
    token: str | None = None  # a static token from a kubeconfig
    ca_file: str | None = None
    client_cert: str | None = None
    client_key: str | None = None
    verify: bool = True

    def ssl_context(self) -> ssl.SSLContext | bool:
        """For aiohttp's `ssl=`: True (the default; unused) for plain http, False to skip
        verification, else a verifying context."""
        if not self.url.startswith("https://"):
            return True
        if not self.verify:
            return False
        context = client_context(self.ca_file) if self.ca_file else ssl.create_default_context()
        if self.client_cert and self.client_key:
            context.load_cert_chain(self.client_cert, self.client_key)
        return context


def resolve(url: str | None = None, token_file: str | None = None, ca_file: str | None = None,
            kubeconfig: str | None = None) -> Cluster:
    """--upstream/--token-file/--ca-file, else --kubeconfig, else the in-cluster config."""
    if url:
        if not url.startswith(("http://", "https://")):
            raise KubeconfigError(f"upstream {url!r} must start with http:// or https://")
        return Cluster(url.rstrip("/"), token_file=token_file, ca_file=ca_file)
    if kubeconfig:
        return _from_kubeconfig(kubeconfig)
    return _in_cluster()


def _from_kubeconfig(path: str) -> Cluster:
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    configuration = client.Configuration()
    try:
        config.load_kube_config(config_file=path, client_configuration=configuration,
                                persist_config=False)
    except (ConfigException, OSError, TypeError, ValueError) as exc:
        raise KubeconfigError(f"kubeconfig {path}: {exc}") from None
    # Recent kubernetes packages key the token "BearerToken", older ones "authorization".
    authorization = (configuration.api_key.get("BearerToken")
                     or configuration.api_key.get("authorization") or "")
    token = authorization.removeprefix("Bearer ").strip() or None
    return Cluster(configuration.host.rstrip("/"), token=token,
                   ca_file=configuration.ssl_ca_cert, client_cert=configuration.cert_file,
                   client_key=configuration.key_file, verify=configuration.verify_ssl)


def _in_cluster() -> Cluster:
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get(
        "KUBERNETES_SERVICE_PORT")
    token = SERVICE_ACCOUNT / "token"
    if not host or not port or not token.exists():
        raise KubeconfigError("not running in a cluster (KUBERNETES_SERVICE_HOST/PORT or the "
                              "service-account token is missing): pass --upstream or "
                              "--kubeconfig")
    host = f"[{host}]" if ":" in host else host
    return Cluster(f"https://{host}:{port}", token_file=str(token),
                   ca_file=str(SERVICE_ACCOUNT / "ca.crt"))


class TokenSource:
    """The bearer token to send: a static one, or the file's content, re-read when the file
    changes (a stat per call; projected tokens are rewritten by the kubelet)."""

    def __init__(self, cluster: Cluster) -> None:
        self._static = cluster.token
        self._file = cluster.token_file
        self._stamp: tuple[int, int] | None = None
        self._token: str | None = None

    def token(self) -> str | None:
        if self._file is None:
            return self._static
        try:
            stat = os.stat(self._file)
        except OSError:
            return self._token  # keep the last good token while the file is being replaced
        stamp = (stat.st_mtime_ns, stat.st_size)
        if stamp != self._stamp:
            try:
                self._token = Path(self._file).read_text(encoding="utf-8").strip() or None
                self._stamp = stamp
            except OSError:
                pass
        return self._token

    def authorization(self) -> dict[str, str]:
        """The Authorization header to send, or none when there is no token."""
        token = self.token()
        return {"Authorization": f"Bearer {token}"} if token else {}


def kubernetes_configuration(cluster: Cluster) -> Any:
    """A `kubernetes` client Configuration for cluster, its token re-read as it rotates."""
    from kubernetes import client

    configuration = client.Configuration()
    configuration.host = cluster.url
    configuration.ssl_ca_cert = cluster.ca_file
    configuration.cert_file = cluster.client_cert
    configuration.key_file = cluster.client_key
    configuration.verify_ssl = cluster.verify
    tokens = TokenSource(cluster)

    def refresh(config: Any) -> None:
        token = tokens.token()
        if token:
            config.api_key["authorization"] = f"Bearer {token}"

    refresh(configuration)
    configuration.refresh_api_key_hook = refresh  # type: ignore[assignment]  # typed None
    return configuration


def own_namespace() -> str | None:
    """The namespace this process runs in: $POD_NAMESPACE, else the service account's."""
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        return (SERVICE_ACCOUNT / "namespace").read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def context_namespace(kubeconfig: str | None = None) -> str | None:
    """The namespace of the kubeconfig's current context, as kubectl reads it (--kubeconfig,
    else the first file in $KUBECONFIG, else ~/.kube/config); None when it names none."""
    import yaml

    path = kubeconfig or (os.environ.get("KUBECONFIG") or "").split(os.pathsep)[0] or str(
        Path.home() / ".kube" / "config")
    try:
        document = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None
    if not isinstance(document, dict):
        return None
    current = document.get("current-context")
    for entry in document.get("contexts") or ():
        if isinstance(entry, dict) and entry.get("name") == current:
            namespace = (entry.get("context") or {}).get("namespace")
            return str(namespace) if namespace else None
    return None


def write_kubeconfig(path: str | Path, server: str, *, token: str | None = None,
                     ca_file: str | Path | None = None) -> None:
    """A kubeconfig whose server is `server`, with a bearer token and a CA if given. The sidecar
    writes one without credentials that points at itself, so the app's client talks to it and
    it adds the pod's credentials."""
    cluster: dict[str, str] = {"server": server}
    if ca_file is not None:
        cluster["certificate-authority"] = str(ca_file)
    user: dict[str, str] = {"token": token} if token else {}
    document = {
        "apiVersion": "v1", "kind": "Config", "current-context": "volcano-guard",
        "clusters": [{"name": "volcano-guard", "cluster": cluster}],
        "users": [{"name": "volcano-guard", "user": user}],
        "contexts": [{"name": "volcano-guard",
                      "context": {"cluster": "volcano-guard", "user": "volcano-guard"}}],
    }
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(json.dumps(document, indent=2), encoding="utf-8")  # JSON is valid YAML
    os.replace(tmp, target)
