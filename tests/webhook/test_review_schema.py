"""The AdmissionReview envelope is declared as the API server's Go structs define it.

The table below is transcribed from k8s.io/api `admission/v1/types.go` (AdmissionRequest and
Operation) and `authentication/v1/types.go` (UserInfo) at KUBERNETES_API_TAG, and the last
test checks that the source still says so (tests/upstream.py).
"""

from __future__ import annotations

import re
import types
import typing

import msgspec

from tests.upstream import kubernetes_api_file
from volcano_guard.webhook.review import AdmissionRequest, UserInfo

# JSON name -> (Go type, omitempty), for the fields the webhook declares.
ADMISSION_REQUEST = {
    "uid": ("types.UID", False),
    "kind": ("metav1.GroupVersionKind", False),
    "resource": ("metav1.GroupVersionResource", False),
    "subResource": ("string", True),
    "name": ("string", True),
    "namespace": ("string", True),
    "operation": ("Operation", False),
    "userInfo": ("authenticationv1.UserInfo", False),
    "object": ("runtime.RawExtension", True),
    "oldObject": ("runtime.RawExtension", True),
    "dryRun": ("*bool", True),
    "options": ("runtime.RawExtension", True),
}
USER_INFO = {"username": ("string", True), "groups": ("[]string", True)}
OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")


def go_struct_fields(source: str, name: str) -> dict[str, tuple[str, bool]]:
    """JSON name -> (Go type, omitempty) of Go struct `name`'s fields."""
    body = re.search(rf"^type {name} struct {{(.*?)^}}", source, re.M | re.S)
    assert body, f"type {name} is not in the source"
    fields = {}
    for go_type, tag in re.findall(r'^\s+\w+\s+(\S+)\s+`json:"([^"]+)"', body.group(1), re.M):
        json_name, *options = tag.split(",")
        fields[json_name] = (go_type, "omitempty" in options)
    return fields


def declared(struct: type[msgspec.Struct]) -> dict[str, object]:
    hints = typing.get_type_hints(struct, include_extras=True)
    return {field.encode_name: hints[field.name] for field in msgspec.structs.fields(struct)}


def test_the_declared_fields_carry_the_api_server_json_names():
    assert set(declared(AdmissionRequest)) == set(ADMISSION_REQUEST)
    assert set(declared(UserInfo)) == set(USER_INFO)


def test_only_the_raw_extensions_may_be_null():
    """Go's omitempty drops an empty string or a nil pointer, so neither is ever null on the
    wire; a RawExtension without content is written as null."""
    for json_name, hint in declared(AdmissionRequest).items():
        go_type, _ = ADMISSION_REQUEST[json_name]
        nullable = isinstance(hint, types.UnionType) and type(None) in typing.get_args(hint)
        assert nullable == (go_type == "runtime.RawExtension"), json_name


def test_a_field_the_api_server_may_omit_has_a_default():
    """Every omitempty field takes its Go zero value when absent. Of the fields always sent,
    only userInfo has a default too: without one, no user and no group is exempt."""
    fields = {field.encode_name: field for field in msgspec.structs.fields(AdmissionRequest)}
    for json_name, (_, omitempty) in ADMISSION_REQUEST.items():
        assert fields[json_name].required == (not omitempty and json_name != "userInfo"), json_name


def test_operations_are_the_api_constants():
    hint = declared(AdmissionRequest)["operation"]
    assert typing.get_args(hint) == OPERATIONS


def test_the_api_source_still_says_so():
    admission = kubernetes_api_file("admission/v1/types.go")
    fields = go_struct_fields(admission, "AdmissionRequest")
    assert {name: fields[name] for name in ADMISSION_REQUEST} == ADMISSION_REQUEST
    constants = re.findall(r'^\s+\w+\s+Operation = "(\w+)"', admission, re.M)
    assert tuple(constants) == OPERATIONS
    user = go_struct_fields(kubernetes_api_file("authentication/v1/types.go"), "UserInfo")
    assert {name: user[name] for name in USER_INFO} == USER_INFO
