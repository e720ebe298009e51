"""Reading the cluster state the audit needs, with the `kubernetes` client: nodes, pods,
PodGroups, the Volcano workload kinds, DaemonSets, the Deployments and StatefulSets that may run
Volcano's components and (for the whole cluster) Queues, as plain JSON objects. A kind whose CRD
is not installed (404) is read as none."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from volcano_guard.audit.findings import WORKLOADS, ClusterState


class ClusterReadError(Exception):
    """The cluster could not be read; the message says what failed."""


class NamespaceNotFound(ClusterReadError):
    """--namespace names a namespace the cluster does not have."""


def read_state(
    api_client: Any, namespace: str | None = None, progress: Callable[[str], None] = lambda _: None
) -> ClusterState:
    """Every object the audit evaluates (in namespace, if given; nodes always)."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    from volcano_guard.base.api_client import api_error_text

    core, custom = client.CoreV1Api(api_client), client.CustomObjectsApi(api_client)
    apps = client.AppsV1Api(api_client)

    def items(
        what: str,
        call: Callable[..., Any],
        *args: Any,
        missing_ok: bool = False,
    ) -> list[dict[str, Any]]:
        try:
            response = call(*args, _preload_content=False)
            listed = json.loads(response.data).get("items") or []
        except ApiException as exc:
            if missing_ok and exc.status == 404:
                return []
            raise ClusterReadError(f"listing {what}: {api_error_text(exc)}") from None
        except (HTTPError, OSError, ValueError) as exc:
            raise ClusterReadError(f"listing {what}: {exc}") from None
        progress(f"read {len(listed):,} {what}")
        return [item for item in listed if isinstance(item, dict)]

    if namespace:
        _require_namespace(core, namespace)
    nodes = items("nodes", core.list_node)
    pods = (
        items("pods", core.list_namespaced_pod, namespace)
        if namespace
        else items("pods", core.list_pod_for_all_namespaces)
    )

    daemonsets = (
        items("daemonsets", apps.list_namespaced_daemon_set, namespace)
        if namespace
        else items("daemonsets", apps.list_daemon_set_for_all_namespaces)
    )

    # Volcano's components by their pod templates (their versions even with no pod running);
    # findings.py tells which run Volcano, by the configured images.
    controllers = [
        item
        for what, every, one in (
            (
                "deployments",
                apps.list_deployment_for_all_namespaces,
                apps.list_namespaced_deployment,
            ),
            (
                "statefulsets",
                apps.list_stateful_set_for_all_namespaces,
                apps.list_namespaced_stateful_set,
            ),
        )
        for item in (items(what, one, namespace) if namespace else items(what, every))
    ]

    def custom_items(group: str, version: str, plural: str) -> list[dict[str, Any]]:
        if namespace:
            return items(
                plural,
                custom.list_namespaced_custom_object,
                group,
                version,
                namespace,
                plural,
                missing_ok=True,
            )
        return items(
            plural, custom.list_cluster_custom_object, group, version, plural, missing_ok=True
        )

    podgroups = custom_items("scheduling.volcano.sh", "v1beta1", "podgroups")
    workloads = [
        item
        for (group, version, _), plural in WORKLOADS.items()
        for item in custom_items(group, version, plural)
    ]
    # Queues are cluster-scoped and judged against every scheduled node: an audit of one
    # namespace leaves them out.
    queues = [] if namespace else custom_items("scheduling.volcano.sh", "v1beta1", "queues")
    return ClusterState(nodes, pods, podgroups, workloads, daemonsets, controllers, queues)


def _require_namespace(core: Any, namespace: str) -> None:
    """NamespaceNotFound unless the namespace exists: listing in a missing namespace answers an
    empty list, which would read as a clean audit of a typo.

    A user refused the get (403) is audited as before, on what the lists say: `audit
    --namespace` needs no permission it did not need already."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    from volcano_guard.base.api_client import api_error_text

    try:
        core.read_namespace(namespace, _preload_content=False)
    except ApiException as exc:
        if exc.status == 404:
            raise NamespaceNotFound(f"--namespace {namespace}: namespace not found") from None
        if exc.status != 403:
            raise ClusterReadError(
                f"reading namespace {namespace}: {api_error_text(exc)}"
            ) from None
    except (HTTPError, OSError) as exc:
        raise ClusterReadError(f"reading namespace {namespace}: {exc}") from None
