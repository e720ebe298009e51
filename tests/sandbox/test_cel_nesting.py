"""How deep a CEL expression may nest. Kubernetes 1.30 keeps cel-go v0.17.8's parser limit of
250 (parser.go maxRecursionDepth; base.go sets no parser option); cel-expr-python builds cel-cpp's
parser with 32 and no setting, so the sandbox refuses 33 to 250 levels, saying that it does not
model them, rather than as if 1.30 refused them."""

from __future__ import annotations

import json

import aiohttp
import pytest

from volcano_guard_sandbox.apiserver import policy_validation
from volcano_guard_sandbox.apiserver.cel_environment import PARSER_DEPTH
from volcano_guard_sandbox.apiserver.runner import running
from volcano_guard_sandbox.conformance import plugin_scenarios

NOT_MODELLED = (
    f"compilation failed: the sandbox does not model expressions nested deeper than {PARSER_DEPTH}"
)


def _sum(terms: int) -> str:
    return " + ".join(["1"] * terms) + " > 0"


def _parenthesized(depth: int) -> str:
    return "(" * depth + "true" + ")" * depth


def _errors(expression: str) -> list[str]:
    return policy_validation.compile_errors({"validations": [{"expression": expression}]})


@pytest.mark.parametrize("expression", [_sum(PARSER_DEPTH - 1), _parenthesized(PARSER_DEPTH)])
def test_an_expression_within_the_sandboxs_depth_compiles(expression):
    assert _errors(expression) == []


@pytest.mark.parametrize("expression", [_sum(40), _parenthesized(PARSER_DEPTH + 1), _sum(250)])
def test_an_expression_nested_past_the_sandboxs_depth_is_refused_as_not_modelled(expression):
    (error,) = _errors(expression)
    assert NOT_MODELLED in error, error
    assert "Kubernetes 1.30 allows 250" in error


async def test_a_policy_nested_past_the_sandboxs_depth_is_a_422_saying_so_over_http():
    policy = plugin_scenarios.policy("deep", [{"expression": _sum(40)}], param_kind=None)
    path = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
    async with running() as served, aiohttp.ClientSession() as session:
        response = await session.post(served.url + path, data=json.dumps(policy))
        status, body = response.status, await response.json()
    assert status == 422, body
    assert NOT_MODELLED in body["message"], body["message"]
