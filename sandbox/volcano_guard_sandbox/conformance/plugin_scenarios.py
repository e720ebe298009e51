"""kubernetes-apiserver v0.30.14 pkg/admission/plugin/policy/validating/admission_test.go,
transcribed: each Test function is a scenario run through the sandbox's own plugin
(apiserver/policies.dispatch, with its validator and CEL), not a table read from the file.

Upstream drives the plugin with Go fakes: a fake compiler whose validator returns a fixed
decision, a fake matcher, object trackers and informers. Here the fake validator is a CEL
validation that decides the same (`false` with message "Denied"; an expression on `params`
where upstream's fake looks at the params it was given), the fake matcher a matchConstraints that
matches everything (or a matchCondition on the name's length), and the trackers lists of objects
the dispatcher reads, as the sandbox's store serves them. What only the fakes can show (an
informer not yet synced, how often a policy is compiled) is not modelled, with the reason.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from volcano_guard_sandbox.apiserver import policies
from volcano_guard_sandbox.apiserver.admission import Record
from volcano_guard_sandbox.apiserver.matching import Attributes, User
from volcano_guard_sandbox.apiserver.store import ApiError

FILE = "pkg/admission/plugin/policy/validating/admission_test.go"
ADMISSION_V1 = "admissionregistration.k8s.io/v1"

# The kinds upstream's REST mapper knows (setupTestCommon), by (apiVersion, kind): resource and
# whether it is namespaced; ConfigMap is the native param kind of TestNativeTypeParam.
PARAMS = ("example.com/v1", "ParamsConfig")
CLUSTER_PARAMS = ("example.com/v1", "ClusterScopedParamsConfig")
CONFIGMAP = ("v1", "ConfigMap")
V1BETA1_POLICY = ("admissionregistration.k8s.io/v1beta1", "ValidatingAdmissionPolicy")
KINDS: Mapping[tuple[str, str], tuple[str, bool]] = {
    PARAMS: ("paramsconfigs", True),
    CLUSTER_PARAMS: ("clusterscopedparamsconfigs", False),
    CONFIGMAP: ("configmaps", True),
    V1BETA1_POLICY: ("validatingadmissionpolicies", False),
}
EVERYTHING = {
    "resourceRules": [
        {"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"], "resources": ["*"]}
    ]
}
DENIED = [{"expression": "false", "message": "Denied"}]


class Mismatch(AssertionError):
    """The sandbox answered otherwise than upstream's test expects."""


def expect(condition: bool, what: str) -> None:
    if not condition:
        raise Mismatch(what)


# -- objects ------------------------------------------------------------------------------------


def param(
    name: str,
    namespace: str = "default",
    labels: Mapping[str, str] | None = None,
    kind: tuple[str, str] = PARAMS,
    **fields: Any,
) -> dict[str, Any]:
    """newParam / newClusterScopedParam (a cluster-scoped kind has no namespace)."""
    metadata: dict[str, Any] = {"name": name, "resourceVersion": "1"}
    if KINDS[kind][1]:
        metadata["namespace"] = namespace
    if labels:
        metadata["labels"] = dict(labels)
    return {"apiVersion": kind[0], "kind": kind[1], "metadata": metadata, **fields}


FAKE_PARAMS = param("replicas-test.example.com", maxReplicas=3)


def policy(
    name: str = "denypolicy.example.com",
    validations: Iterable[Mapping[str, Any]] = DENIED,
    param_kind: tuple[str, str] | None = PARAMS,
    **spec: Any,
) -> dict[str, Any]:
    """denyPolicy, its fake validator as CEL."""
    body: dict[str, Any] = {
        "matchConstraints": EVERYTHING,
        "failurePolicy": "Fail",
        "validations": list(validations),
        **spec,
    }
    if param_kind is not None:
        body["paramKind"] = {"apiVersion": param_kind[0], "kind": param_kind[1]}
    return {
        "apiVersion": ADMISSION_V1,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": body,
    }


def binding(
    name: str = "denybinding.example.com",
    policy_name: str = "denypolicy.example.com",
    param_ref: Mapping[str, Any] | None = None,
    actions: Iterable[str] = ("Deny",),
) -> dict[str, Any]:
    body: dict[str, Any] = {"policyName": policy_name, "validationActions": list(actions)}
    if param_ref is not None:
        body["paramRef"] = dict(param_ref)
    return {
        "apiVersion": ADMISSION_V1,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": body,
    }


DENY_REF = {
    "name": "replicas-test.example.com",
    "namespace": "default",
    "parameterNotFoundAction": "Deny",
}


# -- the plugin over a set of objects -------------------------------------------------------------


@dataclass
class Outcome:
    """One Dispatch: its error ("" when admitted), the warnings and the audit annotations."""

    error: str
    warnings: list[str]
    annotations: dict[str, str]


@dataclass
class Cluster:
    """The objects the plugin reads (upstream's trackers), kept as the sandbox's store keeps
    them: policies, bindings, and params of the kinds in KINDS."""

    objects: list[dict[str, Any]] = field(default_factory=list)

    def update(self, *objects: Mapping[str, Any]) -> None:
        for obj in objects:
            self.delete(obj)
            self.objects.append(copy.deepcopy(dict(obj)))

    def delete(self, *objects: Mapping[str, Any]) -> None:
        keys = {_key(obj) for obj in objects}
        self.objects = [obj for obj in self.objects if _key(obj) not in keys]

    def _of(self, kind: str) -> list[dict[str, Any]]:
        return [obj for obj in self.objects if obj["kind"] == kind]

    def params(self, api_version: str, kind: str) -> policies.ParamSource | None:
        if (api_version, kind) not in KINDS:
            return None  # upstream's REST mapper does not know it either
        namespaced = KINDS[api_version, kind][1]

        def objects(namespace: str) -> list[dict[str, Any]]:
            return [
                obj
                for obj in self.objects
                if (obj["apiVersion"], obj["kind"]) == (api_version, kind)
                and (not namespaced or obj["metadata"].get("namespace") == namespace)
            ]

        return policies.ParamSource(namespaced, objects)

    def dispatch(self, obj: Mapping[str, Any]) -> Outcome:
        """Plugin.Dispatch of a CREATE of obj (attributeRecord(nil, obj, admission.Create))."""
        record = Record()
        try:
            policies.dispatch(
                _attributes(obj),
                self._of("ValidatingAdmissionPolicy"),
                self._of("ValidatingAdmissionPolicyBinding"),
                self.params,
                None,
                record,
            )
        except ApiError as exc:
            return Outcome(exc.message, record.warnings, record.annotations)
        return Outcome("", record.warnings, record.annotations)


def _key(obj: Mapping[str, Any]) -> tuple[str, str, str, str]:
    metadata = obj.get("metadata") or {}
    return (obj["apiVersion"], obj["kind"], metadata.get("namespace", ""), metadata["name"])


def _attributes(obj: Mapping[str, Any]) -> Attributes:
    group, _, version = str(obj["apiVersion"]).rpartition("/")
    resource, namespaced = KINDS[obj["apiVersion"], obj["kind"]]
    metadata = obj["metadata"]
    return Attributes(
        operation="CREATE",
        group=group,
        version=version,
        resource=resource,
        kind=(group, version, str(obj["kind"])),
        namespace=str(metadata.get("namespace", "")) if namespaced else "",
        name=str(metadata["name"]),
        user=User("admin"),
        object=copy.deepcopy(dict(obj)),
    )


def denied_with(outcome: Outcome, text: str) -> None:
    expect(text in outcome.error, f"an error containing {text!r}, got {outcome.error!r}")


def admitted(outcome: Outcome) -> None:
    expect(outcome.error == "", f"admitted, got {outcome.error!r}")


# -- the scenarios, one per upstream Test function -----------------------------------------------


def basic_policy_definition_failure() -> None:
    cluster = Cluster()
    cluster.update(FAKE_PARAMS, policy(), binding(param_ref=DENY_REF))
    outcome = cluster.dispatch(FAKE_PARAMS)
    denied_with(outcome, "Denied")
    expect(outcome.warnings == [], f"no warnings, got {outcome.warnings}")
    expect(outcome.annotations == {}, f"no audit annotations, got {outcome.annotations}")


def definition_doesnt_match() -> None:
    # The fake matcher matches names of even length: a policy-wide matchCondition here.
    even = [{"name": "even", "expression": "object.metadata.name.size() % 2 == 0"}]
    cluster = Cluster()
    cluster.update(FAKE_PARAMS, policy(matchConditions=even), binding(param_ref=DENY_REF))
    admitted(cluster.dispatch(param("oddlength")))
    denied_with(cluster.dispatch(param("evenlength")), "Denied")


def reconfigure_binding() -> None:
    params2 = param("replicas-test2.example.com", maxReplicas=35)
    cluster = Cluster()
    cluster.update(FAKE_PARAMS, policy(), binding(param_ref=DENY_REF))
    denied_with(cluster.dispatch(FAKE_PARAMS), "Denied")
    cluster.update(binding(param_ref={**DENY_REF, "name": params2["metadata"]["name"]}))
    denied_with(
        cluster.dispatch(FAKE_PARAMS),
        "no params found for policy binding with `Deny` parameterNotFoundAction",
    )
    cluster.update(params2)
    denied_with(cluster.dispatch(FAKE_PARAMS), "Denied")


def _stops_applying_once_deleted(removed: Mapping[str, Any]) -> None:
    cluster = Cluster()
    cluster.update(FAKE_PARAMS, policy(), binding(param_ref=DENY_REF))
    denied_with(cluster.dispatch(FAKE_PARAMS), "Denied")
    cluster.delete(removed)
    admitted(cluster.dispatch(FAKE_PARAMS))


def remove_definition() -> None:
    _stops_applying_once_deleted(policy())


def remove_binding() -> None:
    _stops_applying_once_deleted(binding())


def invalid_param_source_gvk() -> None:
    cluster = Cluster()
    cluster.update(
        policy(param_kind=("example.com/v1", "BadParamKind")), binding(param_ref=DENY_REF)
    )
    denied_with(
        cluster.dispatch(FAKE_PARAMS),
        "failed to configure policy: failed to find resource referenced by paramKind: "
        "'example.com/v1, Kind=BadParamKind'",
    )


def invalid_param_source_instance_name() -> None:
    cluster = Cluster()
    cluster.update(policy(), binding(param_ref=DENY_REF))  # no params stored
    denied_with(
        cluster.dispatch(FAKE_PARAMS),
        "no params found for policy binding with `Deny` parameterNotFoundAction",
    )


# The fake validator of TestEmptyParamRef: admit with params, deny without.
DENY_WITHOUT_PARAMS = [{"expression": "params != null", "message": "Denied"}]


def empty_param_ref() -> None:
    cluster = Cluster()
    cluster.update(FAKE_PARAMS, policy(validations=DENY_WITHOUT_PARAMS), binding())
    denied_with(cluster.dispatch(FAKE_PARAMS), "Denied")


def empty_param_source() -> None:
    cluster = Cluster()
    cluster.update(FAKE_PARAMS, policy(validations=DENY_WITHOUT_PARAMS, param_kind=None))
    cluster.update(binding())
    denied_with(cluster.dispatch(FAKE_PARAMS), "Denied")
    # A paramRef in the binding of a policy without paramKind is ignored: params stay null.
    cluster.update(binding(param_ref=DENY_REF))
    denied_with(cluster.dispatch(FAKE_PARAMS), "Denied")


def multiple_policies_shared_param_type() -> None:
    # policy2's fake denies whatever its params; here it denies only when given fakeParams, so
    # the second dispatch also shows that policy2 still gets them.
    policy1 = policy("denypolicy1.example.com", validations=[{"expression": "true"}])
    policy2 = policy(
        "denypolicy2.example.com",
        validations=[{"expression": "params.maxReplicas != 3", "message": "Policy2Denied"}],
    )
    binding1 = binding("denybinding1.example.com", "denypolicy1.example.com", DENY_REF)
    binding2 = binding("denybinding2.example.com", "denypolicy2.example.com", DENY_REF)
    cluster = Cluster()
    cluster.update(FAKE_PARAMS, policy1, binding1, policy2, binding2)
    denied_with(cluster.dispatch(FAKE_PARAMS), "Policy2Denied")
    policy1["spec"].pop("paramKind")
    binding1["spec"].pop("paramRef")
    cluster.update(policy1, binding1)
    denied_with(cluster.dispatch(FAKE_PARAMS), "Policy2Denied")


def native_type_param() -> None:
    configmap = param("replicas-test.example.com", kind=CONFIGMAP, data={"coolkey": "coolvalue"})
    is_configmap = [{"expression": "params.kind != 'ConfigMap'", "message": "correct type"}]
    cluster = Cluster()
    cluster.update(
        policy(validations=is_configmap, param_kind=CONFIGMAP), binding(param_ref=DENY_REF)
    )
    cluster.update(configmap)
    denied_with(cluster.dispatch(FAKE_PARAMS), "correct type")


SORRY = [{"expression": "false", "message": "I'm sorry Dave"}]
SORRY_WARNING = (
    "Validation failed for ValidatingAdmissionPolicy 'denypolicy.example.com' with binding "
    "'denybinding.example.com': I'm sorry Dave"
)


def _failure_annotation(outcome: Outcome, actions: list[str]) -> None:
    expected = [
        {
            "message": "I'm sorry Dave",
            "policy": "denypolicy.example.com",
            "binding": "denybinding.example.com",
            "expressionIndex": 0,
            "validationActions": actions,
        }
    ]
    expect(len(outcome.annotations) == 1, f"one audit annotation, got {outcome.annotations}")
    value = outcome.annotations.get(policies.VALIDATION_FAILURE, "null")
    expect(json.loads(value) == expected, f"{policies.VALIDATION_FAILURE}: {value}")


def _sorry(actions: list[str]) -> Outcome:
    cluster = Cluster()
    cluster.update(policy(validations=SORRY, param_kind=None), binding(actions=actions))
    return cluster.dispatch(FAKE_PARAMS)


def audit_validation_action() -> None:
    outcome = _sorry(["Audit"])
    admitted(outcome)
    expect(outcome.warnings == [], f"no warnings, got {outcome.warnings}")
    _failure_annotation(outcome, ["Audit"])


def warn_validation_action() -> None:
    outcome = _sorry(["Warn"])
    admitted(outcome)
    expect(outcome.warnings == [SORRY_WARNING], f"the warning, got {outcome.warnings}")
    expect(outcome.annotations == {}, f"no audit annotations, got {outcome.annotations}")


def all_validation_actions() -> None:
    # The API refuses Deny with Warn on write (binding_errors); upstream's tracker skips that
    # validation, and the dispatcher applies all three, as here.
    outcome = _sorry(["Deny", "Warn", "Audit"])
    denied_with(outcome, "I'm sorry Dave")
    expect(outcome.warnings == [SORRY_WARNING], f"the warning, got {outcome.warnings}")
    _failure_annotation(outcome, ["Deny", "Warn", "Audit"])


def namespace_param_ref_name() -> None:
    # The fake records the namespace of the ConfigMap it was given: here the message says it.
    says_namespace = [
        {"expression": "false", "messageExpression": "'correct type ' + params.data.coolkey"}
    ]
    configmaps = [
        param("replicas-test.example.com", namespace, kind=CONFIGMAP, data={"coolkey": namespace})
        for namespace in ("default", "mynamespace", "othernamespace")
    ]
    cluster = Cluster()
    cluster.update(
        policy(validations=says_namespace, param_kind=CONFIGMAP),
        binding(param_ref={"name": "replicas-test.example.com"}),
        *configmaps,
    )
    for configmap in (*configmaps, configmaps[0]):
        namespace = configmap["metadata"]["namespace"]
        denied_with(cluster.dispatch(configmap), f"correct type {namespace}")


def param_ref() -> None:
    """TestParamRef's 18 subtests (testParamRefCase), each in turn."""
    for clustered in (False, True):
        for name_set in (False, True):
            for namespace_set in (False, True):
                if clustered and namespace_set:
                    continue
                for selector_set in (False, True):
                    if selector_set and name_set:
                        continue
                    for deny in (False, True):
                        _param_ref_case(clustered, name_set, namespace_set, selector_set, deny)


# Each param the policy is evaluated with, as a warning (the binding also warns, so every
# evaluation shows; upstream's fake validator records them).
NAMES_PARAM = [
    {
        "expression": "false",
        "messageExpression": "'Denied by policy ' + params.metadata.name + '@' + "
        "('namespace' in params.metadata ? params.metadata.namespace : '')",
    }
]
MATCHING, NOT_MATCHING = {"doesitmatch": "yes"}, {"doesitmatch": "no"}
UNAFFILIATED = {"notaffiliated": "no"}
NAME = "replicas-test.example.com"


def _param_ref_params() -> list[dict[str, Any]]:
    namespaces = ("default", "mynamespace", "othernamespace")
    labels = (NOT_MATCHING, MATCHING, UNAFFILIATED)
    namespaced = [
        param(NAME + suffix, namespace, label)
        for suffix, label in zip(("", "1", "2"), labels, strict=True)
        for namespace in namespaces
    ]
    namespaced += [
        param(NAME + "3", "default", UNAFFILIATED),
        param(NAME + "3", "mynamespace", MATCHING),
        param(NAME + "3", "othernamespace", MATCHING),
    ]
    clustered = [
        param(NAME + suffix, labels=label, kind=CLUSTER_PARAMS)
        for suffix, label in zip(
            ("", "1", "2", "3", "4", "5"),
            (MATCHING, NOT_MATCHING, UNAFFILIATED, MATCHING, NOT_MATCHING, UNAFFILIATED),
            strict=True,
        )
    ]
    return namespaced + clustered


def _param_ref_case(
    clustered: bool, name_set: bool, namespace_set: bool, selector_set: bool, deny: bool
) -> None:
    kind = CLUSTER_PARAMS if clustered else PARAMS
    ref: dict[str, Any] = {"parameterNotFoundAction": "Deny" if deny else "Allow"}
    if name_set:
        ref["name"] = NAME
    else:
        ref["selector"] = {"matchLabels": MATCHING} if selector_set else {}
    if namespace_set:
        ref["namespace"] = "mynamespace"
    params = _param_ref_params()
    cluster = Cluster()
    cluster.update(*params)
    cluster.update(
        policy(validations=NAMES_PARAM, param_kind=kind),
        binding(param_ref=ref, actions=["Deny", "Warn"]),
    )
    namespaced_request = param("some param", "othernamespace")
    cluster_request = param("other param", kind=CLUSTER_PARAMS)
    cluster_error = not namespace_set and not clustered

    def expected(request_namespace: str | None) -> set[str]:
        if request_namespace is None:  # a cluster-scoped request that errors
            return set()
        found = set()
        for p in params:
            metadata = p["metadata"]
            if (p["apiVersion"], p["kind"]) != kind:
                continue
            if name_set and metadata["name"] != NAME:
                continue
            namespace = metadata.get("namespace", "")
            if namespace_set and namespace != "mynamespace":
                continue
            if not clustered and not namespace_set and namespace != request_namespace:
                continue
            if selector_set and any(
                metadata.get("labels", {}).get(k) != v for k, v in MATCHING.items()
            ):
                continue
            found.add(f"{metadata['name']}@{namespace}")
        return found

    where = (
        f"clustered={clustered} name={name_set} namespace={namespace_set} "
        f"selector={selector_set} deny={deny}"
    )
    outcome = cluster.dispatch(namespaced_request)
    denied_with(outcome, "Denied by policy")
    _evaluated_with(outcome, expected("othernamespace"), where)
    outcome = cluster.dispatch(cluster_request)
    if cluster_error:
        denied_with(
            outcome,
            "failed to configure binding: cannot use namespaced paramRef in policy binding "
            "that matches cluster-scoped resources",
        )
    else:
        denied_with(outcome, "Denied by policy")
    _evaluated_with(outcome, expected(None if cluster_error else ""), where)
    cluster.delete(*(p for p in params if p["kind"] == kind[1]))
    not_found = "no params found for policy binding with `Deny` parameterNotFoundAction"
    for request in (namespaced_request, cluster_request):
        outcome = cluster.dispatch(request)
        if cluster_error and request is cluster_request:
            denied_with(outcome, "cannot use namespaced paramRef")
        elif deny:
            denied_with(outcome, not_found)
        else:
            admitted(outcome)
        _evaluated_with(outcome, set(), where)


def _evaluated_with(outcome: Outcome, names: set[str], where: str) -> None:
    prefix = "': Denied by policy "
    got = {w.split(prefix, 1)[1] for w in outcome.warnings if prefix in w}
    expect(got == names, f"{where}: evaluated with {sorted(names)}, got {sorted(got)}")


def namespace_param_ref_cluster_scoped_param_error() -> None:
    cluster = Cluster()
    cluster.update(
        policy(validations=[{"expression": "true"}], param_kind=V1BETA1_POLICY),
        binding(
            param_ref={
                "name": "other-param-to-use-with-no-label.example.com",
                "namespace": "mynamespace",
            }
        ),
    )
    denied_with(
        cluster.dispatch(FAKE_PARAMS),
        "paramRef.namespace must not be provided for a cluster-scoped `paramKind`",
    )


def audit_annotations() -> None:
    annotations = [
        {
            "key": "example-key",
            "valueExpression": "params.metadata.name == 'replicas-test2.example.com' ? "
            "'special-value' : 'normal-value'",
        },
        {"key": "excluded-key", "valueExpression": "null"},  # AuditAnnotationActionExclude
        {"key": "error-key", "valueExpression": "{'a': 'b'}['example error']"},  # ...Error
    ]
    cluster = Cluster()
    names = (
        "replicas-test.example.com",
        "replicas-test2.example.com",
        "replicas-test3.example.com",
    )
    bindings = ("denybinding.example.com", "denybinding2.example.com", "denybinding3.example.com")
    cluster.update(*(param(name, maxReplicas=3) for name in names))
    cluster.update(policy(validations=[], auditAnnotations=annotations))
    cluster.update(
        *(
            binding(binding_name, param_ref={**DENY_REF, "name": name})
            for binding_name, name in zip(bindings, names, strict=True)
        )
    )
    outcome = cluster.dispatch(FAKE_PARAMS)
    expect(len(outcome.annotations) == 1, f"one annotation, got {outcome.annotations}")
    value = outcome.annotations.get("denypolicy.example.com/example-key", "")
    expect(sorted(value.split(", ")) == ["normal-value", "special-value"], f"got {value!r}")
    denied_with(outcome, "example error")


@dataclass(frozen=True)
class Scenario:
    """An upstream Test function's behaviour: run (raises Mismatch) or why it is not modelled."""

    behaviour: str
    run: Callable[[], None] | None
    need: str = ""  # what it needs that the sandbox does not model: a key of NOT_MODELLED


NOT_MODELLED: Mapping[str, str] = {
    "plugin not ready": "an informer not yet synced (Go's plugin is not ready): the sandbox "
    "reads policies, bindings and params from its store on each request, so it has no such state"
}

SCENARIOS: Mapping[str, Scenario] = {
    "TestPluginNotReady": Scenario(
        "a request before the plugin is ready", None, "plugin not ready"
    ),
    "TestBasicPolicyDefinitionFailure": Scenario(
        "a denying policy refuses, with no warning and no audit annotation",
        basic_policy_definition_failure,
    ),
    "TestDefinitionDoesntMatch": Scenario(
        "a policy that does not match the request is not applied", definition_doesnt_match
    ),
    "TestReconfigureBinding": Scenario(
        "a binding pointed at missing params refuses until they exist", reconfigure_binding
    ),
    "TestRemoveDefinition": Scenario("a removed policy stops applying", remove_definition),
    "TestRemoveBinding": Scenario("a removed binding stops applying", remove_binding),
    "TestInvalidParamSourceGVK": Scenario(
        "a paramKind no API serves is the policy's configuration error",
        invalid_param_source_gvk,
    ),
    "TestInvalidParamSourceInstanceName": Scenario(
        "a named param that does not exist refuses under parameterNotFoundAction Deny",
        invalid_param_source_instance_name,
    ),
    "TestEmptyParamRef": Scenario(
        "a binding without paramRef evaluates the policy with null params", empty_param_ref
    ),
    "TestEmptyParamSource": Scenario(
        "a policy without paramKind is evaluated with null params", empty_param_source
    ),
    "TestMultiplePoliciesSharedParamType": Scenario(
        "a policy dropping a param kind leaves another policy's params alone",
        multiple_policies_shared_param_type,
    ),
    "TestNativeTypeParam": Scenario(
        "a native kind (ConfigMap) serves as params", native_type_param
    ),
    "TestAuditValidationAction": Scenario(
        "Audit records the validation failure annotation and admits", audit_validation_action
    ),
    "TestWarnValidationAction": Scenario(
        "Warn adds the warning and admits", warn_validation_action
    ),
    "TestAllValidationActions": Scenario(
        "Deny, Warn and Audit together refuse, warn and annotate", all_validation_actions
    ),
    "TestNamespaceParamRefName": Scenario(
        "a paramRef without namespace takes the param in the request's namespace",
        namespace_param_ref_name,
    ),
    "TestParamRef": Scenario(
        "paramRef by name or selector, namespaced or not, Allow or Deny when none is found",
        param_ref,
    ),
    "TestNamespaceParamRefClusterScopedParamError": Scenario(
        "a paramRef namespace for a cluster-scoped paramKind is a configuration error",
        namespace_param_ref_cluster_scoped_param_error,
    ),
    "TestAuditAnnotations": Scenario(
        "audit annotations of several bindings join their distinct values; an error refuses",
        audit_annotations,
    ),
}


def verdict(function: str) -> tuple[bool, str, str]:
    """(passed, expected, got) of an upstream function's scenario that is modelled."""
    scenario = SCENARIOS[function]
    if scenario.run is None:
        raise ValueError(f"{function} is not modelled: {NOT_MODELLED[scenario.need]}")
    try:
        scenario.run()
    except Mismatch as exc:
        return False, scenario.behaviour, str(exc)
    return True, scenario.behaviour, scenario.behaviour
