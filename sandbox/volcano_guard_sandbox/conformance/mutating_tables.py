"""Upstream's MutatingAdmissionPolicy test tables (k8s.io/apiserver v0.36.3 pkg/admission/plugin/
policy/mutating), read as text as admission_cases reads the other plugins' tables, and run
against the sandbox's plugin (apiserver/mutating_policies, mutating_admission).

- patch/json_patch_test.go TestJSONPatch: one JSONPatch expression applied to a Deployment;
- compilation_test.go TestCompilation: a policy's mutations (helpers `policy`, `jsonPatches`,
  `applyConfigurations`, `mutations`, `variables`, `paramKind`) applied in order, with
  params, a namespace and the request;
- reinvocationcontext_test.go: each test function's calls on a policyReinvokeContext, run on
  reinvocation.PluginReinvocation in order, each assertion checked;
- patch/smd_test.go TestApplyConfiguration: ApplyConfiguration, which the sandbox does not
  model (each case counted so);
- the rest (dispatcher_test.go, plugin_test.go, typeconverter_test.go) run the plugin on Go
  fakes (informers, a REST mapper, OpenAPI type converters): counted unparsed, with why; the
  sandbox's own tests cover the same behaviour over HTTP
  (tests/sandbox/test_sandbox_mutating_policies.py).

A Go object is the JSON its encoding/json gives: a struct field is always there (omitempty does
not drop a struct), so a Deployment has metadata, spec.template.metadata, spec.template.spec
and spec.strategy even when the test sets none of them (`_GO_SKELETONS`). Results are compared
with empty values (null, {}, []) dropped, as equality.Semantic.DeepEqual of the decoded Go
objects does not tell them apart for these fields.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from volcano_guard_sandbox.apiserver.mutating_policies import (
    MutationError,
    apply_json_patch_expression,
)
from volcano_guard_sandbox.apiserver.policy_validation import PolicyInputs
from volcano_guard_sandbox.apiserver.reinvocation import PluginReinvocation
from volcano_guard_sandbox.conformance import golang, runner
from volcano_guard_sandbox.conformance.admission_cases import (
    AdmissionCase,
    AdmissionExtraction,
    AdmissionSource,
    GoObjects,
    _struct_rows,
    extract_admission,
    go_json,
    not_read_functions,
)
from volcano_guard_sandbox.conformance.cases import Unparsed
from volcano_guard_sandbox.conformance.runner import FileReport, Result

_MUTATING = "pkg/admission/plugin/policy/mutating/"
_REVISION = "v0.36.3"

MUTATING_NOT_MODELLED: Mapping[str, str] = {
    "apply configuration": "ApplyConfiguration mutations (structured-merge-diff of an Object{...} "
    "built without the kind's schema): refused when a policy is written",
    "strict decoding": "the strict decoding of the patched object into its Go type (an "
    "unknown field): the sandbox has no schema of the kinds' fields",
    "authorizer": "authorizer checks: the sandbox has no authorizer to ask (refused when a "
    "policy that uses one is written)",
}

_SKELETON_POD_TEMPLATE = {"metadata": {"creationTimestamp": None}, "spec": {"containers": None}}
# encoding/json of the Go types these tables build, with nothing set.
_GO_SKELETONS: Mapping[str, Any] = {
    "appsv1.Deployment": {
        "metadata": {"creationTimestamp": None},
        "spec": {"template": _SKELETON_POD_TEMPLATE, "strategy": {}},
        "status": {},
    },
}
_DEPLOYMENT_KIND = {"group": "apps", "version": "v1", "kind": "Deployment"}
_DEPLOYMENT_RESOURCE = {"group": "apps", "version": "v1", "resource": "deployments"}


def _merged(base: Any, over: Any) -> Any:
    if isinstance(base, dict) and isinstance(over, dict):
        merged = dict(base)
        for key, value in over.items():
            merged[key] = _merged(base.get(key), value)
        return merged
    return copy.deepcopy(over)


def go_encoded(value: Any) -> Any:
    """A Go object read by GoObjects as encoding/json writes it (with its skeleton)."""
    if isinstance(value, dict) and value.get("__type__") in _GO_SKELETONS:
        return _merged(_GO_SKELETONS[value["__type__"]], go_json(value))
    return go_json(value)


def without_empty(value: Any) -> Any:
    """value with null, {} and [] dropped, recursively (as an unset Go field)."""
    if isinstance(value, dict):
        kept = {k: without_empty(v) for k, v in value.items()}
        return {k: v for k, v in kept.items() if v not in (None, {}, [])}
    if isinstance(value, list):
        return [without_empty(v) for v in value]
    return value


_PATCH_TYPES = {f"v1.PatchType{t}": t for t in ("JSONPatch", "ApplyConfiguration")}


def _without_type_arguments(source: str) -> str:
    """`ptr.To[int32](x)` as `ptr.To(x)`: the Go reader has no generic instantiation."""
    return re.sub(r"\bptr\.To\[\w+\]\(", "ptr.To(", source)


class _MutatingValues(GoObjects):
    """GoObjects with `ptr.To[T](x)` (x) and the tables' policy helpers."""

    def name(self, dotted: str) -> Any:
        if dotted in _PATCH_TYPES:
            return _PATCH_TYPES[dotted]
        return super().name(dotted)

    def call(self, node: golang.Call) -> Any:
        name = node.function.dotted if isinstance(node.function, golang.Name) else ""
        if name.startswith("ptr.To"):
            return self(node.arguments[0])
        return super().call(node)


def _policy(name: str) -> dict[str, Any]:
    return {"name": name, "spec": {"mutations": [], "variables": []}}


def _jsonpatches(policy: dict[str, Any], *patches: Any) -> dict[str, Any]:
    for patch in patches:
        expression = patch.get("Expression", "")
        policy["spec"]["mutations"].append(
            {"patchType": "JSONPatch", "jsonPatch": {"expression": expression}}
        )
    return policy


def _apply_configurations(policy: dict[str, Any], *expressions: str) -> dict[str, Any]:
    for expression in expressions:
        policy["spec"]["mutations"].append(
            {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": expression}}
        )
    return policy


def _mutations(policy: dict[str, Any], *mutations: Any) -> dict[str, Any]:
    for mutation in mutations:
        if mutation.get("PatchType") == "JSONPatch":
            _jsonpatches(policy, mutation["JSONPatch"])
        else:
            _apply_configurations(
                policy, (mutation.get("ApplyConfiguration") or {}).get("Expression", "")
            )
    return policy


def _variables(policy: dict[str, Any], *variables: Any) -> dict[str, Any]:
    policy["spec"]["variables"] += [
        {"name": v.get("Name", ""), "expression": v.get("Expression", "")} for v in variables
    ]
    return policy


def _param_kind(policy: dict[str, Any], kind: Any) -> dict[str, Any]:
    policy["spec"]["paramKind"] = {"apiVersion": kind.get("APIVersion"), "kind": kind.get("Kind")}
    return policy


_POLICY_HELPERS: Mapping[str, Callable[..., Any]] = {
    "policy": _policy,
    "jsonPatches": _jsonpatches,
    "applyConfigurations": _apply_configurations,
    "mutations": _mutations,
    "variables": _variables,
    "paramKind": _param_kind,
}


def _mutation_case(
    file: str, function: str, index: int, case: Mapping[str, Any], policy: Mapping[str, Any]
) -> AdmissionCase:
    """A row: its policy's mutations applied to its object, with what it needs that the
    sandbox does not model (ApplyConfiguration, an expected strict decoding error, the
    authorizer)."""
    mutations = policy["spec"]["mutations"]
    needs = set()
    if any(m["patchType"] == "ApplyConfiguration" for m in mutations):
        needs.add("apply configuration")
    if "strict decoding" in str(case.get("expectedErr") or ""):
        needs.add("strict decoding")
    if any(re.search(r"\bauthorizer\b", json.dumps(m)) for m in mutations):
        needs.add("authorizer")
    inputs = {
        "policy": policy,
        "object": go_encoded(case.get("object")),
        "oldObject": go_encoded(case.get("oldObject")),
        "params": go_json(case.get("params")),
        "namespace": go_json(case.get("namespace")),
    }
    name = case.get("name", f"[{index}]")
    return AdmissionCase(
        file, function, name, "mutation", inputs, _expected(case), frozenset(needs)
    )


def _expected(case: Mapping[str, Any]) -> Any:
    if case.get("expectedErr"):
        return ("error", case["expectedErr"])
    return ("object", without_empty(go_encoded(case.get("expectedResult"))))


def read_json_patch(file: str, source: str) -> AdmissionExtraction:
    """TestJSONPatch: expression, object, expectedResult or expectedErr."""
    out, function = AdmissionExtraction(file), "TestJSONPatch"
    source = _without_type_arguments(source)
    for index, _, case in _struct_rows(
        out,
        source,
        function,
        "tests",
        lambda span: _MutatingValues(golang.local_values(source, span)),
    ):
        policy = _jsonpatches(_policy(""), {"Expression": str(case.get("expression", ""))})
        out.add(_mutation_case(file, function, index, case, policy))
    return out


def read_compilation(file: str, source: str) -> AdmissionExtraction:
    """TestCompilation: a policy's mutations applied in order."""
    out, function = AdmissionExtraction(file), "TestCompilation"
    source = _without_type_arguments(source)
    for index, _, case in _struct_rows(
        out,
        source,
        function,
        "testCases",
        lambda span: _MutatingValues(golang.local_values(source, span), _POLICY_HELPERS),
    ):
        policy = case.get("policy") or _policy("")
        out.add(_mutation_case(file, function, index, case, policy))
    return out


def read_apply_configuration(file: str, source: str) -> AdmissionExtraction:
    """TestApplyConfiguration: each case's name; every one needs ApplyConfiguration."""
    out, function = AdmissionExtraction(file), "TestApplyConfiguration"
    span = golang.function_body(source, function)
    if span is None:
        out.unparsed.append(Unparsed(function, "*", f"no function {function}"))
        return out
    body = source[span[0] : span[1]]
    for match in re.finditer(r"^\t\t\tname:\s+\"((?:[^\"\\]|\\.)*)\"", body, re.M):
        needs = frozenset({"apply configuration"})
        out.add(
            AdmissionCase(
                file, function, golang.unquote(f'"{match.group(1)}"'), "mutation", {}, None, needs
            )
        )
    return out


# reinvocationcontext_test.go: policyReinvokeContext's methods, as reinvocation.py names them.
_REINVOKE_METHODS = {
    "SetLastPolicyInvocationOutput": "set_last_output",
    "RequireReinvokingPreviouslyInvokedPlugins": "require_reinvoking_previously_invoked",
    "AddReinvocablePolicyToPreviouslyInvoked": "add_previously_invoked",
    "IsOutputChangedSinceLastPolicyInvocation": "output_changed",
    "ShouldReinvoke": "should_reinvoke",
}
_REINVOKE_STEP = re.compile(r"^\t(?:assert\.(True|False)\(t, )?rc\.(\w+)\((\w*)\)\)?$", re.M)


def read_reinvocation(file: str, source: str) -> AdmissionExtraction:
    """Each test function: its calls on the context in order, an assertion's expected answer
    with its call. A key and an object are their Go variable's literal (two objects are equal
    when their literals are, as DeepEqual of these ConfigMaps)."""
    out = AdmissionExtraction(file)
    for match in re.finditer(r"^func (Test\w+)\(t \*testing\.T\) \{", source, re.M):
        function = match.group(1)
        span = golang.function_body(source, function)
        if span is None:
            continue
        body = source[span[0] : span[1]]
        literals = dict(re.findall(r"^\t(\w+) := (.+)$", body, re.M))
        steps = []
        for asserted, method, argument in _REINVOKE_STEP.findall(body):
            if method not in _REINVOKE_METHODS:
                out.unparsed.append(Unparsed(function, "*", f"unknown method {method}"))
                break
            value = literals.get(argument, argument) if argument else None
            steps.append((_REINVOKE_METHODS[method], value, asserted or None))
        else:
            out.add(AdmissionCase(file, function, "steps", "reinvocation", {"steps": steps}, None))
    return out


MUTATING_SOURCES: Sequence[AdmissionSource] = (
    AdmissionSource(_MUTATING + "patch/json_patch_test.go", read_json_patch, revision=_REVISION),
    AdmissionSource(_MUTATING + "compilation_test.go", read_compilation, revision=_REVISION),
    AdmissionSource(_MUTATING + "patch/smd_test.go", read_apply_configuration, revision=_REVISION),
    AdmissionSource(
        _MUTATING + "dispatcher_test.go",
        not_read_functions(
            "not read yet: the dispatcher on Go fakes (informers, a REST mapper, a type "
            "converter); the sandbox's HTTP tests cover its order and reinvocation"
        ),
        revision=_REVISION,
    ),
    AdmissionSource(
        _MUTATING + "plugin_test.go",
        not_read_functions(
            "not read yet: the plugin end to end on Go fakes (an OpenAPI type converter), "
            "not a table"
        ),
        revision=_REVISION,
    ),
    AdmissionSource(
        _MUTATING + "reinvocationcontext_test.go", read_reinvocation, revision=_REVISION
    ),
    AdmissionSource(
        _MUTATING + "patch/typeconverter_test.go",
        not_read_functions(
            "the OpenAPI type converter of ApplyConfiguration, which the sandbox does not model"
        ),
        revision=_REVISION,
    ),
)


# -- running ------------------------------------------------------------------------------------


def _mutate(inputs: Mapping[str, Any]) -> tuple[str, Any]:
    """The policy's JSONPatch mutations applied in order, as compilation_test.go's loop (a
    CREATE of a Deployment in its namespace)."""
    spec = inputs["policy"]["spec"]
    namespace = inputs.get("namespace")
    request = {
        "kind": _DEPLOYMENT_KIND,
        "resource": _DEPLOYMENT_RESOURCE,
        "requestKind": _DEPLOYMENT_KIND,
        "requestResource": _DEPLOYMENT_RESOURCE,
        "operation": "CREATE",
        "namespace": ((namespace or {}).get("metadata") or {}).get("name", ""),
    }
    obj = inputs["object"]
    try:
        for mutation in spec["mutations"]:
            patched = PolicyInputs(
                obj, inputs.get("oldObject"), request, inputs.get("params"), namespace
            )
            expression = mutation["jsonPatch"]["expression"]
            obj = apply_json_patch_expression(expression, patched, spec.get("variables") or ())
    except MutationError as exc:
        return ("error", str(exc))
    return ("object", without_empty(obj))


def _reinvoke(steps: Sequence[tuple[str, Any, str | None]]) -> tuple[bool, str, str]:
    """The calls on a fresh policy context; each assertion's answer as expected."""
    context = PluginReinvocation()
    for number, (method, argument, asserted) in enumerate(steps):
        answer = getattr(context, method)(*(() if argument is None else (argument,)))
        if asserted is not None and answer is not (asserted == "True"):
            return False, f"step {number} {method}: {asserted}", f"{answer}"
    return True, "every assertion", "every assertion"


def run_mutation_case(case: AdmissionCase) -> Result:
    base = {"file": case.file, "id": case.id, "expression": case.kind}
    if case.needs:
        reason = "; ".join(MUTATING_NOT_MODELLED[need] for need in sorted(case.needs))
        return Result(**base, verdict="not modelled", category=reason)
    if case.kind == "reinvocation":
        passed, expected, got = _reinvoke(case.inputs["steps"])
    else:
        passed, expected, got = _mutation(case)
    return Result(
        **base,
        verdict="passed" if passed else "failed",
        expected=expected,
        got=got,
        category="" if passed else case.kind,
    )


def _mutation(case: AdmissionCase) -> tuple[bool, str, str]:
    expected, got = case.expected, _mutate(case.inputs)
    if expected[0] == "error":
        passed = got[0] == "error" and expected[1] in got[1]
    else:
        passed = got == expected
    return passed, repr(expected), repr(got)


def run_mutating_folder(
    folder: Path, sources: Sequence[AdmissionSource] = MUTATING_SOURCES
) -> list[FileReport]:
    """Every mutating-policy source under folder; a missing file is an OSError naming it."""
    return [
        runner.run_extraction(
            extract_admission(source, (folder / source.file).read_text("utf-8")),
            run_mutation_case,
        )
        for source in sources
    ]
