"""Volcano's accounting of a pod and of a node, as its scheduler computes them. The table is
transcribed from volcano-sh/volcano pkg/scheduler/api/pod_info.go (`GetPodResourceRequest`,
whose doc comment gives the first row), resource_info.go (`NewResource`), job_info.go
(`NewTaskInfo`) and cache/event_handlers.go (`addTask`); where Volcano's source is on the machine
the last test checks that it still says so."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from tests.upstream import go_function, volcano_file
from volcano_guard.audit.accounting import is_accounted, node_account, pod_request

G = Decimal(1000**3)  # Volcano's example counts memory in G


def container(name: str, restart: str | None = None, **requests: str) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "resources": {"requests": requests}}
    if restart:
        body["restartPolicy"] = restart
    return body


def pod(
    containers: list[dict[str, Any]],
    init: list[dict[str, Any]] | None = None,
    node: str = "n1",
    phase: str = "Running",
    **spec: Any,
) -> dict[str, Any]:
    return {
        "metadata": {"name": "p"},
        "spec": {"nodeName": node, "containers": containers, "initContainers": init or [], **spec},
        "status": {"phase": phase},
    }


TABLE = {
    # GetPodResourceRequest's own example: init containers run one by one, so their peak
    # counts, not their sum; regular containers add up. Result: CPU 3, Memory 3G.
    "Volcano's example": (
        pod(
            [container("c1", cpu="2", memory="1G"), container("c2", cpu="1", memory="1G")],
            [container("ic1", cpu="2", memory="1G"), container("ic2", cpu="2", memory="3G")],
        ),
        {"cpu": Decimal(3), "memory": 3 * G, "pods": Decimal(1)},
    ),
    # A native sidecar (restartable init container) runs beside everything after it: it is
    # added to the regular sum, and to every later init container's peak.
    "native sidecar": (
        pod(
            [container("app", cpu="1", memory="1G")],
            [
                container("sidecar", "Always", cpu="500m", memory="1G"),
                container("migrate", cpu="2", memory="1G"),
            ],
        ),
        {"cpu": Decimal("2.5"), "memory": 2 * G, "pods": Decimal(1)},
    ),
    "overhead added": (
        pod([container("c", cpu="1", memory="1G")], overhead={"cpu": "250m", "memory": "120M"}),
        {"cpu": Decimal("1.25"), "memory": Decimal(1_120_000_000), "pods": Decimal(1)},
    ),
    "pod-level requests replace cpu and memory": (
        pod(
            [container("c", cpu="1", memory="1G", **{"nvidia.com/gpu": "1"})],
            resources={"requests": {"cpu": "4", "memory": "8G"}},
        ),
        {"cpu": Decimal(4), "memory": 8 * G, "pods": Decimal(1), "nvidia.com/gpu": Decimal(1)},
    ),
    "extended and hugepages count, unknown names do not": (
        pod(
            [
                container(
                    "c", cpu="1", **{"nvidia.com/gpu": "2", "hugepages-2Mi": "4Mi", "storage": "1G"}
                )
            ]
        ),
        {
            "cpu": Decimal(1),
            "pods": Decimal(1),
            "nvidia.com/gpu": Decimal(2),
            "hugepages-2Mi": Decimal(4 * 1024 * 1024),
        },
    ),
    "no requests: only the pod itself": (pod([{"name": "c"}]), {"pods": Decimal(1)}),
    # v1helper.IsScalarResourceName decides the rest, as it does in the Queue policy:
    # attachable volumes count; a requests.-prefixed or malformed name does not.
    "scalar resources are Kubernetes' IsScalarResourceName": (
        pod(
            [
                container(
                    "c",
                    **{
                        "attachable-volumes-aws-ebs": "3",
                        "requests.example.com/x": "5",
                        "example.com/a b": "5",
                        "count/pods": "1",
                    },
                )
            ]
        ),
        {"pods": Decimal(1), "attachable-volumes-aws-ebs": Decimal(3)},
    ),
}


@pytest.mark.parametrize("case", list(TABLE))
def test_a_pods_request_is_what_volcanos_scheduler_accounts(case):
    given, expected = TABLE[case]
    assert {k: v for k, v in pod_request(given).items() if v} == expected


@pytest.mark.parametrize(
    ("phase", "node", "accounted"),
    [
        ("Running", "n1", True),
        ("Pending", "n1", True),
        ("Unknown", "n1", True),
        ("Succeeded", "n1", False),
        ("Failed", "n1", False),
        ("Pending", "", False),
    ],
)
def test_every_bound_pod_counts_until_it_succeeds_or_fails(phase, node, accounted):
    assert is_accounted(pod([container("c", cpu="1")], node=node, phase=phase)) is accounted


def test_a_node_passes_its_allocatable_when_its_pods_ask_more():
    node = {
        "metadata": {"name": "n1"},
        "status": {"allocatable": {"cpu": "4", "memory": "8G", "pods": "110"}},
    }
    pods = [
        pod([container("a", cpu="3", memory="4G")]),
        pod([container("b", cpu="2", memory="1G", **{"nvidia.com/gpu": "1"})]),
        pod([container("done", cpu="8")], phase="Succeeded"),
        pod([container("elsewhere", cpu="8")], node="n2"),
    ]
    account = node_account(node, pods)
    assert account.requested["cpu"] == 5
    assert account.overcommitted() == ["cpu", "nvidia.com/gpu"]
    assert account.ratio("cpu") == 1.25 and account.ratio("memory") == 5 / 8
    assert account.ratio("nvidia.com/gpu") == float("inf")  # asked of a node that has none


def test_odd_shapes_give_an_account_not_a_crash():
    for odd in (
        {},
        {"spec": None},
        {"spec": {"containers": "x", "initContainers": [1]}},
        {"spec": {"containers": [{"resources": {"requests": {"cpu": "lots"}}}]}},
    ):
        assert pod_request(odd) == {"pods": Decimal(1)}


def test_volcanos_source_still_accounts_so():
    pod_info = volcano_file("pkg/scheduler/api/pod_info.go")
    request = go_function(pod_info, "GetPodResourceRequest")
    assert "aggregateAllContainerResourceRequests(pod)" in request
    assert "amendResourceAccordingToPodFeatures(result, pod)" in request
    aggregate = go_function(pod_info, "aggregateAllContainerResourceRequests")
    for line in (
        "v1.ContainerRestartPolicyAlways",
        "result.Add(containerReq)",
        "restartableInitContainerReqs.Add(containerReq)",
        "initContainerReqs.SetMaxResource(containerReq)",
        "result.SetMaxResource(initContainerReqs)",
        "result.AddScalar(v1.ResourcePods, 1)",
    ):
        assert line in aggregate, line
    amend = go_function(pod_info, "amendResourceAccordingToPodFeatures")
    assert "resource.Add(NewResource(pod.Spec.Overhead))" in amend
    assert "IsPodLevelRequestsSet(pod)" in amend
    task = go_function(volcano_file("pkg/scheduler/api/job_info.go"), "NewTaskInfo")
    assert "initResReq := GetPodResourceRequest(pod)" in task and "resReq := initResReq" in task
    handlers = volcano_file("pkg/scheduler/cache/event_handlers.go")
    assert "!isTerminated(pi.Status)" in go_function(handlers, "addTask")
    assert "status == schedulingapi.Succeeded || status == schedulingapi.Failed" in go_function(
        handlers, "isTerminated"
    )
    new_resource = go_function(volcano_file("pkg/scheduler/api/resource_info.go"), "NewResource")
    assert "v1helper.IsScalarResourceName(rName)" in new_resource
