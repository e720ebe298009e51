"""The `kubernetes` package's ApiClient with a command line's manners: every call has a connect
and a read timeout, nothing is retried behind the caller's back (urllib3 would log a line per
retry), and a server that cannot be reached is one APIServerUnreachable naming it.

Imported when a command talks to a cluster (it imports the kubernetes package)."""

from __future__ import annotations

import json
import re
from typing import Any

from kubernetes import client
from kubernetes.client import rest
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import (
    ConnectTimeoutError,
    HTTPError,
    NameResolutionError,
    NewConnectionError,
    ProtocolError,
    ReadTimeoutError,
    SSLError,
)

from volcano_guard.base.kubeconfig import Cluster, kubernetes_configuration

CONNECT_TIMEOUT = 10.0  # seconds to open a connection (TCP and TLS)
READ_TIMEOUT = 20.0  # seconds an answer may go without a byte; watches set their own


class APIServerUnreachable(ConnectionError):
    """No answer from the API server; the message names it and what the connection met."""


def api_client(cluster: Cluster) -> Any:
    """A kubernetes ApiClient for cluster, with timeouts and named connection errors."""
    configuration = kubernetes_configuration(cluster)
    configuration.retries = False  # callers decide when to try again, and say so once
    api = client.ApiClient(configuration)
    api.rest_client = _TimedRESTClient(configuration, cluster.url)
    return api


def request_json(
    api: Any,
    method: str,
    path: str,
    *,
    body: Any = None,
    query: list[tuple[str, str]] | None = None,
    content_type: str = "application/json",
) -> Any:
    """One call by path (for what the typed API classes make awkward: any kind by name, server-
    side apply, discovery): its JSON answer as plain data; ApiException on a non-2xx answer."""
    method_, url, headers, serialized, post = api.param_serialize(
        method,
        path,
        query_params=query or [],
        header_params={"Content-Type": content_type, "Accept": "application/json"},
        body=body,
        auth_settings=["BearerToken"],
    )
    response = api.call_api(method_, url, headers, serialized, post)
    response.read()
    return api.response_deserialize(response, {"2XX": "object"}).data


class _TimedRESTClient(rest.RESTClientObject):  # type: ignore[misc]  # untyped package
    def __init__(self, configuration: Any, server: str) -> None:
        super().__init__(configuration)
        self.server = server

    def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("_request_timeout") is None:
            kwargs["_request_timeout"] = (CONNECT_TIMEOUT, READ_TIMEOUT)
        try:
            return super().request(method, url, *args, **kwargs)
        except HTTPError as exc:
            raise APIServerUnreachable(unreachable_message(self.server, exc)) from None
        except ApiException as exc:
            if exc.status == 0 and str(exc.reason).startswith("SSLError"):  # rest.py wraps it
                detail = str(exc.reason).splitlines()[-1]
                raise APIServerUnreachable(
                    f"the API server {self.server} failed TLS: {detail}"
                ) from None
            raise


def api_error_text(exc: ApiException) -> str:
    """An API error as the server said it: code, reason and its Status message."""
    try:
        message = json.loads(exc.body or "").get("message")
    except (ValueError, AttributeError, TypeError):
        message = None
    return f"{exc.status} {exc.reason}: {message}" if message else f"{exc.status} {exc.reason}"


def unreachable_message(server: str, exc: BaseException) -> str:
    """What went wrong reaching server, in words."""
    reason = getattr(exc, "reason", None) or exc  # MaxRetryError and friends wrap the cause
    # Most specific first: NameResolutionError is a NewConnectionError, which urllib3 makes a
    # ConnectTimeoutError too.
    if isinstance(reason, NameResolutionError):
        return f"the API server {server} cannot be found: its host name does not resolve"
    if isinstance(reason, NewConnectionError):
        why = re.sub(
            r"^.*Failed to establish a new connection: (\[Errno -?\d+\] )?", "", str(reason)
        )
        return f"the API server {server} cannot be reached: {why.lower()}"
    if isinstance(reason, ConnectTimeoutError):
        return f"the API server {server} did not accept a connection within {CONNECT_TIMEOUT:g}s"
    if isinstance(reason, ReadTimeoutError):
        return f"the API server {server} did not answer within {READ_TIMEOUT:g}s"
    if isinstance(reason, SSLError):
        return f"the API server {server} failed TLS: {reason}"
    if isinstance(reason, ProtocolError):
        return f"the API server {server} closed the connection"
    return f"the API server {server} cannot be reached: {reason}"
