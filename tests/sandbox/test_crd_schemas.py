"""Volcano Queues in the sandbox as a real API server with Volcano's Queue CRD stores them:
pruned, defaulted and validated by the CRD's structural schema, status through /status only.
The schema is held to Volcano's CRD file; the writes are kubectl's."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from tests.upstream import VOLCANO_COMMIT, volcano_file
from volcano_guard_sandbox.apiserver.crd_schemas import QUEUE
from volcano_guard_sandbox.apiserver.resources import served

CRD = "config/crd/volcano/bases/scheduling.volcano.sh_queues.yaml"
HIERARCHICAL = """apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata:
  name: team-a
  annotations:
    volcano.sh/hierarchy: root/eng/team-a
    volcano.sh/hierarchy-weights: 1/2/8
spec:
  parent: eng
  capability: {cpu: "8", memory: 16Gi}
  deserved: {cpu: 4, memory: 8Gi}
  guarantee:
    resource: {cpu: "2", memory: 4Gi, nvidia.com/gpu: 1}
  reclaimable: true
status:
  state: Open
"""


def without_descriptions(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_descriptions(v) for k, v in value.items() if k != "description"}
    if isinstance(value, list):
        return [without_descriptions(v) for v in value]
    return value


@pytest.mark.parametrize("revision", ["v1.15.1", VOLCANO_COMMIT])
def test_the_queue_schema_is_volcanos_crd_and_the_resource_its_names(revision):
    crd = yaml.safe_load(volcano_file(CRD, revision))
    (version,) = crd["spec"]["versions"]
    assert without_descriptions(version["schema"]["openAPIV3Schema"]) == QUEUE
    resource = served("scheduling.volcano.sh", version["name"], crd["spec"]["names"]["plural"])
    assert resource.namespaced == (crd["spec"]["scope"] == "Namespaced")
    assert resource.short_names == tuple(crd["spec"]["names"]["shortNames"])
    assert resource.status_subresource == ("status" in version["subresources"])


def get_queue(kubectl, name: str) -> dict[str, Any]:
    return json.loads(kubectl("get", "queue", name, "-o", "json").stdout)


def test_a_hierarchical_queue_is_stored_as_written_with_the_crds_defaults(kubectl):
    kubectl("apply", "-f", "-", stdin=HIERARCHICAL)
    stored = get_queue(kubectl, "team-a")
    written = yaml.safe_load(HIERARCHICAL)
    assert stored["spec"] == {**written["spec"], "weight": 1, "dequeueStrategy": "traverse"}
    annotations = stored["metadata"]["annotations"]
    assert annotations["volcano.sh/hierarchy"] == "root/eng/team-a"
    assert annotations["volcano.sh/hierarchy-weights"] == "1/2/8"
    assert "status" not in stored  # /status exists: a create's status is not the user's


def test_unknown_spec_fields_are_refused_strictly_on_create_and_patch_else_pruned(kubectl):
    body = HIERARCHICAL.replace("reclaimable: true", "reclaimable: true\n  bogus: 1").replace(
        "guarantee:\n", "guarantee:\n    percentage: 50\n"
    )
    refused = kubectl("apply", "-f", "-", stdin=body, check=False)
    assert refused.returncode == 1
    assert (
        'strict decoding error: unknown field "spec.bogus", '
        'unknown field "spec.guarantee.percentage"'
    ) in refused.stderr
    kubectl("apply", "-f", "-", stdin=HIERARCHICAL)
    patched = kubectl("apply", "-f", "-", stdin=body, check=False)  # a merge patch now
    assert patched.returncode == 1 and 'unknown field "spec.bogus"' in patched.stderr
    warned = kubectl("apply", "--validate=warn", "-f", "-", stdin=body)
    assert 'Warning: unknown field "spec.guarantee.percentage"' in warned.stderr
    spec = get_queue(kubectl, "team-a")["spec"]
    assert "bogus" not in spec and spec["guarantee"] == {
        "resource": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": 1}
    }


def test_values_the_schema_refuses_are_invalid_in_the_api_servers_words(kubectl):
    body = (
        HIERARCHICAL.replace("parent: eng", "parent: Eng")
        .replace('cpu: "8"', "cpu: eight")
        .replace("reclaimable: true", "reclaimable: true\n  weight: 0\n  dequeueStrategy: lifo")
    )
    refused = kubectl("apply", "-f", "-", stdin=body, check=False)
    assert refused.returncode == 1
    assert 'The Queue "team-a" is invalid:' in refused.stderr
    for line in (
        'spec.capability.cpu: Invalid value: "eight": spec.capability.cpu in body should match',
        'spec.dequeueStrategy: Unsupported value: "lifo": supported values: "fifo", "traverse"',
        'spec.parent: Invalid value: "Eng": spec.parent in body should match',
        "spec.weight: Invalid value: 0: spec.weight in body should be greater than or equal to 1",
    ):
        assert line in refused.stderr


def test_status_is_written_and_validated_through_its_subresource_only(kubectl):
    kubectl("apply", "-f", "-", stdin=HIERARCHICAL)
    queue = get_queue(kubectl, "team-a")
    queue["status"] = {"state": "Open", "allocated": {"cpu": "1"}, "running": 1}
    queue["spec"]["weight"] = 9  # ignored by /status
    kubectl("replace", "--subresource=status", "-f", "-", stdin=json.dumps(queue))
    stored = get_queue(kubectl, "team-a")
    assert stored["status"] == queue["status"] and stored["spec"]["weight"] == 1
    stored["status"]["state"] = "Paused"
    refused = kubectl(
        "replace", "--subresource=status", "-f", "-", stdin=json.dumps(stored), check=False
    )
    assert 'status.state: Unsupported value: "Paused"' in refused.stderr
