"""The sandbox's admission held to upstream's own admission-plugin test tables (Kubernetes 1.30's
`*_test.go` under pkg/admission/plugin, read as text at test time): webhook rules
(rules_test.go), matchConditions (matcher_test.go) and the policy validator (validator_test.go).
Every case passes, or is one the sandbox does not model (admission_runner.ADMISSION_NOT_MODELLED,
with its reason), or is a known failure listed below with its reason; a listed case that passes
fails the test. The readers must keep finding the cases they find today (MIN_CASES).
"""

# The Go tables below keep upstream's long lines.
# ruff: noqa: E501

from __future__ import annotations

import functools

import pytest

from tests.upstream import upstream_file, upstream_root
from volcano_guard_sandbox.commands import main
from volcano_guard_sandbox.conformance.admission_cases import (
    ADMISSION_SOURCES,
    AdmissionExtraction,
    AdmissionSource,
    extract_admission,
    read_filter_cases,
    read_rules,
    read_validate,
)
from volcano_guard_sandbox.conformance.admission_runner import run_case, run_extraction
from volcano_guard_sandbox.conformance.runner import FileReport

_PLUGIN = "pkg/admission/plugin/"
# Cases each reader finds today (a floor), and the most it may leave unparsed: the tables not
# read yet count every case unparsed (docs/decisions/sandbox.md says why).
MIN_CASES = {
    _PLUGIN + "cel/filter_test.go": 27,
    _PLUGIN + "webhook/predicates/rules/rules_test.go": 76,
    _PLUGIN + "webhook/matchconditions/matcher_test.go": 15,
    _PLUGIN + "policy/validating/validator_test.go": 34,
    _PLUGIN + "webhook/generic/webhook_test.go": 16,
    _PLUGIN + "policy/matching/matching_test.go": 24,
    _PLUGIN + "policy/validating/admission_test.go": 19,  # transcribed: plugin_scenarios
}
MAX_UNPARSED: dict[str, int] = {}
# Cases the sandbox answers unlike 1.30, by id, with why.
KNOWN_FAILURES: dict[str, str] = {}


@functools.cache
def _extraction(source: AdmissionSource) -> AdmissionExtraction:
    return extract_admission(source, upstream_file(source.project, source.revision, source.path))


@functools.cache
def _reports() -> tuple[FileReport, ...]:
    return tuple(run_extraction(_extraction(source)) for source in ADMISSION_SOURCES)


@pytest.mark.parametrize("path", sorted(MIN_CASES))
def test_each_admission_table_yields_its_cases(path):
    (source,) = [s for s in ADMISSION_SOURCES if s.path == path]
    extraction = _extraction(source)
    assert len(extraction.cases) >= MIN_CASES[path], [u.why for u in extraction.unparsed]
    assert len(extraction.unparsed) <= MAX_UNPARSED.get(path, 0), extraction.unparsed


def test_every_admission_case_passes_or_is_not_modelled_or_a_known_failure():
    results = [result for report in _reports() for result in report.results]
    unexpected = [
        f"{r.id}: expected {r.expected} / got {r.got}"
        for r in results
        if r.verdict == "failed" and r.id not in KNOWN_FAILURES
    ]
    assert not unexpected, "\n".join(unexpected)
    assert sum(r.verdict == "passed" for r in results) >= 160


def test_no_known_admission_failure_passes_or_is_gone():
    failed = {r.id for report in _reports() for r in report.results if r.verdict == "failed"}
    stale = sorted(set(KNOWN_FAILURES) - failed)
    assert not stale, "no longer failing, take them out of KNOWN_FAILURES:\n" + "\n".join(stale)


@pytest.mark.slow  # runs every table again (3 s); the CEL part's command test is quick
def test_conformance_command_prints_the_admission_tables_after_the_cel_ones(capsys):
    root = upstream_root()
    if root is None:
        pytest.skip("no upstream source on this machine")
    assert main(["conformance", str(root)]) == 0
    lines = capsys.readouterr().out.splitlines()
    start = lines.index("admission plugin tables:")
    rows = lines[start + 2 : start + 2 + len(ADMISSION_SOURCES)]
    assert [row.split()[0] for row in rows] == [source.file for source in ADMISSION_SOURCES]
    total = lines[start + 2 + len(ADMISSION_SOURCES)].split()
    assert total[0] == "total" and int(total[1]) >= 160 and int(total[2]) == len(KNOWN_FAILURES)


# The readers and the runner on tables of their own: no upstream source needed.

_RULES = """
func TestScope(t *testing.T) {
	cluster := adreg.ClusterScope
	table := tests{
		"cluster scope": {
			rule: adreg.RuleWithOperations{
				Rule: adreg.Rule{
					Resources: []string{"*"},
					Scope:     &cluster,
				},
			},
			match: attrList(
				clusterScopedAttributes("g", "v", "r", "", "name", admission.Create, &metav1.CreateOptions{}),
				namespacedAttributes("", "v1", "namespaces", "", "ns", admission.Create, nil),
			),
			noMatch: attrList(
				namespacedAttributes("g", "v", "r", "", "name", admission.Create, nil),
				namespacedAttributes("g", "v", "r", "", "name", admission.Create, nil),
			),
		},
	}
}
"""


def test_a_rules_table_is_run_part_by_part_and_a_wrong_expectation_fails():
    extraction = read_rules("rules_test.go", _RULES)
    names = [case.name for case in extraction.cases]
    assert names == [
        "cluster scope_match_0",
        "cluster scope_match_1",
        "cluster scope_noMatch_0",
        "cluster scope_noMatch_1",
    ]
    assert extraction.unparsed[0].function == "TestGroup"  # absent from this source
    assert [run_case(case).verdict for case in extraction.cases] == ["passed"] * 4
    swapped = _RULES.replace("\tmatch:", "\tMATCH:").replace("noMatch:", "match:")
    wrong = read_rules("rules_test.go", swapped.replace("MATCH:", "noMatch:")).cases
    assert [run_case(case).verdict for case in wrong] == ["failed"] * 4


_VALIDATE = """
func TestValidate(t *testing.T) {
	ignore := v1.Ignore
	forbiddenReason := metav1.StatusReasonForbidden
	cases := []struct {
		name        string
	}{
		{
			name: "error ignored",
			evaluations: []cel.EvaluationResult{
				{EvalResult: celtypes.True, ExpressionAccessor: &ValidationCondition{}},
				{Error: errors.New("boom"), ExpressionAccessor: &ValidationCondition{}},
			},
			policyDecision: []PolicyDecision{{Action: ActionAdmit}, {Action: ActionAdmit}},
			failPolicy: &ignore,
		},
		{
			name: "message too long",
			evaluations: []cel.EvaluationResult{
				{
					EvalResult: celtypes.False,
					ExpressionAccessor: &ValidationCondition{
						Reason: &forbiddenReason, Expression: "x == y", Message: "m",
					},
				},
			},
			messageEvaluations: []cel.EvaluationResult{
				{EvalResult: celtypes.String(strings.Repeat("x", 5*1024+1))},
			},
			policyDecision: []PolicyDecision{{Action: ActionDeny, Message: "m", Reason: forbiddenReason}},
		},
		{
			name: "denied as the fake's expression",
			evaluations: []cel.EvaluationResult{
				{EvalResult: celtypes.False, ExpressionAccessor: &ValidationCondition{Expression: "x == y"}},
			},
			policyDecision: []PolicyDecision{
				{Action: ActionDeny, Message: "failed expression: x == y", Reason: metav1.StatusReasonInvalid},
			},
		},
		{
			name: "wrongly expected to admit",
			evaluations: []cel.EvaluationResult{{EvalResult: celtypes.False}},
			policyDecision: []PolicyDecision{{Action: ActionAdmit}},
		},
		{
			name: "unreadable", evaluations: someHelper(),
		},
	}
}
"""


def test_a_validator_table_runs_as_policies_whose_expressions_stand_for_the_fakes():
    extraction = read_validate("validator_test.go", _VALIDATE)
    assert [u.name for u in extraction.unparsed] == ["[4]"]
    verdicts = {case.name: run_case(case).verdict for case in extraction.cases}
    assert verdicts == {
        "error ignored": "passed",
        "message too long": "passed",
        "denied as the fake's expression": "passed",
        "wrongly expected to admit": "failed",
    }


_FILTER = """
func TestFilter(t *testing.T) {
	configMapParams := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name: "foo",
		},
		Data: map[string]string{"fakeString": "fake"},
	}
	nsObject := &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: "test", Labels: map[string]string{"env": "test"}},
		Status: corev1.NamespaceStatus{Phase: corev1.NamespaceActive},
	}
	cases := []struct {
		name string
	}{
		{
			name: "params and the deleted object",
			validations: []ExpressionAccessor{
				&condition{Expression: "params.data.fakeString == 'fake' && object == null"},
				&condition{Expression: "oldObject.x == 100"},
			},
			attributes: newValidAttribute(nil, true),
			results: []EvaluationResult{
				{EvalResult: celtypes.True},
				{Error: errors.New("expression 'oldObject.x == 100' resulted in error")},
			},
			hasParamKind: true,
			params:       configMapParams,
		},
		{
			name: "the namespace object as CreateNamespaceObject copies it",
			validations: []ExpressionAccessor{
				&condition{Expression: "namespaceObject.status.phase == 'Active' && namespaceObject.metadata.labels.env == 'test'"},
				&condition{Expression: "size(namespaceObject.metadata.managedFields) == 1"},
			},
			attributes: newValidAttribute(nil, false),
			results: []EvaluationResult{
				{EvalResult: celtypes.True},
				{Error: errors.New("undefined field 'managedFields'")},
			},
			namespaceObject: nsObject,
		},
		{
			name: "wrongly expected false",
			validations: []ExpressionAccessor{&condition{Expression: "request.operation == 'CREATE'"}},
			attributes: newValidAttribute(nil, false),
			results: []EvaluationResult{{EvalResult: celtypes.False}},
		},
		{
			name: "an authorizer, not modelled",
			validations: []ExpressionAccessor{&condition{Expression: "authorizer.path('/healthz').check('get').allowed()"}},
			attributes: newValidAttribute(nil, false),
			results: []EvaluationResult{{EvalResult: celtypes.True}},
			authorizer: denyAll,
		},
	}
}
"""


def test_a_filter_table_evaluates_each_expression_against_go_built_attributes():
    extraction = read_filter_cases("filter_test.go", _FILTER)
    assert not extraction.unparsed
    verdicts = {case.name: run_case(case).verdict for case in extraction.cases}
    assert verdicts == {
        "params and the deleted object": "passed",
        "the namespace object as CreateNamespaceObject copies it": "passed",
        "wrongly expected false": "failed",
        "an authorizer, not modelled": "not modelled",
    }
