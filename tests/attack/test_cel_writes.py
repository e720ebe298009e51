"""An attacker writing admission policies and webhook configurations to the sandbox over HTTP:
whatever the CEL, the answer is a status (201, or 422 naming the problem), in bounded time,
never a 500 or a write held for minutes; and a request a policy then judges gets an answer."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from volcano_guard_sandbox.apiserver.runner import Sandbox, running

pytestmark = pytest.mark.slow

GROUP = "/apis/admissionregistration.k8s.io/v1"
POLICIES = f"{GROUP}/validatingadmissionpolicies"
BINDINGS = f"{GROUP}/validatingadmissionpolicybindings"
WEBHOOKS = f"{GROUP}/validatingwebhookconfigurations"
CONFIGMAPS = "/api/v1/namespaces/default/configmaps"
ANSWER_WITHIN = 20.0  # seconds: a write the sandbox holds longer counts as a hang


@pytest.fixture
async def sandbox() -> AsyncIterator[tuple[Sandbox, aiohttp.ClientSession]]:
    async with running() as served, aiohttp.ClientSession() as session:
        served.seed([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}])
        yield served, session


async def _send(
    sandbox: tuple[Sandbox, aiohttp.ClientSession], method: str, path: str, body: bytes
) -> tuple[int, Any]:
    served, session = sandbox
    request = session.request(
        method,
        served.url + path,
        data=body,
        headers={"Content-Type": "application/json"},
    )
    async with asyncio.timeout(ANSWER_WITHIN), request as response:
        text = await response.text()
        return response.status, json.loads(text) if text else None


def _policy(name: str, **spec: Any) -> dict[str, Any]:
    rules = [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["*"], "resources": ["configmaps"]}
    ]
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {"matchConstraints": {"resourceRules": rules}, **spec},
    }


def _binding(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }


def _webhook(name: str, expression: str) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": "a.example.com",
                "clientConfig": {"url": "https://127.0.0.1:1/"},
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "matchConditions": [{"name": "c", "expression": expression}],
            }
        ],
    }


async def test_a_policy_of_very_many_variables_is_refused_at_once(sandbox):
    """Each variable is a CEL environment of its own (about 40 ms): 5,000 held the write (and
    the sandbox's event loop) for minutes; past the sandbox's bound it is refused, naming it."""
    variables = [{"name": f"v{i}", "expression": str(i)} for i in range(5_000)]
    policy = _policy("many", variables=variables, validations=[{"expression": "true"}])
    started = time.monotonic()
    status, answer = await _send(sandbox, "POST", POLICIES, json.dumps(policy).encode())
    assert (status, answer["reason"]) == (422, "Invalid")
    assert "spec.variables: Too many: 5000" in answer["message"]
    assert time.monotonic() - started < 5


async def test_a_list_as_a_map_key_fails_the_expression_not_the_request(sandbox):
    """`{dyn([1]): 2}` passes the checker (a dyn key); evaluating it raised TypeError in the
    sandbox's evaluator (Python cannot hash a list), a 500 for the judged request."""
    validations = [
        {"expression": "'%s'.format([{[1]: 2}]) == ''"},
        {"expression": "dyn({dyn([1]): 2}).size() == 1"},
    ]
    for policy in (_policy("keys", validations=validations), _binding("keys")):
        path = POLICIES if policy["kind"] == "ValidatingAdmissionPolicy" else BINDINGS
        status, answer = await _send(sandbox, "POST", path, json.dumps(policy).encode())
        assert status == 201, answer
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    status, answer = await _send(sandbox, "POST", CONFIGMAPS, json.dumps(configmap).encode())
    assert status == 422, answer
    assert (
        "Invalid map key type" in answer["message"] or "unsupported key type" in answer["message"]
    )


@pytest.mark.parametrize(
    "expression",
    [
        "(" * 5000 + "true" + ")" * 5000,
        "[" * 5000 + "1" + "]" * 5000 + " != []",
        "object" + ".a" * 5000 + " == 1",
        "true ? " * 3000 + "true" + " : false" * 3000,
        " + ".join(["1"] * 20_000) + " > 0",
        "!" * 20_001 + "true",
        "-" * 20_000 + "1 > 0",
        " && ".join(["true"] * 20_000),
        "'" + "a" * 2_000_000 + "' != ''",
        "[" + ",".join(["1"] * 200_000) + "].all(x, x == 1)",
    ],
    ids=[
        "parens",
        "lists",
        "members",
        "ternaries",
        "sum",
        "nots",
        "negations",
        "ands",
        "2MB",
        "list",
    ],
)
async def test_deep_and_huge_expressions_are_answered_in_bounded_time(sandbox, expression):
    name = f"deep-{abs(hash(expression)) % 10**8}"
    for path, obj in (
        (POLICIES, _policy(name, validations=[{"expression": expression}])),
        (BINDINGS, _binding(name)),
        (WEBHOOKS, _webhook(name, expression)),
    ):
        status, answer = await _send(sandbox, "POST", path, json.dumps(obj).encode())
        assert status in (201, 422), answer
        assert status == 201 or answer["message"], answer
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}
    status, answer = await _send(sandbox, "POST", CONFIGMAPS, json.dumps(configmap).encode())
    assert status in (201, 403, 422), answer


def _hook(**fields: Any) -> dict[str, Any]:
    configuration = _webhook("shape", "true")
    configuration["webhooks"][0].update(fields)
    return configuration


def _spec(kind: str, spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": "shape"},
        "spec": spec,
    }


@pytest.mark.parametrize(
    ("path", "obj"),
    [
        (WEBHOOKS, _hook(namespaceSelector="x")),
        (WEBHOOKS, _hook(objectSelector={"matchExpressions": ["x"]})),
        (WEBHOOKS, _hook(matchConditions=["true"])),
        (WEBHOOKS, _hook(rules="x")),
        (POLICIES, _spec("ValidatingAdmissionPolicy", {"variables": 5})),
        (POLICIES, _spec("ValidatingAdmissionPolicy", {"validations": 5})),
        (POLICIES, _spec("ValidatingAdmissionPolicy", {"validations": [{"expression": 5}]})),
        (POLICIES, _spec("ValidatingAdmissionPolicy", {"matchConstraints": {"resourceRules": 1}})),
        (BINDINGS, _spec("ValidatingAdmissionPolicyBinding", {"validationActions": "Deny"})),
        (BINDINGS, _spec("ValidatingAdmissionPolicyBinding", {"paramRef": "x"})),
    ],
    ids=lambda value: value if isinstance(value, str) else json.dumps(value)[-60:],
)
async def test_a_field_of_the_wrong_json_type_is_a_bad_request_not_a_500(sandbox, path, obj):
    """kube-apiserver cannot decode such a body into its Go types (400); the sandbox read the
    fields as the types they must be and raised (AttributeError, TypeError: a 500)."""
    status, answer = await _send(sandbox, "POST", path, json.dumps(obj).encode())
    assert (status, answer["reason"]) == (400, "BadRequest"), answer
    kind = obj["kind"]
    said = f'{kind} in version "v1" cannot be handled as a {kind}: json: cannot unmarshal'
    assert said in answer["message"]


async def test_a_variable_holding_an_optional_is_refused_when_written(sandbox):
    """1.30 keeps such a value (typed dyn); cel-expr-python cannot hand it to Python, so the
    sandbox admitted the policy and then raised TypeError for every request it judged (a 500).
    It is refused on write instead, saying what the sandbox does not model."""
    policy = _policy(
        "optional",
        variables=[{"name": "o", "expression": "object.?data.?x"}],
        validations=[{"expression": "!variables.o.hasValue()"}],
    )
    status, answer = await _send(sandbox, "POST", POLICIES, json.dumps(policy).encode())
    assert (status, answer["reason"]) == (422, "Invalid"), answer
    assert "does not model a variable holding an optional value" in answer["message"]
