"""The sandbox's server-side apply merge, field by field: what structured-merge-diff does for the
list and map shapes the guard's kinds have."""

from __future__ import annotations

import pytest

from volcano_guard_sandbox.apiserver.apply import apply, from_fields_v1, path_text, to_fields_v1
from volcano_guard_sandbox.apiserver.store import ApiError


def deployment(env: list[dict[str, str]], replicas: int | None = None) -> dict:
    spec: dict = {
        "template": {"spec": {"containers": [{"name": "web", "image": "nginx", "env": env}]}}
    }
    if replicas is not None:
        spec["replicas"] = replicas
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": spec}


def env_of(obj: dict) -> list[dict[str, str]]:
    return obj["spec"]["template"]["spec"]["containers"][0]["env"]


def test_an_env_var_a_manager_stops_applying_is_removed_and_the_others_kept():
    first = apply(
        None,
        deployment([{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]),
        "me",
        False,
        True,
    )
    second = apply(first, deployment([{"name": "A", "value": "1"}]), "me", False, True)
    assert env_of(second) == [{"name": "A", "value": "1"}]


def test_a_field_another_manager_also_applies_stays_when_one_drops_it():
    first = apply(None, deployment([{"name": "A", "value": "1"}], replicas=2), "me", False, True)
    shared = apply(first, deployment([{"name": "A", "value": "1"}], replicas=2), "you", False, True)
    dropped = apply(shared, deployment([{"name": "A", "value": "1"}]), "me", False, True)
    assert dropped["spec"]["replicas"] == 2  # "you" still owns it


def test_another_managers_list_element_merges_beside_mine():
    first = apply(None, deployment([{"name": "A", "value": "1"}]), "me", False, True)
    both = apply(first, deployment([{"name": "B", "value": "2"}]), "you", False, True)
    assert [e["name"] for e in env_of(both)] == ["A", "B"]


def test_a_conflict_names_the_path_with_its_keys():
    first = apply(None, deployment([{"name": "A", "value": "1"}]), "me", False, True)
    with pytest.raises(ApiError) as refused:
        apply(first, deployment([{"name": "A", "value": "2"}]), "you", False, True)
    assert refused.value.code == 409
    assert refused.value.message == (
        'Apply failed with 1 conflict: conflict with "me": '
        '.spec.template.spec.containers[name="web"].env[name="A"].value'
    )
    forced = apply(first, deployment([{"name": "A", "value": "2"}]), "you", True, True)
    owners = {
        e["manager"]: from_fields_v1(e["fieldsV1"]) for e in forced["metadata"]["managedFields"]
    }
    value = next(p for p in owners["you"] if path_text(p).endswith('env[name="A"].value'))
    assert value not in owners["me"]


def test_service_ports_are_keyed_by_port_and_protocol():
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "s"},
        "spec": {"ports": [{"port": 443, "targetPort": 8443}]},
    }
    applied = apply(None, service, "me", False, True)
    [entry] = applied["metadata"]["managedFields"]
    assert 'k:{"port":443,"protocol":"TCP"}' in entry["fieldsV1"]["f:spec"]["f:ports"]


def test_lists_of_custom_resources_are_atomic():
    queue = {
        "apiVersion": "x/v1",
        "kind": "Q",
        "metadata": {"name": "q"},
        "spec": {"containers": [{"name": "a"}]},
    }
    first = apply(None, queue, "me", False, False)
    [entry] = first["metadata"]["managedFields"]
    assert entry["fieldsV1"] == {"f:spec": {"f:containers": {}}}


def test_duplicate_keys_in_an_associative_list_are_refused():
    with pytest.raises(ApiError) as refused:
        apply(
            None,
            deployment([{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]),
            "me",
            False,
            True,
        )
    assert refused.value.code == 422 and "duplicate entries" in refused.value.message


def test_fields_v1_round_trips():
    paths = {
        ("f:spec", "f:replicas"),
        ("f:spec", "f:ports", 'k:{"port":1}'),
        ("f:spec", "f:ports", 'k:{"port":1}', "f:name"),
    }
    assert from_fields_v1(to_fields_v1(paths)) == paths
