"""The sandbox's MutatingAdmissionPolicy held to upstream's own tables (Kubernetes 1.36's
pkg/admission/plugin/policy/mutating `*_test.go`, read as text at test time): TestJSONPatch
(patch/json_patch_test.go), TestCompilation (compilation_test.go) and the reinvocation
context's (reinvocationcontext_test.go). Every case passes, or is one the sandbox does not
model (mutating_tables.MUTATING_NOT_MODELLED, with its reason), or is a known failure listed
below with its reason; a listed case that passes fails the test. The readers must keep finding
the cases they find today (MIN_CASES)."""

# The Go tables below keep upstream's long lines.
# ruff: noqa: E501

from __future__ import annotations

import functools

import pytest

from tests.upstream import upstream_file, upstream_root
from volcano_guard_sandbox.commands import main
from volcano_guard_sandbox.conformance.admission_cases import (
    AdmissionCase,
    AdmissionExtraction,
    AdmissionSource,
    extract_admission,
)
from volcano_guard_sandbox.conformance.mutating_tables import (
    MUTATING_SOURCES,
    read_json_patch,
    read_reinvocation,
    run_mutation_case,
)
from volcano_guard_sandbox.conformance.runner import Result

_MUTATING = "pkg/admission/plugin/policy/mutating/"
MIN_CASES = {
    _MUTATING + "patch/json_patch_test.go": 27,
    _MUTATING + "compilation_test.go": 14,
    _MUTATING + "patch/smd_test.go": 12,
    _MUTATING + "dispatcher_test.go": 0,
    _MUTATING + "plugin_test.go": 0,
    _MUTATING + "reinvocationcontext_test.go": 3,
    _MUTATING + "patch/typeconverter_test.go": 0,
}
# The tables that run the plugin on Go fakes count each test function unparsed.
MAX_UNPARSED = {
    _MUTATING + "dispatcher_test.go": 1,
    _MUTATING + "plugin_test.go": 4,
    _MUTATING + "patch/typeconverter_test.go": 1,
}
# Cases the sandbox answers unlike 1.36, by id, with why.
KNOWN_FAILURES: dict[str, str] = {}
# Run by the slow test only: evaluating up to the per-call cost limit takes seconds in Python.
SLOW_CASES = {"compilation_test.go:TestCompilation/jsonPatch with excessive cost"}


@functools.cache
def _extraction(source: AdmissionSource) -> AdmissionExtraction:
    return extract_admission(source, upstream_file(source.project, source.revision, source.path))


def _cases(slow: bool) -> list[AdmissionCase]:
    return [
        case
        for source in MUTATING_SOURCES
        for case in _extraction(source).cases
        if (case.id in SLOW_CASES) == slow
    ]


@functools.cache
def _results() -> tuple[Result, ...]:
    return tuple(run_mutation_case(case) for case in _cases(slow=False))


@pytest.mark.parametrize("path", sorted(MIN_CASES))
def test_each_mutating_table_yields_its_cases(path):
    (source,) = [s for s in MUTATING_SOURCES if s.path == path]
    extraction = _extraction(source)
    assert len(extraction.cases) >= MIN_CASES[path], [u.why for u in extraction.unparsed]
    assert len(extraction.unparsed) <= MAX_UNPARSED.get(path, 0), extraction.unparsed


def test_every_mutating_case_passes_or_is_not_modelled_or_a_known_failure():
    unexpected = [
        f"{r.id}: expected {r.expected} / got {r.got}"
        for r in _results()
        if r.verdict == "failed" and r.id not in KNOWN_FAILURES
    ]
    assert not unexpected, "\n".join(unexpected)
    assert sum(r.verdict == "passed" for r in _results()) >= 36


def test_no_known_mutating_failure_passes_or_is_gone():
    failed = {r.id for r in _results() if r.verdict == "failed"}
    stale = sorted(set(KNOWN_FAILURES) - failed)
    assert not stale, "no longer failing, take them out of KNOWN_FAILURES:\n" + "\n".join(stale)


@pytest.mark.slow  # evaluates a comprehension up to the 1,000,000 per-call cost limit (2 s)
def test_the_excessive_cost_case_stops_at_the_per_call_limit():
    (case,) = _cases(slow=True)
    assert run_mutation_case(case).verdict == "passed"


@pytest.mark.slow  # runs every table again (3 s)
def test_conformance_command_prints_the_mutating_tables_last(capsys):
    root = upstream_root()
    if root is None:
        pytest.skip("no upstream source on this machine")
    assert main(["conformance", str(root)]) == 0
    lines = capsys.readouterr().out.splitlines()
    start = lines.index("mutating admission policy tables (1.36):")
    rows = lines[start + 2 : start + 2 + len(MUTATING_SOURCES)]
    assert [row.split()[0] for row in rows] == [source.file for source in MUTATING_SOURCES]
    total = lines[start + 2 + len(MUTATING_SOURCES)].split()
    assert total[0] == "total" and int(total[1]) >= 37 and int(total[2]) == len(KNOWN_FAILURES)


# The reader and the runner on a table of their own: no upstream source needed.

_JSON_PATCH = """
func TestJSONPatch(t *testing.T) {
	tests := []struct {
		name string
	}{
		{
			name:           "replace",
			expression:     `[JSONPatch{op: "replace", path: "/spec/replicas", value: 3}]`,
			object:         &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1)}},
			expectedResult: &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](3)}},
		},
		{
			name:           "wrongly expected unchanged",
			expression:     `[JSONPatch{op: "replace", path: "/spec/replicas", value: 3}]`,
			object:         &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1)}},
			expectedResult: &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1)}},
		},
		{
			name:        "an error's words",
			expression:  `[JSONPatch{op: "remove", path: "/spec/nothing"}]`,
			object:      &appsv1.Deployment{},
			expectedErr: "Unable to remove nonexistent key: nothing",
		},
		{
			name:           "an initializer",
			expression:     `[JSONPatch{op: "add", path: "/spec", value: Object.spec{replicas: 2}}]`,
			object:         &appsv1.Deployment{},
			expectedResult: &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2)}},
		},
		{
			name:        "strict decoding",
			expression:  `[JSONPatch{op: "add", path: "/spec/replicaz", value: 2}]`,
			object:      &appsv1.Deployment{},
			expectedErr: `strict decoding error: unknown field "spec.replicaz"`,
		},
	}
}
"""


def test_a_json_patch_table_runs_on_go_encoded_objects_and_a_wrong_expectation_fails():
    extraction = read_json_patch("json_patch_test.go", _JSON_PATCH)
    assert not extraction.unparsed
    verdicts = {case.name: run_mutation_case(case).verdict for case in extraction.cases}
    assert verdicts == {
        "replace": "passed",
        "wrongly expected unchanged": "failed",
        "an error's words": "passed",
        "an initializer": "passed",
        "strict decoding": "not modelled",
    }


_REINVOCATION = """
func TestPartialReinvocation(t *testing.T) {
	key1 := key{PolicyUID: types.NamespacedName{Name: "p1"}}
	key2 := key{PolicyUID: types.NamespacedName{Name: "p2"}}
	cm1v1 := &v1.ConfigMap{Data: map[string]string{"v": "1"}}
	cm1v2 := &v1.ConfigMap{Data: map[string]string{"v": "2"}}

	rc := policyReinvokeContext{}
	rc.SetLastPolicyInvocationOutput(cm1v1)
	rc.RequireReinvokingPreviouslyInvokedPlugins()
	rc.AddReinvocablePolicyToPreviouslyInvoked(key1)
	assert.True(t, rc.IsOutputChangedSinceLastPolicyInvocation(cm1v2))
	rc.SetLastPolicyInvocationOutput(cm1v2)
	rc.RequireReinvokingPreviouslyInvokedPlugins()
	rc.AddReinvocablePolicyToPreviouslyInvoked(key2)
	assert.True(t, rc.ShouldReinvoke(key1))
	assert.False(t, rc.ShouldReinvoke(key2))
}
"""


def test_a_reinvocation_table_runs_its_calls_in_order_and_a_wrong_assertion_fails():
    (case,) = read_reinvocation("reinvocationcontext_test.go", _REINVOCATION).cases
    assert run_mutation_case(case).verdict == "passed"
    wrong = _REINVOCATION.replace(
        "assert.False(t, rc.ShouldReinvoke(key2))", "assert.True(t, rc.ShouldReinvoke(key2))"
    )
    (case,) = read_reinvocation("reinvocationcontext_test.go", wrong).cases
    assert run_mutation_case(case).verdict == "failed"
