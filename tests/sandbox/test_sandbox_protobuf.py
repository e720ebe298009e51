"""kubectl's generator commands send protobuf: the sandbox decodes what they create (Namespace,
Secret, Pod), refuses other protobuf with 415 naming the media type, and malformed bodies with
400. kubectl itself is the encoder in these tests."""

import asyncio
import base64
import json

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from volcano_guard_sandbox.apiserver import protobuf
from volcano_guard_sandbox.apiserver.runner import resource_for, running


def as_json(result):
    return json.loads(result.stdout)


def test_kubectl_create_namespace_is_decoded_and_labelled_with_its_name(kubectl):
    assert "namespace/team-b created" in kubectl("create", "namespace", "team-b").stdout
    namespace = as_json(kubectl("get", "namespace", "team-b", "-o", "json"))
    assert namespace["metadata"]["labels"] == {"kubernetes.io/metadata.name": "team-b"}
    assert namespace["status"] == {"phase": "Active"}


def test_kubectl_create_secret_keeps_every_key_and_empty_values(kubectl):
    kubectl(
        "create",
        "secret",
        "generic",
        "creds",
        "-n",
        "team-a",
        "--from-literal=user=ada",
        "--from-literal=empty=",
        "--type=example.com/token",
    )
    secret = as_json(kubectl("get", "secret", "creds", "-n", "team-a", "-o", "json"))
    assert secret["data"] == {"user": base64.b64encode(b"ada").decode(), "empty": ""}
    assert secret["type"] == "example.com/token"


def test_kubectl_run_is_served(kubectl):
    # kubectl 1.32 sends `run`'s Pod as JSON; client-go's typed clients send Pods as protobuf,
    # which the round trip below covers.
    kubectl(
        "run",
        "trainer",
        "-n",
        "team-a",
        "--image=pytorch/pytorch:2.3.0",
        "--labels=app=train",
        "--privileged",
        "--command",
        "--",
        "python",
        "train.py",
    )
    pod = as_json(kubectl("get", "pod", "trainer", "-n", "team-a", "-o", "json"))
    assert pod["spec"]["containers"][0]["securityContext"] == {"privileged": True}
    assert pod["spec"]["containers"][0]["command"] == ["python", "train.py"]


def _pod_message(**spec_fields) -> bytes:
    pod = protobuf._CLASSES["Pod"]()
    pod.metadata.name, pod.metadata.namespace = "p1", "team-a"
    pod.metadata.labels["app"] = "train"
    pod.metadata.generateName = ""  # Go writes empty strings: absent in JSON
    pod.spec.schedulerName = "volcano"
    pod.spec.terminationGracePeriodSeconds = 0  # a Go pointer set to zero: kept
    container = pod.spec.containers.add(name="c", image="busybox")
    container.resources.requests["cpu"].string = "500m"
    container.resources.limits["nvidia.com/gpu"].string = "1"
    container.securityContext.privileged = False
    for name, value in spec_fields.items():
        setattr(pod.spec, name, value)
    return pod.SerializeToString()


def test_a_protobuf_pod_decodes_to_the_json_the_apiserver_would_store():
    (_, kind), obj = protobuf.decode(_envelope("v1", "Pod", _pod_message()))
    assert kind == "Pod"
    assert obj == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p1", "namespace": "team-a", "labels": {"app": "train"}},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "busybox",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"cpu": "500m"}},
                    "securityContext": {"privileged": False},
                }
            ],
            "schedulerName": "volcano",
            "terminationGracePeriodSeconds": 0,
        },
    }


async def test_a_protobuf_field_the_sandbox_does_not_decode_is_refused_not_dropped():
    raw = protobuf._CLASSES["Pod"]()
    raw.ParseFromString(_pod_message())
    # PodSpec field 1 is `volumes`, which the sandbox's definitions leave out.
    raw.spec.ParseFromString(raw.spec.SerializeToString() + b"\x0a\x02\x0a\x00")
    async with running() as sandbox:
        sandbox.seed([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}])
        status, body = await _post(
            f"{sandbox.url}/api/v1/namespaces/team-a/pods",
            _envelope("v1", "Pod", raw.SerializeToString()),
        )
        assert status == 415
        assert (
            "protobuf PodSpec has field(s) 1 that the sandbox does not decode" in (body["message"])
        )
        assert sandbox.store.count(resource_for({"apiVersion": "v1", "kind": "Pod"})) == 0


def _envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    unknown = protobuf._CLASSES["Unknown"]()
    unknown.typeMeta.apiVersion, unknown.typeMeta.kind = api_version, kind
    unknown.raw = raw
    return protobuf.MAGIC + unknown.SerializeToString()


async def _post(url: str, body: bytes) -> tuple[int, dict]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=body, headers={"Content-Type": protobuf.MEDIA_TYPE}) as response,
    ):
        return response.status, await response.json()


async def test_protobuf_of_another_kind_gets_415_naming_the_media_type():
    async with running() as sandbox:
        sandbox.seed([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}}])
        status, body = await _post(f"{sandbox.url}/api/v1/nodes", _envelope("v1", "Node", b""))
    assert status == 415 and body["reason"] == "UnsupportedMediaType"
    assert (
        "decodes application/vnd.kubernetes.protobuf only for Namespace, Secret, Pod"
        in (body["message"])
    )


@pytest.mark.parametrize("body", [b"{}", b"k8s\x00\xff\xff\xff", b"k8s"])
async def test_a_malformed_protobuf_body_gets_400(body):
    async with running() as sandbox:
        status, answer = await _post(f"{sandbox.url}/api/v1/namespaces", body)
    assert status == 400 and "protobuf" in answer["message"]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(["Namespace", "Secret", "Pod"]), raw=st.binary(max_size=200))
def test_decoding_arbitrary_bytes_gives_an_object_or_a_protobuf_error(kind, raw):
    try:
        (_, decoded_kind), obj = protobuf.decode(_envelope("v1", kind, raw))
    except protobuf.ProtobufError:
        return
    assert decoded_kind == kind and obj["kind"] == kind
    json.dumps(obj)  # what the store keeps is plain JSON


@settings(max_examples=50, deadline=None)
@given(kind=st.sampled_from(["Namespace", "Secret", "Pod"]), raw=st.binary(max_size=200))
def test_arbitrary_protobuf_objects_over_http_never_get_a_5xx(kind, raw):
    plural = {"Namespace": "namespaces", "Secret": "secrets", "Pod": "pods"}[kind]
    path = f"/api/v1/{plural}" if kind == "Namespace" else f"/api/v1/namespaces/a/{plural}"

    async def scenario() -> None:
        async with running() as sandbox:
            sandbox.seed([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}}])
            status, _ = await _post(sandbox.url + path, _envelope("v1", kind, raw))
            assert status < 500

    asyncio.run(scenario())
