"""kubernetes-apiserver v0.30.14 pkg/admission/plugin/policy/validating/admission_test.go,
transcribed (volcano_guard_sandbox.conformance.plugin_scenarios): one test per upstream Test
function, each running its scenario through the sandbox's plugin (policies.dispatch with its
validator and CEL). The conformance command counts the same scenarios for that file."""

from __future__ import annotations

from volcano_guard_sandbox.apiserver import policies
from volcano_guard_sandbox.conformance import plugin_scenarios as scenarios
from volcano_guard_sandbox.conformance.plugin_scenarios import Cluster


def test_a_policy_applies_from_the_first_request_after_it_is_stored():
    # TestPluginNotReady: not modelled (the sandbox has no informer to be unsynced). What the
    # sandbox does instead: it reads its store on each request, so there is no window.
    assert scenarios.SCENARIOS["TestPluginNotReady"].run is None
    assert "informer" in scenarios.NOT_MODELLED[scenarios.SCENARIOS["TestPluginNotReady"].need]
    cluster = Cluster()
    cluster.update(
        scenarios.FAKE_PARAMS, scenarios.policy(), scenarios.binding(param_ref=scenarios.DENY_REF)
    )
    assert "Denied" in cluster.dispatch(scenarios.FAKE_PARAMS).error


def test_a_denying_policy_refuses_without_warnings_or_annotations():
    scenarios.basic_policy_definition_failure()  # TestBasicPolicyDefinitionFailure


def test_a_policy_that_does_not_match_is_not_applied():
    scenarios.definition_doesnt_match()  # TestDefinitionDoesntMatch


def test_a_binding_pointed_at_missing_params_refuses_until_they_exist():
    scenarios.reconfigure_binding()  # TestReconfigureBinding


def test_a_removed_policy_stops_applying():
    scenarios.remove_definition()  # TestRemoveDefinition


def test_a_removed_binding_stops_applying():
    scenarios.remove_binding()  # TestRemoveBinding


def test_a_param_kind_no_api_serves_is_the_policys_configuration_error():
    scenarios.invalid_param_source_gvk()  # TestInvalidParamSourceGVK


def test_an_ignored_policy_with_an_unserved_param_kind_admits():
    # TestInvalidParamSourceGVK under failurePolicy Ignore (dispatcher.go addConfigError).
    cluster = Cluster()
    bad = scenarios.policy(param_kind=("example.com/v1", "BadParamKind"), failurePolicy="Ignore")
    cluster.update(bad, scenarios.binding(param_ref=scenarios.DENY_REF))
    assert cluster.dispatch(scenarios.FAKE_PARAMS).error == ""


def test_a_named_param_that_does_not_exist_refuses_under_deny():
    scenarios.invalid_param_source_instance_name()  # TestInvalidParamSourceInstanceName


def test_a_binding_without_param_ref_evaluates_with_null_params():
    scenarios.empty_param_ref()  # TestEmptyParamRef


def test_a_policy_without_param_kind_evaluates_with_null_params():
    scenarios.empty_param_source()  # TestEmptyParamSource


def test_one_policy_dropping_a_param_kind_leaves_anothers_params():
    scenarios.multiple_policies_shared_param_type()  # TestMultiplePoliciesSharedParamType


def test_a_configmap_serves_as_params():
    scenarios.native_type_param()  # TestNativeTypeParam


def test_audit_records_the_validation_failure_and_admits():
    scenarios.audit_validation_action()  # TestAuditValidationAction


def test_warn_adds_the_warning_and_admits():
    scenarios.warn_validation_action()  # TestWarnValidationAction


def test_deny_warn_and_audit_together_refuse_warn_and_annotate():
    scenarios.all_validation_actions()  # TestAllValidationActions


def test_a_param_ref_without_namespace_takes_the_requests_namespace():
    scenarios.namespace_param_ref_name()  # TestNamespaceParamRefName


def test_param_ref_by_name_or_selector_picks_the_params_upstream_picks():
    scenarios.param_ref()  # TestParamRef: its 18 subtests


def test_a_param_ref_namespace_for_a_cluster_scoped_kind_is_an_error():
    scenarios.namespace_param_ref_cluster_scoped_param_error()  # ...ClusterScopedParamError


def test_audit_annotations_of_several_bindings_join_and_an_error_refuses():
    scenarios.audit_annotations()  # TestAuditAnnotations


def test_a_scenario_that_differs_from_upstream_is_reported_failed(monkeypatch):
    """The verdict the conformance command reports is the scenario's own check: a plugin that
    ignored the binding's Deny would fail TestBasicPolicyDefinitionFailure."""
    monkeypatch.setattr(policies, "_act", lambda decisions, policy, binding, record: [])
    passed, _, got = scenarios.verdict("TestBasicPolicyDefinitionFailure")
    assert not passed and "Denied" in got
