"""Sidecar injection in the API server does what the webhook does. Over generated labelled pods
(containers and init containers with and without args, command, env, KUBECONFIG and mounts;
valid and invalid annotations; volumes; hostNetwork; a grace period; pods already injected),
Volcano's own control-plane pods and several configs (hostile strings among them), the
webhook's patch applied and the guard's MutatingAdmissionPolicy, as `manifests` renders it, run
by the sandbox's 1.36 plugin give the same object; and the webhook's refusals are the API
server's, by the guard's ValidatingAdmissionPolicy, which sees the mutated pod, with the same
reason (the webhook's first)."""

from __future__ import annotations

import copy
import functools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.webhook.test_admission_policies import installer_pods
from volcano_guard.base.jsonpatch import apply_patch
from volcano_guard.webhook.admission_policies import admission_policies
from volcano_guard.webhook.cel import literal as cel_literal
from volcano_guard.webhook.config import Config, config_from_dict
from volcano_guard.webhook.policies.base import InServerMutation, PolicyContext
from volcano_guard.webhook.policies.sidecar_injection import (
    CONTAINER_NAME,
    GO_SPACE,
    INJECT_LABEL,
    POLICY,
)
from volcano_guard.webhook.review import (
    AdmissionRequest,
    GroupVersionKind,
    GroupVersionResource,
    UserInfo,
)
from volcano_guard_sandbox.apiserver import (
    cel_cost,
    cel_strings,
    mutating_admission,
    mutating_policies,
)
from volcano_guard_sandbox.apiserver import policies as plugin
from volcano_guard_sandbox.apiserver.admission import Record
from volcano_guard_sandbox.apiserver.matching import Attributes, User
from volcano_guard_sandbox.apiserver.mutating_policies import KUBERNETES_1_36
from volcano_guard_sandbox.apiserver.policy_validation import (
    PolicyInputs,
    compile_errors,
    program,
)
from volcano_guard_sandbox.apiserver.reinvocation import ReinvocationContext
from volcano_guard_sandbox.apiserver.store import ApiError

HOSTILE = "x' + object.metadata.name + '\\\"\n\u2028\x00\U0001f600}]) || true //"
MINE = ("volcano-guard-sidecar-injection", "volcano-guard-sidecar-host-network")
CONFIGS: dict[str, dict[str, Any]] = {
    "default": {},
    "plain sidecar, env, long drain": {
        "nativeSidecar": False,
        "proxyMode": "env",
        "drainTimeout": 45.5,
        "flushInterval": 0.25,
        "ack": "sync",
    },
    "hostile strings": {
        "image": HOSTILE,
        "requests": {"cpu": "10m", HOSTILE: "1"},
        "limits": {},
        "port": 65535,
        "metricsPort": 1,
    },
}


@functools.cache
def config_of(name: str) -> Config:
    return config_from_dict({"policies": {"sidecarInjection": CONFIGS[name]}})


_RENDERED: dict[int, tuple[Config, InServerMutation, list[dict[str, Any]]]] = {}


def rendered(config: Config) -> tuple[InServerMutation, list[dict[str, Any]]]:
    """The mutation, and the guard's policies and bindings for it as `manifests` renders them
    (the MutatingAdmissionPolicy, the ValidatingAdmissionPolicy of the check), once a config:
    a config is not hashable, and config_of keeps each one alive."""
    if id(config) not in _RENDERED:
        (mutation,) = POLICY.mutate_in_server(config)
        mine = [o for o in admission_policies(config) if o["metadata"]["name"] in MINE]
        _RENDERED[id(config)] = (config, mutation, mine)
    _, mutation, mine = _RENDERED[id(config)]
    return mutation, mine


def the_mutation(config: Config) -> InServerMutation:
    return rendered(config)[0]


def map_spec(config: Config) -> dict[str, Any]:
    """The spec of the MutatingAdmissionPolicy `manifests` renders for the mutation."""
    (policy,) = [o for o in rendered(config)[1] if o["kind"] == "MutatingAdmissionPolicy"]
    spec: dict[str, Any] = policy["spec"]
    return spec


def request_of(pod: dict[str, Any]) -> AdmissionRequest:
    return AdmissionRequest(
        uid="u",
        kind=GroupVersionKind("", "v1", "Pod"),
        resource=GroupVersionResource("", "v1", "pods"),
        operation="CREATE",
        namespace=pod["metadata"]["namespace"],
        name=pod["metadata"]["name"],
        user=UserInfo("alice", ()),
        object=pod,
    )


def webhook_outcome(config: Config, pod: dict[str, Any]) -> tuple[Any, tuple[str, ...]]:
    """(the pod as the webhook's patch leaves it, its refusals)."""
    assert POLICY.mutate is not None
    verdict = POLICY.mutate(request_of(copy.deepcopy(pod)), PolicyContext(config))
    if verdict is None or verdict.violations:
        return pod, verdict.violations if verdict else ()
    return apply_patch(pod, list(verdict.patch)), ()


def in_server_outcome(config: Config, pod: dict[str, Any]) -> tuple[Any, str]:
    """(the pod as the guard's MutatingAdmissionPolicy leaves it, run by the sandbox's 1.36
    plugin, the refusal of its ValidatingAdmissionPolicy, which sees the mutated pod, or "")."""
    objects = [o for o in rendered(config)[1] if o["kind"].startswith("MutatingAdmission")]
    try:
        mutated = mutating_admission.admit(
            attributes_of(pod),
            [o for o in objects if o["kind"].endswith("Policy")],
            [o for o in objects if o["kind"].endswith("Binding")],
            lambda *_: None,
            NAMESPACE,
            Record(),
            KUBERNETES_1_36,
            ReinvocationContext(),
        )
    except ApiError as exc:
        return pod, exc.message
    assert mutated is not None  # admit answers None for no object (a DELETE), never a CREATE
    return mutated, refusal(config, mutated)


NAMESPACE = {
    "apiVersion": "v1",
    "kind": "Namespace",
    "metadata": {"name": "team-a", "labels": {"kubernetes.io/metadata.name": "team-a"}},
}


def attributes_of(pod: dict[str, Any]) -> Attributes:
    return Attributes(
        operation="CREATE",
        group="",
        version="v1",
        resource="pods",
        subresource="",
        kind=("", "v1", "Pod"),
        namespace=pod["metadata"]["namespace"],
        name=pod["metadata"]["name"],
        user=User("alice", "", ("system:authenticated",)),
        object=pod,
    )


def review_request(pod: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "operation": "CREATE",
        "namespace": pod["metadata"]["namespace"],
        "name": pod["metadata"]["name"],
    }


def refusal(config: Config, pod: dict[str, Any]) -> str:
    objects = [o for o in rendered(config)[1] if o["kind"].startswith("ValidatingAdmission")]
    policies = [o for o in objects if o["kind"].endswith("Policy")]
    bindings = [o for o in objects if o["kind"].endswith("Binding")]
    try:
        plugin.dispatch(
            attributes_of(pod), policies, bindings, lambda *_: None, NAMESPACE, Record()
        )
    except ApiError as exc:
        return exc.message.split("denied request: ", 1)[1]
    return ""


def assert_same(config: Config, pod: dict[str, Any]) -> None:
    webhook_pod, violations = webhook_outcome(config, pod)
    server_pod, refused = in_server_outcome(config, pod)
    assert bool(refused) == bool(violations), (violations, refused)
    if violations:
        assert refused == violations[0], (refused, violations)
        assert server_pod == pod  # nothing injected into a pod refused
    else:
        assert server_pod == webhook_pod


# -- the corpus ----------------------------------------------------------------------------------

NAMES = ("app", "worker", "exporter", "c-1")
# Per annotation: (values the webhook takes, values it refuses).
ANNOTATIONS = {
    "volcano-guard.io/flush-interval": (
        ("1", "0.5", "0.05", "60", "12.25", "07", "0.250000"),
        (
            *("60.5", "0.04", "fast", " 1", "1e0", "1_0", "+1", ".5", "5.", "", "0.1234567"),
            *("nan", "\u0661", "inf", "0.05\n", "x" * 81, "'; true"),
        ),
    ),
    "volcano-guard.io/ack": (("async", "sync"), ("maybe", "", "Sync", "sync ")),
    "volcano-guard.io/proxy-mode": (("args", "env"), ("magic", "ENV")),
    "volcano-guard.io/proxy-containers": (
        ("app", "app, worker", " worker ,, app,", "app,app", "", ",", "\u00a0app\u3000"),
        ("ghost", "app, ghost, spook", "\x1capp", "app\nworker", "g" * 90, '"'),
    ),
}


@st.composite
def containers(draw: Any, names: list[str]) -> list[dict[str, Any]]:
    found = []
    for name in names:
        container: dict[str, Any] = {"name": name, "image": "busybox"}
        for field, values in (
            ("args", [["--v=4"], ["a", "b"], []]),
            ("command", [["/bin/app"], []]),
            ("env", [[{"name": "KUBECONFIG", "value": "/etc/k"}], [{"name": "A", "value": "1"}]]),
            ("volumeMounts", [[{"name": "data", "mountPath": "/data"}]]),
        ):
            if draw(st.booleans()):
                container[field] = draw(st.sampled_from(values))
        found.append(container)
    return found


@st.composite
def labelled_pods(draw: Any) -> dict[str, Any]:
    names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=4, unique=True))
    spec: dict[str, Any] = {"containers": draw(containers(names))}
    init = draw(st.lists(st.sampled_from(["init-a", "init-b"]), max_size=2, unique=True))
    if init or draw(st.booleans()):
        spec["initContainers"] = draw(containers(init))
    if draw(st.booleans()):
        spec["volumes"] = draw(st.sampled_from([[{"name": "data", "emptyDir": {}}], []]))
    host = draw(st.sampled_from([None, True, False]))
    if host is not None:
        spec["hostNetwork"] = host
    grace = draw(st.sampled_from([None, 0, 10, 30, 55, 100]))
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    injected = draw(st.sampled_from([None] * 6 + ["initContainers", "containers"]))
    if injected:
        spec.setdefault(injected, []).append({"name": CONTAINER_NAME, "image": "x"})
    annotations: dict[str, str] = {}
    for key, (taken, refused) in ANNOTATIONS.items():
        present = draw(st.integers(0, 5))
        if present:
            annotations[key] = draw(st.sampled_from(taken if present > 1 else refused))
    metadata: dict[str, Any] = {
        "name": "p",
        "namespace": "team-a",
        "labels": {INJECT_LABEL: draw(st.sampled_from(["true"] * 7 + ["false"]))},
    }
    if annotations or draw(st.booleans()):
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


@pytest.mark.parametrize("name", sorted(CONFIGS))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pod=labelled_pods())
def test_generated_pods_end_the_same_injected_or_refused_for_the_same_reason(name, pod):
    assert_same(config_of(name), pod)


@pytest.mark.parametrize(
    ("key", "value"),
    [(key, value) for key, lists in ANNOTATIONS.items() for values in lists for value in values],
)
def test_every_annotation_value_of_the_corpus_ends_the_same(key, value):
    pod = minimal_pod()
    pod["spec"]["containers"].append({"name": "worker", "image": "x", "command": ["w"]})
    pod["metadata"]["annotations"] = {key: value}
    assert_same(config_of("default"), pod)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CONFIGS))
@settings(
    max_examples=600, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(pod=labelled_pods())
def test_many_generated_pods_end_the_same(name, pod):
    assert_same(config_of(name), pod)


@pytest.mark.parametrize(
    "workload",
    ["volcano-admission", "volcano-admission-init", "volcano-controllers", "volcano-scheduler"],
)
@pytest.mark.parametrize(
    "name",
    ["default", *(pytest.param(n, marks=pytest.mark.slow) for n in CONFIGS if n != "default")],
)
def test_volcanos_control_plane_pods_labelled_for_injection_end_the_same(workload, name):
    pod = copy.deepcopy(installer_pods()[workload])
    pod["metadata"].setdefault("labels", {})[INJECT_LABEL] = "true"
    assert_same(config_of(name), pod)
    injected, _ = in_server_outcome(config_of(name), pod)
    assert CONTAINER_NAME in [
        c["name"]
        for c in injected["spec"].get("initContainers", []) + injected["spec"]["containers"]
    ]
    assert in_server_outcome(config_of(name), injected) == (injected, "")  # reinvoked: no-op


# -- the forms themselves ------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_the_mutation_compiles_as_1_36_writes_it_to_a_list_of_json_patches(name):
    spec = map_spec(config_of(name))
    assert mutating_policies.mutation_errors(spec) == []
    assert mutating_admission.policy_errors(spec, KUBERNETES_1_36) == []
    assert spec["failurePolicy"] == "Ignore" and spec["reinvocationPolicy"] == "IfNeeded"


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_the_refusals_compile_as_1_30_writes_a_validating_policy(name):
    (policy,) = [
        o for o in rendered(config_of(name))[1] if o["kind"] == "ValidatingAdmissionPolicy"
    ]
    assert compile_errors(policy["spec"]) == []


def test_a_hostile_config_string_stays_one_literal_in_the_expression():
    mutation = the_mutation(config_of("hostile strings"))
    pod = copy.deepcopy(minimal_pod())
    injected, _ = in_server_outcome(config_of("hostile strings"), pod)
    sidecar = injected["spec"]["initContainers"][0]
    assert sidecar["image"] == HOSTILE
    assert sidecar["resources"] == {"requests": {"cpu": "10m", HOSTILE: "1"}, "limits": {}}
    assert "\n" not in mutation.json_patch and mutation.json_patch.isascii()
    assert all(e.isascii() and "\n" not in e for _, e in mutation.variables)


def minimal_pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "team-a", "labels": {INJECT_LABEL: "true"}},
        "spec": {"containers": [{"name": "app", "image": "x", "args": ["--v=1"]}]},
    }


@pytest.mark.parametrize(
    "text",
    [
        HOSTILE,
        "",
        "'",
        "\\",
        "\\'",
        "'\\",
        "\t\r\n",
        "\x7f\x80\xff",
        "\uffff\U0010ffff",
        "a\u0000b",
    ],
)
def test_any_string_is_one_cel_string_literal_of_itself(text):
    assert mutating_policies_value(cel_literal(text)) == text


def mutating_policies_value(expression: str) -> Any:
    from volcano_guard_sandbox.apiserver.matching import evaluate

    value, error = evaluate(program, expression, {})
    assert not error, error
    return value


def test_half_a_utf16_pair_is_refused_not_rendered():
    with pytest.raises(ValueError, match="U\\+D800 is half of a UTF-16 pair"):
        cel_literal("a\ud800")


def test_the_webhook_trims_proxy_container_names_as_cel_trim_does():
    every = [chr(c) for c in range(0x3100)] + ["\u3000", "\ufeff", "\u180e", "\u200b"]
    assert {c for c in every if cel_strings.trim(f"{c}a{c}") == "a"} == set(GO_SPACE)
    assert {c for c in every if c.strip() == ""} - set(GO_SPACE) == set("\x1c\x1d\x1e\x1f")


def test_under_host_network_warn_injection_stays_on_the_webhook():
    warn = config_from_dict({"policies": {"sidecarInjection": {"hostNetwork": "warn"}}})
    assert POLICY.mutate_in_server(warn) == ()
    (check,) = POLICY.in_server(warn)
    assert "!variables.hostNetwork" not in dict(check.validations)


def test_without_validating_policies_injection_stays_on_the_webhook():
    """The policy injects no pod with a problem and leaves refusing it to the check: without
    the check, a pod with a bad annotation would start without the sidecar."""
    config = config_from_dict({"validatingAdmissionPolicies": False})
    assert POLICY.mutate_in_server(config) == ()


@pytest.mark.parametrize("mode", ["warn", "audit", "off"])
def test_outside_enforce_mode_nothing_runs_in_the_server(mode):
    config = config_from_dict({"policies": {"sidecarInjection": {"mode": mode}}})
    assert POLICY.mutate_in_server(config) == () and POLICY.in_server(config) == ()


# -- cost -----------------------------------------------------------------------------------------


def wide_pod(count: int) -> dict[str, Any]:
    """A labelled pod of count app containers, each with args, env and a mount (every
    branch that reads the container), named as long as a DNS label may be."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "team-a", "labels": {INJECT_LABEL: "true"}},
        "spec": {
            "containers": [
                {
                    "name": f"{index:05d}-" + "c" * 57,
                    "image": "x",
                    "args": ["--v=1"],
                    "env": [{"name": "A", "value": "1"}],
                    "volumeMounts": [{"name": "d", "mountPath": "/d"}],
                }
                for index in range(count)
            ]
        },
    }


def mutation_cost(config: Config, pod: dict[str, Any]) -> int:
    """The least budget the mutation (its variables and expression) applies within."""
    mutation = the_mutation(config)
    inputs = PolicyInputs(object=pod, request=review_request(pod))
    variables = map_spec(config)["variables"]
    low, high = 0, cel_cost.RUNTIME_BUDGET
    while low < high:
        middle = (low + high) // 2
        try:
            mutating_policies.patch_operations(
                mutation.json_patch, inputs, variables, budget_total=middle
            )
        except mutating_policies.MutationError:
            low = middle + 1
        else:
            high = middle
    return low


@pytest.mark.slow
def test_a_pod_of_350_containers_is_injected_within_the_cost_limits():
    """350 app containers named 63 characters, every one a target. CEL here has no index of a
    list element (two-variable comprehensions and lists.range are 1.32 and 1.34 features the
    sandbox does not model), so each target's index is found by name: one traversal of the
    names each (the `targets` variable), a cost that grows with the square of the count,
    about 6 a pair of containers with names this long (1 with names under 10 characters):
    past about 400 such containers the variable exceeds the per-call limit and the API server
    applies the policy's failurePolicy."""
    pod = wide_pod(350)
    injected, refused = in_server_outcome(config_of("default"), pod)
    assert not refused and injected == webhook_outcome(config_of("default"), pod)[0]
    assert mutation_cost(config_of("default"), pod) <= cel_cost.PER_CALL_LIMIT


@pytest.mark.slow
def test_past_the_per_call_limit_the_mutation_fails_rather_than_patch_part_of_the_pod():
    pod = wide_pod(450)
    mutation = the_mutation(config_of("default"))
    inputs = PolicyInputs(object=pod, request=review_request(pod))
    with pytest.raises(mutating_policies.MutationError, match="actual cost limit exceeded"):
        mutating_policies.apply_json_patch_expression(
            mutation.json_patch, inputs, map_spec(config_of("default"))["variables"]
        )
