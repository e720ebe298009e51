"""The sandbox runs the admission chain as kube-apiserver v1.32 does: which webhooks apply, the
AdmissionReview it sends over verified TLS, and what it does with the answer or its absence.
A scripted webhook (real TLS, the certs fixture's CA) stands in for the guard here; the guard
itself behind the shipped configurations is in test_admission_e2e.py."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest

from tests.conftest import NAMESPACE, SERVICE
from tests.sandbox.admission_chain import POD_RULE, PODS, VALIDATING, Box, ScriptedWebhook, pod
from volcano_guard_sandbox.apiserver import matching
from volcano_guard_sandbox.apiserver.authn import AUTHENTICATED, TokenFileError, load_token_file
from volcano_guard_sandbox.apiserver.endpoints import ServiceEndpoints
from volcano_guard_sandbox.apiserver.runner import running
from volcano_guard_sandbox.apiserver.server import SandboxSettings

# -- which webhooks apply ----------------------------------------------------------------------


def attributes(**overrides: Any) -> matching.Attributes:
    base: dict[str, Any] = dict(
        operation="CREATE",
        group="",
        version="v1",
        resource="pods",
        kind=("", "v1", "Pod"),
        namespace="team-a",
        name="p1",
        user=matching.User("alice"),
        object=pod(),
    )
    return matching.Attributes(**{**base, **overrides})


@pytest.mark.parametrize(
    ("rule", "request_fields", "matches"),
    [
        (POD_RULE, {}, True),
        ({**POD_RULE, "operations": ["UPDATE"]}, {}, False),
        ({**POD_RULE, "resources": ["pods"]}, {"subresource": "binding"}, False),
        ({**POD_RULE, "resources": ["pods/binding"]}, {"subresource": "binding"}, True),
        ({**POD_RULE, "resources": ["pods/*"]}, {"subresource": "status"}, True),
        ({**POD_RULE, "resources": ["*"]}, {"subresource": "status"}, False),
        ({**POD_RULE, "resources": ["*/*"]}, {"subresource": "status"}, True),
        ({**POD_RULE, "apiGroups": ["*"], "apiVersions": ["*"]}, {}, True),
        ({**POD_RULE, "apiVersions": ["v1beta1"]}, {}, False),
        ({**POD_RULE, "scope": "Cluster"}, {}, False),
        ({**POD_RULE, "scope": "Namespaced"}, {}, True),
        # A Namespace is cluster-scoped though its namespace is its own name.
        (
            {**POD_RULE, "resources": ["namespaces"], "scope": "Cluster"},
            {"resource": "namespaces", "namespace": "team-a"},
            True,
        ),
        (
            {**POD_RULE, "resources": ["namespaces"], "scope": "Namespaced"},
            {"resource": "namespaces", "namespace": "team-a"},
            False,
        ),
    ],
)
def test_rules_match_as_the_apiserver_matches_them(rule, request_fields, matches):
    assert matching.rule_matches(rule, attributes(**request_fields)) is matches


def test_namespace_selector_reads_the_namespace_labels_and_its_name_label():
    selector = {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}
        ]
    }
    system = attributes(
        namespace="kube-system", namespace_labels={"kubernetes.io/metadata.name": "kube-system"}
    )
    team = attributes(namespace_labels={"kubernetes.io/metadata.name": "team-a"})
    node = attributes(resource="nodes", namespace="", namespace_labels={})
    assert not matching.namespace_matches(selector, system)
    assert matching.namespace_matches(selector, team)
    # A cluster-scoped object other than a Namespace is never exempted by namespaceSelector.
    assert matching.namespace_matches({"matchLabels": {"x": "y"}}, node)


def test_object_selector_matches_the_new_or_the_old_object():
    selector = {"matchLabels": {"inject": "true"}}
    assert matching.object_matches(selector, attributes(object=pod(inject="true")))
    assert matching.object_matches(
        selector, attributes(operation="UPDATE", object=pod(), old_object=pod(inject="true"))
    )
    assert not matching.object_matches(selector, attributes(object=pod(inject="false")))
    assert not matching.object_matches(
        selector, attributes(operation="DELETE", object=None, old_object=pod())
    )


def test_match_conditions_false_skips_and_errors_follow_the_failure_policy():
    hook = {
        "rules": [POD_RULE],
        "matchConditions": [
            {"name": "volcano", "expression": "object.spec.schedulerName == 'volcano'"}
        ],
    }
    plain = attributes(object={**pod(), "spec": {**pod()["spec"], "schedulerName": "default"}})
    assert not matching.should_call(hook, plain)
    broken = {**hook, "matchConditions": [{"name": "x", "expression": "object.spec.nope == 1"}]}
    with pytest.raises(matching.ConditionError):
        matching.should_call(broken, attributes())
    assert not matching.should_call({**broken, "failurePolicy": "Ignore"}, attributes())


def test_configurations_are_called_by_name_then_in_their_order():
    configurations = [
        {"metadata": {"name": "b"}, "webhooks": [{"name": "b1"}, {"name": "b0"}]},
        {"metadata": {"name": "a"}, "webhooks": [{"name": "a1"}]},
    ]
    assert [hook["name"] for _, hook in matching.configured_webhooks(configurations)] == [
        "a1",
        "b1",
        "b0",
    ]


# -- the call ----------------------------------------------------------------------------------


async def test_the_review_is_what_the_apiserver_sends_over_verified_tls(box, scripted):
    await box.register("validating", "guard", box.hook("v.example.com", timeoutSeconds=3))
    status, _, _ = await box.call(
        "POST", f"{PODS}?fieldManager=kubectl-create", pod(), token="alice-token"
    )
    assert status == 201
    ((path, query, review),) = scripted.calls
    assert (path, query) == ("/validate", {"timeout": "3s"})
    assert review["apiVersion"] == "admission.k8s.io/v1" and review["kind"] == "AdmissionReview"
    request = review["request"]
    assert (
        request["kind"] == request["requestKind"] == {"group": "", "version": "v1", "kind": "Pod"}
    )
    assert request["resource"] == {"group": "", "version": "v1", "resource": "pods"}
    assert (request["operation"], request["namespace"], request["name"]) == (
        "CREATE",
        "team-a",
        "p1",
    )
    assert request["userInfo"] == {
        "username": "alice",
        "uid": "a1",
        "groups": ["team-a", "devs", AUTHENTICATED],
    }
    assert request["options"] == {
        "kind": "CreateOptions",
        "apiVersion": "meta.k8s.io/v1",
        "fieldManager": "kubectl-create",
    }
    assert request["dryRun"] is False and request["oldObject"] is None
    # Validating webhooks see the object as it will be stored: uid and defaults set.
    assert request["object"]["metadata"]["uid"]
    assert request["object"]["spec"]["schedulerName"] == "default-scheduler"


async def test_a_binding_is_sent_as_a_create_of_the_pods_binding_subresource(box, scripted):
    rule = {**POD_RULE, "resources": ["pods/binding"]}
    await box.register("validating", "bindings", box.hook("b.example.com", rules=[rule]))
    await box.call("POST", PODS, pod())
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "p1"},
        "target": {"kind": "Node", "name": "node-1"},
    }
    status, _, _ = await box.call("POST", f"{PODS}/p1/binding", binding, token="alice-token")
    assert status == 201
    (request,) = scripted.requests()
    assert request["kind"] == {"group": "", "version": "v1", "kind": "Binding"}
    assert (request["resource"]["resource"], request["subResource"]) == ("pods", "binding")
    assert request["object"]["target"]["name"] == "node-1"


async def test_a_delete_sends_the_old_object_and_its_options(box, scripted):
    await box.call("POST", PODS, pod())
    await box.register("validating", "guard", box.hook("v.example.com"))
    _, stored, _ = await box.call("GET", f"{PODS}/p1")
    # A stale UID fails its precondition before any webhook is asked.
    status, _, _ = await box.call("DELETE", f"{PODS}/p1", {"preconditions": {"uid": "not-the-uid"}})
    assert status == 409 and not scripted.calls
    uid = stored["metadata"]["uid"]
    status, _, _ = await box.call("DELETE", f"{PODS}/p1", {"preconditions": {"uid": uid}})
    assert status == 200
    (request,) = scripted.requests()
    assert request["operation"] == "DELETE" and request["object"] is None
    assert request["oldObject"]["metadata"]["uid"] == uid
    assert request["options"]["kind"] == "DeleteOptions"
    assert request["options"]["preconditions"] == {"uid": uid}


async def test_webhook_configuration_writes_are_never_sent_to_webhooks(box, scripted):
    rule = {"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"], "resources": ["*"]}
    await box.register("validating", "everything", box.hook("v.example.com", rules=[rule]))
    scripted.answer = lambda request: {"allowed": False}
    await box.register("validating", "another", box.hook("w.example.com"))
    assert not scripted.calls


async def test_equivalent_match_policy_adds_nothing_where_one_version_is_served(box, scripted):
    # The sandbox serves pods in v1 only, so no other version is equivalent to it.
    rule = {**POD_RULE, "apiVersions": ["v1beta1"]}
    for policy in ("Equivalent", "Exact"):
        await box.register(
            "validating",
            f"old-{policy.lower()}",
            box.hook(f"{policy.lower()}.example.com", rules=[rule], matchPolicy=policy),
        )
    status, _, _ = await box.call("POST", PODS, pod())
    assert status == 201 and not scripted.calls


async def test_without_a_token_file_every_request_is_an_administrator(certs, scripted):
    settings = SandboxSettings(
        services=ServiceEndpoints({(NAMESPACE, SERVICE, 443): [("127.0.0.1", scripted.port)]})
    )
    async with running(settings=settings) as sandbox, aiohttp.ClientSession() as session:
        sandbox.seed([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}])
        box = Box(sandbox.url, session, base64.b64encode(certs.ca_file.read_bytes()).decode())
        await box.register("validating", "guard", box.hook("v.example.com"))
        status, _, _ = await box.call("POST", PODS, pod())
    assert status == 201
    assert scripted.requests()[0]["userInfo"] == {
        "username": "sandbox-admin",
        "groups": ["system:masters", AUTHENTICATED],
    }


# -- the answer --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "code", "message"),
    [
        (
            {"code": 403, "message": "no requests", "reason": "Forbidden"},
            403,
            'admission webhook "v.example.com" denied the request: no requests',
        ),
        (
            {"code": 200, "message": "odd"},
            400,
            'admission webhook "v.example.com" denied the request: odd',
        ),
        ({"reason": "TooBig"}, 400, 'admission webhook "v.example.com" denied the request: TooBig'),
        (None, 400, 'admission webhook "v.example.com" denied the request without explanation'),
    ],
)
async def test_a_refusal_reaches_the_client_as_the_apiserver_returns_it(
    box, scripted, status, code, message
):
    await box.register("validating", "guard", box.hook("v.example.com"))
    scripted.answer = lambda request: {"allowed": False, **({"status": status} if status else {})}
    answer_status, body, _ = await box.call("POST", PODS, pod())
    assert (answer_status, body["code"], body["message"]) == (code, code, message)
    _, listed, _ = await box.call("GET", PODS)
    assert listed["items"] == []


async def test_mutations_apply_in_order_and_if_needed_webhooks_are_called_again(box, scripted):
    def answer(request: dict[str, Any]) -> dict[str, Any]:
        labels = request["object"]["metadata"].get("labels") or {}
        if request["name"] == "p1" and "first" not in labels:
            patch = [{"op": "add", "path": "/metadata/labels/first", "value": "yes"}]
        elif "second" not in labels and "first" in labels:
            patch = [{"op": "add", "path": "/metadata/labels/second", "value": "yes"}]
        else:
            return {"allowed": True}
        return {
            "allowed": True,
            "patchType": "JSONPatch",
            "patch": base64.b64encode(json.dumps(patch).encode()).decode(),
        }

    scripted.answer = answer
    await box.register("mutating", "b-second", box.hook("second.example.com", path="/second"))
    await box.register(
        "mutating",
        "a-first",
        box.hook("first.example.com", path="/first", reinvocationPolicy="IfNeeded"),
    )
    status, created, _ = await box.call("POST", PODS, pod())
    assert status == 201
    assert created["metadata"]["labels"] == {"first": "yes", "second": "yes"}
    # a-first (by name), then b-second changed the object, so a-first (IfNeeded) runs again.
    assert [path for path, _, _ in scripted.calls] == ["/first", "/second", "/first"]
    annotations = (await box.audit())[-1]["annotations"]
    assert json.loads(annotations["mutation.webhook.admission.k8s.io/round_0_index_1"]) == {
        "configuration": "b-second",
        "webhook": "second.example.com",
        "mutated": True,
    }
    assert "mutation.webhook.admission.k8s.io/round_1_index_0" in annotations


async def test_a_patch_of_200_kb_is_read_whole_and_applied(box, scripted):
    """An answer of many TCP segments (a patch filling requests of 1,000 containers is about
    140 KB): the sandbox once read the first ~100 KB and failed the call as invalid JSON."""
    value = "x" * 200_000  # within the 256 KiB of annotations an object may carry
    patch = [{"op": "add", "path": "/metadata/annotations", "value": {"big": value}}]
    scripted.answer = lambda request: {
        "allowed": True,
        "patchType": "JSONPatch",
        "patch": base64.b64encode(json.dumps(patch).encode()).decode(),
    }
    await box.register("mutating", "big", box.hook("big.example.com", path="/big"))
    status, created, _ = await box.call("POST", PODS, pod())
    assert status == 201, created
    assert created["metadata"]["annotations"]["big"] == value


async def test_warnings_become_warning_headers_and_audit_annotations_are_kept(box, scripted):
    await box.register("validating", "guard", box.hook("v.example.com"))
    scripted.answer = lambda request: {
        "allowed": True,
        "warnings": ["no memory limit"],
        "auditAnnotations": {"checked": "resourceRequests"},
    }
    status, _, warnings = await box.call("POST", PODS, pod())
    assert status == 201 and warnings == ['299 - "no memory limit"']
    event = (await box.audit())[-1]
    assert event["annotations"] == {"v.example.com/checked": "resourceRequests"}
    assert (event["user"], event["verb"], event["name"], event["code"]) == (
        "kubernetes-admin",
        "create",
        "p1",
        201,
    )


async def test_match_condition_errors_refuse_under_fail_as_forbidden(box, scripted):
    condition = {"name": "bad", "expression": "object.spec.nothing.here == 1"}
    await box.register(
        "validating", "guard", box.hook("v.example.com", matchConditions=[condition])
    )
    status, body, _ = await box.call("POST", PODS, pod())
    assert status == 403 and body["message"].startswith('pods "p1" is forbidden: ')
    assert not scripted.calls


async def test_a_configuration_with_a_condition_that_does_not_compile_is_refused(box):
    status, body, _ = await box.call(
        "POST",
        VALIDATING,
        {
            "metadata": {"name": "bad"},
            "webhooks": [
                box.hook("v.example.com", matchConditions=[{"name": "x", "expression": "object.("}])
            ],
        },
    )
    assert status == 422 and "compilation failed" in body["message"]


# -- failure policies ---------------------------------------------------------------------------


async def _slow(request: dict[str, Any]) -> dict[str, Any]:
    await asyncio.sleep(3)
    return {"allowed": True}


FAILURES: dict[str, Callable[[Box, ScriptedWebhook], dict[str, Any]]] = {
    "timeout": lambda box, hook: box.hook("v.example.com", timeoutSeconds=1),
    "refused": lambda box, hook: {
        **box.hook("v.example.com"),
        "clientConfig": {"url": "https://127.0.0.1:1/validate", "caBundle": box.ca_bundle},
    },
    "wrong CA": lambda box, hook: {
        **box.hook("v.example.com"),
        "clientConfig": {
            **box.hook("v.example.com")["clientConfig"],
            "caBundle": base64.b64encode(b"not a certificate").decode(),
        },
    },
    "bad response": lambda box, hook: box.hook("v.example.com"),
    "unmapped service": lambda box, hook: {
        **box.hook("v.example.com"),
        "clientConfig": {
            "service": {"namespace": "elsewhere", "name": "x"},
            "caBundle": box.ca_bundle,
        },
    },
}


@pytest.mark.parametrize("failure", list(FAILURES))
@pytest.mark.parametrize("policy", ["Fail", "Ignore"])
async def test_a_failed_call_follows_the_failure_policy(box, scripted, failure, policy):
    scripted.answer = {
        "timeout": _slow,
        "bad response": lambda request: {"allowed": True, "uid": "another"},
    }.get(failure, scripted.answer)
    await box.register(
        "validating", "guard", {**FAILURES[failure](box, scripted), "failurePolicy": policy}
    )
    status, body, _ = await box.call("POST", PODS, pod())
    if policy == "Fail":
        assert status == 500 and body["reason"] == "InternalError"
        assert body["message"].startswith(
            'Internal error occurred: failed calling webhook "v.example.com": '
        )
    else:
        assert status == 201
        annotations = (await box.audit())[-1]["annotations"]
        assert annotations == {
            "failed-open.validating.webhook.admission.k8s.io/round_0_index_0": "v.example.com"
        }


async def test_a_refused_connection_is_said_as_gos_dialer_says_it(box, scripted):
    await box.register("validating", "guard", {**FAILURES["refused"](box, scripted)})
    status, body, _ = await box.call("POST", PODS, pod())
    assert status == 500
    assert body["message"] == (
        'Internal error occurred: failed calling webhook "v.example.com": failed to call '
        'webhook: Post "https://127.0.0.1:1/validate?timeout=10s": dial tcp 127.0.0.1:1: '
        "connect: connection refused"
    )


async def test_an_untrusted_certificate_is_said_as_gos_tls_says_it(box, scripted, tmp_path):
    from volcano_guard.certs.generate import generate

    other = generate("elsewhere", "n", tmp_path, days=1)  # a CA that signed nothing it meets
    hook = box.hook("v.example.com")
    await box.register(
        "validating",
        "guard",
        {
            **hook,
            "clientConfig": {
                **hook["clientConfig"],
                "caBundle": base64.b64encode(other.ca_file.read_bytes()).decode(),
            },
        },
    )
    status, body, _ = await box.call("POST", PODS, pod())
    assert status == 500
    assert body["message"].endswith(
        "tls: failed to verify certificate: x509: certificate signed by unknown authority"
    )


# -- users -------------------------------------------------------------------------------------


async def test_an_unknown_or_missing_token_gets_401(box):
    async with aiohttp.ClientSession() as anonymous:
        for headers in ({"Authorization": "Bearer nope"}, {}):
            async with anonymous.get(box.url + PODS, headers=headers) as response:
                assert response.status == 401
                assert (await response.json())["reason"] == "Unauthorized"


def test_the_token_file_is_read_as_the_apiserver_reads_it(tmp_path):
    tokens = tmp_path / "tokens.csv"
    tokens.write_text('t1,alice,u1\n\n,skipped,u0\nt2,bob,u2,"g1,g2"\nt1,carol,u3\n')
    users = load_token_file(tokens)
    assert users["t1"] == matching.User("carol", "u3", (AUTHENTICATED,))  # the last one wins
    assert users["t2"].groups == ("g1", "g2", AUTHENTICATED)
    assert set(users) == {"t1", "t2"}
    tokens.write_text("t1,alice\n")
    with pytest.raises(TokenFileError, match="at least 3 columns"):
        load_token_file(tokens)
