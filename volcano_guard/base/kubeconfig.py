"""How volcano-guard reaches an API server: an explicit URL, a kubeconfig, or in-cluster.

The one place kubeconfig and service-account files are read. Tokens come from a TokenSource that
re-reads its file when it changes, because projected service-account tokens rotate.
"""

from __future__ import annotations

import json
import logging
import os
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from volcano_guard.base.files import FileProblem, read_text, yaml_error_line, yaml_error_problem
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
    namespace: str | None = None  # the kubeconfig context's, or the pod's own in a cluster

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

    def default_namespace(self) -> str:
        """The namespace a command works in when none is given, as kubectl picks it."""
        return self.namespace or own_namespace() or "default"


def resolve(
    url: str | None = None,
    token_file: str | None = None,
    ca_file: str | None = None,
    kubeconfig: str | None = None,
    context: str | None = None,
) -> Cluster:
    """An explicit URL (the sidecar's --upstream), else the kubeconfig as kubectl loads it
    (--kubeconfig, else $KUBECONFIG, else ~/.kube/config), else the in-cluster config."""
    if url:
        if not url.startswith(("http://", "https://")):
            raise KubeconfigError(f"upstream {url!r} must start with http:// or https://")
        return Cluster(url.rstrip("/"), token_file=token_file, ca_file=ca_file)
    loaded = load_kubeconfig(kubeconfig)
    chosen = context or (loaded.current_context if loaded else "")
    if loaded is not None and chosen:
        return _from_kubeconfig(loaded, chosen)
    if context:
        raise KubeconfigError(f"--context {context}: {_nowhere(loaded)}")
    return _in_cluster(loaded)


@dataclass(frozen=True)
class Kubeconfig:
    """Kubeconfig files merged as client-go's loader merges them (clientcmd/loader.go
    ClientConfigLoadingRules.Load): the first file to name a cluster, user or context wins it
    whole, the first non-empty current-context wins, and relative paths are made absolute
    against the file that holds them."""

    document: dict[str, Any]
    files: tuple[str, ...]

    @property
    def current_context(self) -> str:
        return str(self.document.get("current-context") or "")

    def names(self, section: str) -> list[str]:
        return [entry["name"] for entry in self.document[section]]

    def describe(self) -> str:
        return f"kubeconfig {', '.join(self.files)}"


# The fields client-go resolves against the file they come from (loader.go ResolveLocalPaths).
_FILE_FIELDS = {
    "clusters": ("cluster", ("certificate-authority",)),
    "users": ("user", ("client-certificate", "client-key", "tokenFile")),
}


def load_kubeconfig(explicit: str | None = None) -> Kubeconfig | None:
    """--kubeconfig alone (it must exist), else the files of $KUBECONFIG, else ~/.kube/config
    (missing ones skipped); None when there is no file. KubeconfigError names a file that
    cannot be read or parsed."""
    if explicit:
        paths = [explicit]
    elif os.environ.get("KUBECONFIG"):
        paths = list(dict.fromkeys(p for p in os.environ["KUBECONFIG"].split(os.pathsep) if p))
    else:
        paths = [str(Path.home() / ".kube" / "config")]
    documents = []
    for path in paths:
        if not os.path.exists(path):  # skipped, as client-go skips it, unless asked for
            if explicit:
                raise KubeconfigError(f"--kubeconfig {path}: no such file")
            continue
        try:
            text = read_text(path, "kubeconfig")
        except FileProblem as exc:
            raise KubeconfigError(str(exc)) from None
        documents.append((path, _parse(path, text)))
    if not documents:
        return None
    merged: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [],
        "users": [],
        "contexts": [],
        "current-context": "",
    }
    for path, document in documents:
        for section in ("clusters", "users", "contexts"):
            taken = {entry["name"] for entry in merged[section]}
            merged[section] += [
                _absolute(section, entry, path)
                for entry in document[section]
                if entry["name"] not in taken
            ]
        merged["current-context"] = merged["current-context"] or document["current-context"]
    return Kubeconfig(merged, tuple(path for path, _ in documents))


def _parse(path: str, text: str) -> dict[str, Any]:
    import yaml

    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise KubeconfigError(
            f"kubeconfig {path}{yaml_error_line(exc)}: not YAML: {yaml_error_problem(exc)}"
        ) from None
    document = document if document is not None else {}  # an empty file is an empty config
    if not isinstance(document, dict):
        raise KubeconfigError(
            f"kubeconfig {path}: not a kubeconfig (a mapping with clusters, users and contexts)"
        )
    parsed: dict[str, Any] = {"current-context": str(document.get("current-context") or "")}
    for section in ("clusters", "users", "contexts"):
        entries = document.get(section) or []
        if not isinstance(entries, list) or not all(
            isinstance(entry, dict) and isinstance(entry.get("name"), str) for entry in entries
        ):
            raise KubeconfigError(
                f"kubeconfig {path}: {section} must be a list of entries with a name"
            )
        parsed[section] = entries
    return parsed


def _absolute(section: str, entry: dict[str, Any], origin: str) -> dict[str, Any]:
    if section not in _FILE_FIELDS:
        return entry
    key, fields = _FILE_FIELDS[section]
    body = entry.get(key)
    if not isinstance(body, dict):
        return entry
    base = Path(origin).absolute().parent
    body = {
        name: str(base / value)
        if name in fields and isinstance(value, str) and value and not os.path.isabs(value)
        else value
        for name, value in body.items()
    }
    return {**entry, key: body}


def _from_kubeconfig(loaded: Kubeconfig, context: str) -> Cluster:
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    if context not in loaded.names("contexts"):
        known = ", ".join(loaded.names("contexts")) or "none"
        raise KubeconfigError(f"{loaded.describe()}: no context {context!r} (contexts: {known})")
    configuration = client.Configuration()
    logging.disable(logging.ERROR)  # the package logs a failed exec plugin; we say it once
    try:
        config.load_kube_config_from_dict(
            loaded.document,
            context=context,
            client_configuration=configuration,
            persist_config=False,
        )
    except (ConfigException, OSError, TypeError, ValueError, KeyError, AttributeError) as exc:
        raise KubeconfigError(f"{loaded.describe()}, context {context}: {exc}") from None
    finally:
        logging.disable(logging.NOTSET)
    # Recent kubernetes packages key the token "BearerToken", older ones "authorization".
    authorization = (
        configuration.api_key.get("BearerToken") or configuration.api_key.get("authorization") or ""
    )
    token = authorization.removeprefix("Bearer ").strip() or None
    [entry] = [c for c in loaded.document["contexts"] if c["name"] == context]
    for field, path in (
        ("certificate-authority", configuration.ssl_ca_cert),
        ("client-certificate", configuration.cert_file),
        ("client-key", configuration.key_file),
    ):
        if path and not os.path.exists(path):  # kubectl refuses these too
            raise KubeconfigError(
                f"{loaded.describe()}, context {context}: {field} {path}: no such file"
            )
    user = _user_of(loaded, entry)
    if isinstance(user.get("exec"), dict) and token is None and not configuration.cert_file:
        raise KubeconfigError(
            f"{loaded.describe()}, context {context}: the exec plugin "
            f"{user['exec'].get('command')!r} gave no credentials"
        )
    namespace = (entry.get("context") or {}).get("namespace") or None
    return Cluster(
        configuration.host.rstrip("/"),
        token=token,
        ca_file=configuration.ssl_ca_cert,
        client_cert=configuration.cert_file,
        client_key=configuration.key_file,
        verify=configuration.verify_ssl,
        namespace=str(namespace) if namespace else None,
    )


def _user_of(loaded: Kubeconfig, context_entry: dict[str, Any]) -> dict[str, Any]:
    """The user entry a context names ({} when it names none that exists)."""
    name = (context_entry.get("context") or {}).get("user")
    for user in loaded.document["users"]:
        if user["name"] == name and isinstance(user.get("user"), dict):
            return dict(user["user"])
    return {}


def _nowhere(loaded: Kubeconfig | None) -> str:
    """Where a kubeconfig was looked for, in words."""
    if loaded is not None:
        return f"{loaded.describe()} sets no current-context"
    if os.environ.get("KUBECONFIG"):
        return f"no file of $KUBECONFIG ({os.environ['KUBECONFIG']}) exists"
    return f"there is no {Path.home() / '.kube' / 'config'} and $KUBECONFIG is unset"


def _in_cluster(loaded: Kubeconfig | None) -> Cluster:
    host, port = (
        os.environ.get("KUBERNETES_SERVICE_HOST"),
        os.environ.get("KUBERNETES_SERVICE_PORT"),
    )
    token = SERVICE_ACCOUNT / "token"
    if not host or not port or not token.exists():
        raise KubeconfigError(
            f"no cluster to talk to: {_nowhere(loaded)}, and this is not a "
            "pod in a cluster; pass --kubeconfig (and --context)"
        )
    host = f"[{host}]" if ":" in host else host
    return Cluster(
        f"https://{host}:{port}",
        token_file=str(token),
        ca_file=str(SERVICE_ACCOUNT / "ca.crt"),
        namespace=own_namespace(),
    )


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


def write_kubeconfig(
    path: str | Path, server: str, *, token: str | None = None, ca_file: str | Path | None = None
) -> None:
    """A kubeconfig whose server is `server`, with a bearer token and a CA if given. The sidecar
    writes one without credentials that points at itself, so the app's client talks to it and
    it adds the pod's credentials."""
    cluster: dict[str, str] = {"server": server}
    if ca_file is not None:
        cluster["certificate-authority"] = str(ca_file)
    user: dict[str, str] = {"token": token} if token else {}
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "volcano-guard",
        "clusters": [{"name": "volcano-guard", "cluster": cluster}],
        "users": [{"name": "volcano-guard", "user": user}],
        "contexts": [
            {
                "name": "volcano-guard",
                "context": {"cluster": "volcano-guard", "user": "volcano-guard"},
            }
        ],
    }
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(json.dumps(document, indent=2), encoding="utf-8")  # JSON is valid YAML
    os.replace(tmp, target)
