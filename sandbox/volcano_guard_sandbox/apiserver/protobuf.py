"""Kubernetes' protobuf wire format, decoded for the objects kubectl's generators create.

`kubectl create namespace`, `kubectl create secret` and `kubectl run` send their object as
`application/vnd.kubernetes.protobuf`: the 4 bytes `k8s\\0`, then a runtime.Unknown message
(typeMeta, raw) whose `raw` is the object's own message. The messages below are written from the
field numbers of k8s.io/api core/v1 and k8s.io/apimachinery meta/v1 `generated.proto`; decoding
yields the JSON object the apiserver would have decoded. A field outside these definitions is
refused (415), never silently dropped.

Go's protobuf marshaller writes a non-pointer scalar even when it is empty and a pointer only
when set, so an empty string or zero counts as absent unless the field is marked `?` (a Go
pointer: `privileged: false` is kept).
"""

from __future__ import annotations

import base64
import datetime
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, unknown_fields
from google.protobuf.message import DecodeError, Message

MEDIA_TYPE = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"


class ProtobufError(ValueError):
    """The body cannot be decoded; `unsupported` separates what the sandbox does not decode
    (415) from what is malformed (400)."""

    def __init__(self, message: str, *, unsupported: bool = False) -> None:
        super().__init__(message)
        self.unsupported = unsupported


# message -> field -> (number, type). Types: a scalar (string, bool, int32, int64, bytes), with
# `?` when the Go field is a pointer; another message; `[T]` repeated; `{T}` a map from string.
# Time, Quantity and IntOrString become their JSON forms.
_MESSAGES: dict[str, dict[str, tuple[int, str]]] = {
    "Unknown": {
        "typeMeta": (1, "TypeMeta"),
        "raw": (2, "bytes"),
        "contentEncoding": (3, "string"),
        "contentType": (4, "string"),
    },
    "TypeMeta": {"apiVersion": (1, "string"), "kind": (2, "string")},  # runtime.TypeMeta
    "Time": {"seconds": (1, "int64"), "nanos": (2, "int32")},
    "Quantity": {"string": (1, "string")},
    "IntOrString": {"type": (1, "int64"), "intVal": (2, "int32"), "strVal": (3, "string")},
    "ObjectMeta": {
        "name": (1, "string"),
        "generateName": (2, "string"),
        "namespace": (3, "string"),
        "selfLink": (4, "string"),
        "uid": (5, "string"),
        "resourceVersion": (6, "string"),
        "generation": (7, "int64"),
        "creationTimestamp": (8, "Time"),
        "deletionTimestamp": (9, "Time"),
        "deletionGracePeriodSeconds": (10, "int64?"),
        "labels": (11, "{string}"),
        "annotations": (12, "{string}"),
        "ownerReferences": (13, "[OwnerReference]"),
        "finalizers": (14, "[string]"),
    },
    "OwnerReference": {
        "kind": (1, "string"),
        "name": (3, "string"),
        "uid": (4, "string"),
        "apiVersion": (5, "string"),
        "controller": (6, "bool?"),
        "blockOwnerDeletion": (7, "bool?"),
    },
    "Namespace": {
        "metadata": (1, "ObjectMeta"),
        "spec": (2, "NamespaceSpec"),
        "status": (3, "NamespaceStatus"),
    },
    "NamespaceSpec": {"finalizers": (1, "[string]")},
    # meta/v1 DeleteOptions, which client-go (Helm's uninstall) sends as protobuf
    "DeleteOptions": {
        "gracePeriodSeconds": (1, "int64?"),
        "preconditions": (2, "Preconditions"),
        "orphanDependents": (3, "bool?"),
        "propagationPolicy": (4, "string?"),
        "dryRun": (5, "[string]"),
    },
    "Preconditions": {"uid": (1, "string?"), "resourceVersion": (2, "string?")},
    "NamespaceStatus": {"phase": (1, "string")},
    "Secret": {
        "metadata": (1, "ObjectMeta"),
        "data": (2, "{bytes}"),
        "type": (3, "string"),
        "stringData": (4, "{string}"),
        "immutable": (5, "bool?"),
    },
    "Pod": {"metadata": (1, "ObjectMeta"), "spec": (2, "PodSpec"), "status": (3, "PodStatus")},
    "PodSpec": {
        "containers": (2, "[Container]"),
        "restartPolicy": (3, "string"),
        "terminationGracePeriodSeconds": (4, "int64?"),
        "activeDeadlineSeconds": (5, "int64?"),
        "dnsPolicy": (6, "string"),
        "nodeSelector": (7, "{string}"),
        "serviceAccountName": (8, "string"),
        "serviceAccount": (9, "string"),
        "nodeName": (10, "string"),
        "hostNetwork": (11, "bool"),
        "hostPID": (12, "bool"),
        "hostIPC": (13, "bool"),
        "imagePullSecrets": (15, "[LocalObjectReference]"),
        "hostname": (16, "string"),
        "subdomain": (17, "string"),
        "schedulerName": (19, "string"),
        "initContainers": (20, "[Container]"),
        "automountServiceAccountToken": (21, "bool?"),
        "tolerations": (22, "[Toleration]"),
        "priorityClassName": (24, "string"),
        "priority": (25, "int32?"),
        "runtimeClassName": (29, "string?"),
        "enableServiceLinks": (30, "bool?"),
        "preemptionPolicy": (31, "string?"),
        "overhead": (32, "{Quantity}"),
    },
    "Container": {
        "name": (1, "string"),
        "image": (2, "string"),
        "command": (3, "[string]"),
        "args": (4, "[string]"),
        "workingDir": (5, "string"),
        "ports": (6, "[ContainerPort]"),
        "env": (7, "[EnvVar]"),
        "resources": (8, "ResourceRequirements"),
        "terminationMessagePath": (13, "string"),
        "imagePullPolicy": (14, "string"),
        "securityContext": (15, "SecurityContext"),
        "stdin": (16, "bool"),
        "stdinOnce": (17, "bool"),
        "tty": (18, "bool"),
        "terminationMessagePolicy": (20, "string"),
        "restartPolicy": (24, "string?"),
    },
    "ContainerPort": {
        "name": (1, "string"),
        "hostPort": (2, "int32"),
        "containerPort": (3, "int32"),
        "protocol": (4, "string"),
        "hostIP": (5, "string"),
    },
    "EnvVar": {"name": (1, "string"), "value": (2, "string")},
    "ResourceRequirements": {"limits": (1, "{Quantity}"), "requests": (2, "{Quantity}")},
    "SecurityContext": {
        "capabilities": (1, "Capabilities"),
        "privileged": (2, "bool?"),
        "runAsUser": (4, "int64?"),
        "runAsNonRoot": (5, "bool?"),
        "readOnlyRootFilesystem": (6, "bool?"),
        "allowPrivilegeEscalation": (7, "bool?"),
        "runAsGroup": (8, "int64?"),
    },
    "Capabilities": {"add": (1, "[string]"), "drop": (2, "[string]")},
    "LocalObjectReference": {"name": (1, "string")},
    "Toleration": {
        "key": (1, "string"),
        "operator": (2, "string"),
        "value": (3, "string"),
        "effect": (4, "string"),
        "tolerationSeconds": (5, "int64?"),
    },
    "PodStatus": {"phase": (1, "string")},
}
# apiVersion/kind in the envelope -> the message of its raw bytes.
DECODABLE = {
    ("v1", "Namespace"): "Namespace",
    ("v1", "Secret"): "Secret",
    ("v1", "Pod"): "Pod",
    ("v1", "DeleteOptions"): "DeleteOptions",
}
_PACKAGE = "volcano_guard_sandbox.apiserver.k8s"
_SCALARS = {
    "string": descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
    "bool": descriptor_pb2.FieldDescriptorProto.TYPE_BOOL,
    "int32": descriptor_pb2.FieldDescriptorProto.TYPE_INT32,
    "int64": descriptor_pb2.FieldDescriptorProto.TYPE_INT64,
    "bytes": descriptor_pb2.FieldDescriptorProto.TYPE_BYTES,
}


def _add_field(
    message: descriptor_pb2.DescriptorProto, name: str, number: int, type_name: str
) -> None:
    field = message.field.add(name=name, number=number, json_name=name)
    if type_name.startswith("{"):  # map<string, T>: a repeated nested entry message
        entry = message.nested_type.add(name=f"{name[0].upper()}{name[1:]}Entry")
        entry.options.map_entry = True
        _add_field(entry, "key", 1, "string")
        _add_field(entry, "value", 2, type_name[1:-1])
        field.label = descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
        field.type = descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE
        field.type_name = f".{_PACKAGE}.{message.name}.{entry.name}"
        return
    repeated = type_name.startswith("[")
    base = type_name.strip("[]?")
    field.label = (
        descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
        if repeated
        else descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
    )
    if base in _SCALARS:
        field.type = _SCALARS[base]
    else:
        field.type = descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE
        field.type_name = f".{_PACKAGE}.{base}"


def _message_classes() -> dict[str, type[Message]]:
    file = descriptor_pb2.FileDescriptorProto(
        name="volcano_guard_sandbox_k8s.proto", package=_PACKAGE, syntax="proto2"
    )
    for name, fields in _MESSAGES.items():
        message = file.message_type.add(name=name)
        for field_name, (number, type_name) in fields.items():
            _add_field(message, field_name, number, type_name)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.{name}"))
        for name in _MESSAGES
    }


_CLASSES = _message_classes()


def decode(body: bytes) -> tuple[tuple[str, str], dict[str, Any]]:
    """A protobuf request body -> ((apiVersion, kind), the object as JSON would carry it)."""
    if not body.startswith(MAGIC):
        raise ProtobufError("protobuf body does not start with the Kubernetes magic k8s\\0")
    envelope = _parse("Unknown", body[len(MAGIC) :])
    type_meta = envelope.typeMeta  # type: ignore[attr-defined]
    api_version, kind = type_meta.apiVersion, type_meta.kind
    message = DECODABLE.get((api_version, kind))
    if message is None:
        raise ProtobufError(
            f"the sandbox decodes {MEDIA_TYPE} only for "
            f"{', '.join(dict.fromkeys(kind for _, kind in DECODABLE))} (v1), "
            f"not {kind} ({api_version}); "
            "send application/json",
            unsupported=True,
        )
    obj = _to_json(_parse(message, envelope.raw))  # type: ignore[attr-defined]
    return (api_version, kind), {"apiVersion": api_version, "kind": kind, **obj}


def _parse(name: str, data: bytes) -> Message:
    message = _CLASSES[name]()
    try:
        message.ParseFromString(data)
    except DecodeError as exc:
        raise ProtobufError(f"protobuf {name} is malformed: {exc}") from None
    return message


def _to_json(message: Message) -> Any:
    name = message.DESCRIPTOR.name
    if name == "Time":
        return _rfc3339(message) if message.seconds else None  # type: ignore[attr-defined]
    if name == "Quantity":
        return message.string  # type: ignore[attr-defined]
    if name == "IntOrString":
        return message.intVal if message.type == 0 else message.strVal  # type: ignore[attr-defined]
    unknown = _unknown_field_numbers(message)
    if unknown:
        raise ProtobufError(
            f"protobuf {name} has field(s) {', '.join(map(str, unknown))} that the sandbox does "
            "not decode; send application/json (kubectl create -f, kubectl apply)",
            unsupported=True,
        )
    fields = _MESSAGES[name]
    out: dict[str, Any] = {}
    for field, value in message.ListFields():
        type_name = fields[field.name][1]
        if type_name.startswith("{"):
            out[field.name] = {
                key: _value(item, type_name[1:-1]) for key, item in sorted(value.items())
            }
        elif type_name.startswith("["):
            out[field.name] = [_value(item, type_name[1:-1]) for item in value]
        elif value or type_name.endswith("?") or type_name not in _SCALARS:
            out[field.name] = _value(value, type_name)
    return {key: value for key, value in out.items() if value is not None}


def _value(value: Any, type_name: str) -> Any:
    if isinstance(value, Message):
        return _to_json(value)
    if type_name.rstrip("?") == "bytes":  # JSON carries bytes base64-encoded
        return base64.b64encode(value).decode("ascii")
    return value


def _unknown_field_numbers(message: Message) -> list[int]:
    return sorted({field.field_number for field in unknown_fields.UnknownFieldSet(message)})


def _rfc3339(time: Any) -> str:
    moment = datetime.datetime.fromtimestamp(time.seconds, datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
