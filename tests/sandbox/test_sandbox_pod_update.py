"""Pod updates refused as kube-apiserver refuses them (pkg/apis/core/validation/validation.go
ValidatePodUpdate): through the pod itself only images, activeDeadlineSeconds (set or
lowered), added tolerations and removed scheduling gates change; nodeName and resources do
not (a scheduler binds through pods/binding). Driven with kubectl."""

import json

import pytest

from tests.sandbox_fixtures import pod

FORBIDDEN = (
    'The Pod "p1" is invalid: spec: Forbidden: pod updates may not change fields other '
    "than `spec.containers[*].image`"
)


@pytest.fixture
def created(kubectl):
    body = pod()
    body["spec"]["tolerations"] = [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
    body["spec"]["schedulingGates"] = [{"name": "wait"}]
    kubectl("create", "-f", "-", stdin=json.dumps(body))

    def patch(change, kind="strategic"):
        return kubectl(
            "-n",
            "team-a",
            "patch",
            "pod",
            "p1",
            "--type",
            kind,
            "-p",
            json.dumps(change),
            check=False,
        )

    return patch


@pytest.mark.parametrize(
    "change",
    [
        {"spec": {"nodeName": "node-1"}},
        {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}},
        {"spec": {"schedulerName": "volcano"}},
        {"spec": {"containers": [{"name": "c", "command": ["sh"]}]}},
    ],
    ids=["nodeName", "resources", "schedulerName", "command"],
)
def test_other_spec_fields_are_forbidden(created, change):
    result = created(change)
    assert result.returncode != 0
    assert FORBIDDEN in result.stderr


def test_a_container_may_not_be_added(created):
    result = created(
        [{"op": "add", "path": "/spec/containers/-", "value": {"name": "d", "image": "busybox"}}],
        kind="json",
    )
    assert (
        "spec.containers: Forbidden: pod updates may not add or remove containers" in result.stderr
    )


def test_what_kube_apiserver_lets_change_changes(created, kubectl):
    for change in (
        {"spec": {"containers": [{"name": "c", "image": "busybox:1.37"}]}},
        {"spec": {"activeDeadlineSeconds": 60}},
        {"spec": {"activeDeadlineSeconds": 30}},
        {"metadata": {"labels": {"tier": "batch"}}},
    ):
        result = created(change)
        assert result.returncode == 0, (change, result.stderr)
    added = created(
        [
            {
                "op": "add",
                "path": "/spec/tolerations/-",
                "value": {"key": "spot", "operator": "Exists"},
            }
        ],
        kind="json",
    )
    assert added.returncode == 0, added.stderr
    ungated = created([{"op": "remove", "path": "/spec/schedulingGates"}], kind="json")
    assert ungated.returncode == 0, ungated.stderr
    spec = json.loads(kubectl("-n", "team-a", "get", "pod", "p1", "-o", "json").stdout)["spec"]
    assert spec["activeDeadlineSeconds"] == 30 and len(spec["tolerations"]) == 2
    assert "schedulingGates" not in spec


def test_deadlines_only_fall_tolerations_only_grow_gates_only_go(created):
    assert created({"spec": {"activeDeadlineSeconds": 60}}).returncode == 0
    raised = created({"spec": {"activeDeadlineSeconds": 90}})
    assert (
        "spec.activeDeadlineSeconds: Invalid value: 90: must be less than or equal to "
        "previous value" in raised.stderr
    )
    removed = created([{"op": "remove", "path": "/spec/tolerations/0"}], kind="json")
    assert "spec.tolerations: Forbidden: existing toleration can not be modified" in removed.stderr
    gated = created(
        [{"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": "x"}}], kind="json"
    )
    assert (
        "spec.schedulingGates: Forbidden: only deletion is allowed, but found new "
        "scheduling gate 'x'" in gated.stderr
    )


def test_the_status_subresource_still_writes_status(created, kubectl):
    kubectl(
        "-n",
        "team-a",
        "patch",
        "pod",
        "p1",
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": {"phase": "Running"}}),
    )
    phase = kubectl("-n", "team-a", "get", "pod", "p1", "-o", "jsonpath={.status.phase}").stdout
    assert phase == "Running"
