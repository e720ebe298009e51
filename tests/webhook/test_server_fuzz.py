"""Arbitrary JSON thrown at /validate and /mutate: never a 5xx, and the server stays up."""

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.builders import container, pod, review
from tests.conftest import SyncWebhook
from volcano_guard.webhook.config import config_from_dict

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=25,
)
# Values for the fields the policy reads, so the fuzz reaches the policy, not just the envelope.
quantities = st.sampled_from(["1", "100m", "1Gi", "-1", "1.5 Gi", ""]) | json_values
resources = st.fixed_dictionaries(
    {},
    optional={
        "requests": st.dictionaries(st.sampled_from(["cpu", "memory"]), quantities) | json_values,
        "limits": st.dictionaries(st.sampled_from(["cpu", "memory"]), quantities) | json_values,
    },
)
containers = st.fixed_dictionaries(
    {"name": st.text(max_size=5) | json_values}, optional={"resources": resources | json_values}
)
pod_fields = st.fixed_dictionaries(
    {},
    optional={
        "schedulerName": st.sampled_from(["volcano", "default-scheduler"]) | json_values,
        "containers": st.lists(containers | json_values, max_size=3) | json_values,
        "initContainers": st.lists(containers, max_size=2) | json_values,
    },
)


@pytest.fixture(scope="module")
def server(certs):
    config = config_from_dict({"policies": {"resourceRequests": {"defaults": {"cpu": "1"}}}})
    with SyncWebhook(config, certs) as served:
        yield served


def assert_answered(server, path, body: bytes) -> None:
    status, payload = server.post(path, body)
    assert status in (200, 400, 413), (status, payload[:300])
    document = json.loads(payload)
    if status == 200:
        assert document["kind"] == "AdmissionReview"
    else:
        assert document["kind"] == "Status" and document["message"]


FUZZ = settings(
    max_examples=75, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@FUZZ
@given(document=json_values, path=st.sampled_from(["/validate", "/mutate"]))
def test_arbitrary_json_never_gets_a_5xx(server, document, path):
    assert_answered(server, path, json.dumps(document).encode())


@pytest.mark.slow  # an attack fuzz run
@FUZZ
@given(
    spec=pod_fields,
    kind=st.sampled_from(["Pod", "Job", "Deployment"]),
    path=st.sampled_from(["/validate", "/mutate"]),
)
def test_arbitrary_objects_inside_a_valid_review_never_get_a_5xx(server, spec, kind, path):
    obj = pod()
    obj["kind"] = kind
    if kind == "Job":
        obj["spec"] = {"tasks": [{"name": "t", "template": {"spec": spec}}]}
    elif kind == "Deployment":
        obj["spec"] = {"template": {"spec": spec}}
    else:
        obj["spec"] = spec
    assert_answered(server, path, json.dumps(review(obj)).encode())


@pytest.mark.slow  # an attack fuzz run
@FUZZ
@given(
    request=st.dictionaries(
        st.sampled_from(
            [
                "uid",
                "kind",
                "resource",
                "operation",
                "object",
                "userInfo",
                "namespace",
                "options",
                "oldObject",
                "dryRun",
                "subResource",
            ]
        ),
        json_values,
    )
)
def test_arbitrary_request_envelopes_never_get_a_5xx(server, request):
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    assert_answered(server, "/validate", json.dumps(body).encode())


def test_server_is_alive_after_the_fuzz(server):
    status, payload = server.post(
        "/validate",
        json.dumps(
            review(pod(container(requests={"cpu": "1", "memory": "1"})), uid="alive")
        ).encode(),
    )
    assert status == 200
    assert json.loads(payload)["response"] == {"uid": "alive", "allowed": True}
