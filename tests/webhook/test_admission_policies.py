"""The guard's ValidatingAdmissionPolicies decide as its webhook does. The policies that
`volcano-guard manifests` prints validate against the Kubernetes 1.30 schemas and compile in the
sandbox's 1.30 environment; and over one corpus (generated pods, the pod examples in
examples/admissions) the sandbox's admission-policy plugin running them and the webhook's policy
code give the same allow or deny, with the same reason."""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.policy_cost import job_costs, largest_job, volcano_job
from tests.conftest import REPO
from tests.upstream import volcano_file, volcano_manifest
from volcano_guard.base.informer import static_snapshot
from volcano_guard.cli import main
from volcano_guard.webhook.admission_policies import admission_policies
from volcano_guard.webhook.config import Config, config_from_dict
from volcano_guard.webhook.evaluation import evaluate
from volcano_guard.webhook.node_states import NodeRange, configmap, desired_states, plan
from volcano_guard.webhook.policies.base import PolicyContext
from volcano_guard.webhook.policies.node_name import NODES
from volcano_guard.webhook.review import (
    AdmissionRequest,
    GroupVersionKind,
    GroupVersionResource,
    UserInfo,
)
from volcano_guard_sandbox.apiserver import cel_cost, cel_eval, pod_validation, policy_validation
from volcano_guard_sandbox.apiserver import policies as plugin
from volcano_guard_sandbox.apiserver.admission import Record
from volcano_guard_sandbox.apiserver.matching import Attributes, User
from volcano_guard_sandbox.apiserver.policy_validation import compile_errors
from volcano_guard_sandbox.apiserver.store import ApiError

# Every node the corpus names exists; with managedNodeSelectors, the train ones are managed.
NODE_LABELS = {
    "gpu-1": {"volcano.sh/role": "train"},
    "cpu-1": {"volcano.sh/role": "train"},
    "web-1": {"role": "web"},
}
NODE_NAMES = tuple(NODE_LABELS)
SELECTORS = {"managedNodeSelectors": ["volcano.sh/role:train"]}
DAEMONSET_CONTROLLER = "system:serviceaccount:kube-system:daemon-set-controller"
CONFIGS: dict[str, dict[str, Any]] = {
    "default": {"validatingAdmissionPolicies": True},
    "gpus, warn, exemptions": {
        "validatingAdmissionPolicies": True,
        "volcanoSchedulerNames": ["volcano", "batch"],
        "policies": {
            "resourceRequests": {"resources": ["cpu", "nvidia.com/gpu"]},
            "nodeName": {
                "mode": "warn",
                "exemptUsers": ["ops"],
                "exemptGroups": ["admins"],
                "allowDaemonSets": False,
            },
        },
    },
    # The node states published as params, split over several ConfigMaps (STATES_LIMIT).
    "selectors": {"policies": {"nodeName": {**SELECTORS, "bindingGuard": {"mode": "enforce"}}}},
    "selectors, unknown nodes allowed": {
        "policies": {
            "nodeName": {**SELECTORS, "unknownNodes": "allow", "bindingGuard": {"mode": "enforce"}}
        }
    },
}
STATES_LIMIT = 20  # bytes of states a ConfigMap holds here: one or two nodes each


def config_of(name: str) -> Config:
    return config_from_dict(CONFIGS[name])


# -- what manifests prints ------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_manifests_prints_policies_valid_for_1_30_that_compile(name, tmp_path, capsys):
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(CONFIGS[name]))
    assert main(["manifests", "--config", str(config)]) == 0
    documents = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]
    vaps = [d for d in documents if d["kind"] == "ValidatingAdmissionPolicy"]
    bindings = [d for d in documents if d["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert {v["metadata"]["name"] for v in vaps} == {
        "volcano-guard-resource-requests",
        "volcano-guard-volcano-resource-requests",
        "volcano-guard-node-name",
        "volcano-guard-bindings",
        "volcano-guard-podgroup-generation-id",
        "volcano-guard-sidecar-host-network",
        "volcano-guard-queue-resources",
    }
    assert {b["spec"]["policyName"] for b in bindings} == {v["metadata"]["name"] for v in vaps}
    for document in vaps + bindings:
        kubernetes_validate.validate(document, "1.30.0", strict=True)
    for vap in vaps:
        assert compile_errors(vap["spec"]) == []


def test_the_mode_sets_the_validation_actions_and_off_or_false_emits_nothing():
    warn = config_of("gpus, warn, exemptions")
    actions = {
        b["metadata"]["name"]: b["spec"]["validationActions"]
        for b in admission_policies(warn)
        if b["kind"] == "ValidatingAdmissionPolicyBinding"
    }
    assert actions == {
        "volcano-guard-resource-requests": ["Deny"],
        "volcano-guard-volcano-resource-requests": ["Deny"],
        "volcano-guard-node-name": ["Warn"],
        "volcano-guard-bindings": ["Audit"],
        "volcano-guard-podgroup-generation-id": ["Deny"],
        "volcano-guard-sidecar-host-network": ["Deny"],
        "volcano-guard-queue-resources": ["Deny"],
    }
    assert admission_policies(config_from_dict({"validatingAdmissionPolicies": False})) == []
    off = config_from_dict(
        {
            "validatingAdmissionPolicies": True,
            "policies": {"nodeName": {"mode": "off", "bindingGuard": {"mode": "off"}}},
        }
    )
    assert [
        p["metadata"]["name"]
        for p in admission_policies(off)
        if p["kind"] == "ValidatingAdmissionPolicy"
    ] == [
        "volcano-guard-resource-requests",
        "volcano-guard-volcano-resource-requests",
        "volcano-guard-podgroup-generation-id",
        "volcano-guard-queue-resources",
        "volcano-guard-sidecar-host-network",
    ]


def test_with_managed_node_selectors_the_node_checks_read_the_published_states():
    policies = {
        p["metadata"]["name"]: p
        for p in admission_policies(config_of("selectors"))
        if p["kind"] == "ValidatingAdmissionPolicy"
    }
    for name in ("volcano-guard-node-name", "volcano-guard-bindings"):
        assert policies[name]["spec"]["paramKind"] == {"apiVersion": "v1", "kind": "ConfigMap"}
    binding = next(
        p
        for p in admission_policies(config_of("selectors"))
        if p["kind"] == "ValidatingAdmissionPolicyBinding"
        and p["spec"]["policyName"] == "volcano-guard-node-name"
    )
    assert binding["spec"]["paramRef"] == {
        "namespace": "volcano-guard",
        "parameterNotFoundAction": "Allow",
        "selector": {"matchLabels": {"volcano-guard.io/params": "node-states"}},
    }
    assert len(published_states(config_of("selectors"))) > 1  # the corpus spans ranges


# -- the same verdicts ---------------------------------------------------------------------------

# kind -> (API group, version, resource, subresource) of a CREATE of it.
SENT_AS = {
    "Pod": ("", "v1", "pods", ""),
    "Binding": ("", "v1", "pods", "binding"),
    "Job": ("batch.volcano.sh", "v1alpha1", "jobs", ""),
    "CronJob": ("batch.volcano.sh", "v1alpha1", "cronjobs", ""),
    "JobTemplate": ("flow.volcano.sh", "v1alpha1", "jobtemplates", ""),
}


def webhook_evaluation(
    config: Config, obj: dict[str, Any], user: str, groups: tuple[str, ...]
) -> Any:
    """The webhook's policies on obj's CREATE by user, every node of NODE_NAMES known."""
    group, version, resource, subresource = SENT_AS[obj["kind"]]
    request = AdmissionRequest(
        uid="u",
        kind=GroupVersionKind(group, version, obj["kind"]),
        resource=GroupVersionResource(group, version, resource),
        operation="CREATE",
        sub_resource=subresource,
        namespace=obj["metadata"]["namespace"],
        name=obj["metadata"]["name"],
        user=UserInfo(user, groups),
        object=obj,
    )
    nodes = static_snapshot(NODE_LABELS)
    return evaluate("validate", request, PolicyContext(config, {NODES: nodes}))


def webhook_verdict(
    config: Config, pod: dict[str, Any], user: str, groups: tuple[str, ...]
) -> tuple[bool, dict[str, str]]:
    """(allowed, the first reason of each policy that denies, without its field path)."""
    evaluation = webhook_evaluation(config, pod, user, groups)
    reasons = {}
    for result in evaluation.results:
        if result.verdict.violations and result.mode == "enforce":
            first = result.verdict.violations[0]
            path = first.find(" (spec.")
            reasons[result.policy] = (
                first[:path] + first[first.index(")", path) + 1 :] if path >= 0 else first
            )
    return evaluation.decision.allowed, reasons


def published_states(
    config: Config,
    labels: Mapping[str, Mapping[str, str]] = NODE_LABELS,
    existing: list[NodeRange] | None = None,
) -> list[dict[str, Any]]:
    """The node-state ConfigMaps the guard publishes for these nodes, as they are once its
    writes are done."""
    ranges = {r.start: r for r in existing or []}
    for written in plan(list(ranges.values()), desired_states(labels, config), STATES_LIMIT):
        ranges[written.start] = written
    return [configmap(r, "volcano-guard") for r in ranges.values()]


def params_of(configmaps: list[dict[str, Any]]) -> plugin.ParamLookup:
    """The sandbox's params lookup over these ConfigMaps (the only paramKind used)."""

    def lookup(api_version: str, kind: str) -> plugin.ParamSource | None:
        if (api_version, kind) != ("v1", "ConfigMap"):
            return None
        return plugin.ParamSource(
            True,
            lambda namespace: [c for c in configmaps if c["metadata"]["namespace"] == namespace],
        )

    return lookup


def in_server_verdict(
    config: Config,
    obj: dict[str, Any],
    user: str,
    groups: tuple[str, ...],
    params: list[dict[str, Any]] | None = None,
) -> tuple[bool, str, list[str]]:
    """(allowed, the denial's message, warnings) from the sandbox's admission-policy plugin,
    the node states published for NODE_LABELS (or these ConfigMaps) as params."""
    group, version, resource, subresource = SENT_AS[obj["kind"]]
    objects = admission_policies(config)
    attributes = Attributes(
        operation="CREATE",
        group=group,
        version=version,
        resource=resource,
        subresource=subresource,
        kind=(group, version, obj["kind"]),
        namespace=obj["metadata"]["namespace"],
        name=obj["metadata"]["name"],
        user=User(user, "", groups),
        object=obj,
    )
    record = Record()
    try:
        plugin.dispatch(
            attributes,
            [o for o in objects if o["kind"].endswith("Policy")],
            [o for o in objects if o["kind"].endswith("Binding")],
            params_of(published_states(config) if params is None else params),
            None,
            record,
        )
    except ApiError as exc:
        return False, exc.message.split("denied request: ", 1)[1], record.warnings
    return True, "", record.warnings


def assert_same_verdict(
    config: Config,
    pod: dict[str, Any],
    user: str = "alice",
    groups: tuple[str, ...] = ("system:authenticated",),
) -> None:
    allowed, reasons = webhook_verdict(config, pod, user, groups)
    in_server_allowed, message, _ = in_server_verdict(config, pod, user, groups)
    assert in_server_allowed == allowed, (pod, reasons, message)
    if not allowed:
        assert message in reasons.values(), (message, reasons)


requirement = st.sampled_from(["requests", "limits", "both", None])
quantities = {"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": "1", "ephemeral-storage": "1Gi"}


@st.composite
def containers(draw: Any, prefix: str) -> list[dict[str, Any]]:
    found = []
    for index in range(draw(st.integers(0 if prefix == "init" else 1, 3))):
        resources: dict[str, dict[str, str]] = {}
        for name, value in quantities.items():
            where = draw(requirement)
            for field in ("requests", "limits") if where == "both" else (where,):
                if field:
                    resources.setdefault(field, {})[name] = value
        container: dict[str, Any] = {"name": f"{prefix}-{index}", "image": "busybox"}
        if resources or draw(st.booleans()):
            container["resources"] = resources
        found.append(container)
    return found


@st.composite
def pods(draw: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": "p-" + draw(st.sampled_from(["a", "b"])),
        "namespace": draw(st.sampled_from(["team-a", "kube-system"])),
    }
    if draw(st.booleans()):
        metadata["annotations"] = {"kubernetes.io/config.mirror": "hash"}
    if draw(st.booleans()):
        metadata["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "name": "d",
                "uid": "u",
                "controller": True,
            }
        ]
    spec: dict[str, Any] = {"containers": draw(containers("main"))}
    init = draw(containers("init"))
    if init:
        spec["initContainers"] = init
    scheduler = draw(st.sampled_from(["volcano", "batch", "default-scheduler", None]))
    if scheduler:
        spec["schedulerName"] = scheduler
    node = draw(st.sampled_from([None, *NODE_NAMES]))
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


users = st.sampled_from(
    [
        ("alice", ("system:authenticated",)),
        ("ops", ()),
        ("bob", ("admins",)),
        ("system:node:gpu-1", ("system:nodes",)),
        (DAEMONSET_CONTROLLER, ()),
    ]
)


@pytest.mark.parametrize("name", sorted(CONFIGS))
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pod=pods(), user=users)
def test_generated_pods_get_the_same_verdict_and_reason(name, pod, user):
    assert_same_verdict(config_of(name), pod, *user)


SCHEDULER = "system:serviceaccount:volcano-system:volcano-scheduler"
ENFORCED_BINDINGS = {
    **CONFIGS["default"],
    "policies": {"nodeName": {"bindingGuard": {"mode": "enforce"}}},
}


@settings(max_examples=100, deadline=None)
@given(
    user=st.sampled_from([SCHEDULER, "alice", "", "other-scheduler"]),
    node=st.sampled_from(["gpu-1", "web-1", ""]),
)
def test_bindings_get_the_same_verdict_and_reason(user, node):
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "p", "namespace": "team-a"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    assert_same_verdict(config_from_dict(ENFORCED_BINDINGS), binding, user, ())


def example_pods() -> list[Any]:
    found = []
    for path in sorted((REPO / "examples" / "admissions").glob("*.yaml")):
        request = yaml.safe_load(Path(path).read_text())["request"]
        if request["kind"]["kind"] == "Pod" and request["operation"] == "CREATE":
            pod = copy.deepcopy(request["object"])
            pod["metadata"].setdefault("namespace", request.get("namespace", "default"))
            found.append(pytest.param(pod, id=path.name))
    return found


# Pods kube-apiserver refuses before any admission policy sees them: a quantity that does not
# parse fails to decode, a request over its limit fails the Pod's own validation (which runs
# before the validating admission plugins). The webhook, called after that validation too,
# refuses them all the same; the in-server policies need not.
REFUSED_BEFORE_ADMISSION = {"05-pod-bad-quantity.yaml", "06-pod-request-over-limit.yaml"}


@pytest.mark.parametrize("pod", example_pods())
def test_the_examples_get_the_same_verdict_and_reason(pod, request):
    if request.node.callspec.id in REFUSED_BEFORE_ADMISSION:
        assert not webhook_verdict(config_of("default"), pod, "alice", ())[0]
        assert in_server_verdict(config_of("default"), pod, "alice", ())[0]
        # ... because the API server refuses it first (the sandbox as kube-apiserver does)
        assert pod_validation.decode_error(pod) or pod_validation.resource_errors(pod)
        return
    assert_same_verdict(config_of("default"), pod)


def test_a_denial_names_what_the_webhook_names():
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "team-a"},
        "spec": {
            "schedulerName": "volcano",
            "containers": [
                {
                    "name": "ok",
                    "image": "x",
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                },
                {"name": "worker", "image": "x", "resources": {"limits": {"cpu": "1"}}},
            ],
        },
    }
    allowed, message, _ = in_server_verdict(config_of("default"), pod, "alice", ())
    assert not allowed
    assert message == (
        'Pod "team-a/p": container "worker" has no memory request; Volcano '
        "accounts node resources by requests, so set resources.requests.memory "
        "(or a limit, which Kubernetes copies into the request)"
    )


def test_a_node_that_does_not_exist_is_refused_by_both_for_different_reasons():
    """The API server cannot tell a node the cluster lacks: the in-server policy calls every
    named node managed (true of every node there is, with no managedNodeSelectors), where the
    webhook says the node is unknown (docs/decisions/registrations.md, "Where they differ")."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "team-a"},
        "spec": {"nodeName": "ghost", "containers": [{"name": "c", "image": "x"}]},
    }
    allowed, reasons = webhook_verdict(config_of("default"), pod, "alice", ())
    in_server_allowed, message, _ = in_server_verdict(config_of("default"), pod, "alice", ())
    assert not allowed and not in_server_allowed
    assert "the node is not known to volcano-guard" in reasons["nodeName"]
    assert "the node is managed by the Volcano scheduler" in message


# -- Volcano Jobs, CronJobs and JobTemplates --------------------------------------------------

# What a reason says, whoever words it: (object, task, container kind, container, resource,
# problem); the values and the parser's own words are not compared.
REASON = re.compile(
    r'^\w+ "(?P<object>[^"]+)" task "(?P<task>[^"]+)": (?P<kind>init container'
    r'|container) "(?P<container>[^"]+)" (?:has no (?P<missing>\S+) request'
    r"|has an? (?P<unusable>invalid|negative) (?P<resource>\S+) (?P<field>"
    r"request|limit)|requests (?P<over>\S+) )"
)


def reason(text: str) -> tuple[str | None, ...]:
    match = REASON.match(text)
    assert match, text
    return tuple(match.groupdict().values())


values = st.sampled_from(["500m", "3", 1, "-1", "-500m", "abc", "1.5 cores", "64Gi"])
# A mutation of a complete container: a resource dropped, or a value replaced.
mutations = st.tuples(
    st.sampled_from(["requests", "limits"]),
    st.sampled_from(["cpu", "memory", "gpu"]),
    st.one_of(st.none(), values),
)


@st.composite
def task_containers(draw: Any, prefix: str) -> list[dict[str, Any]]:
    found = []
    for index in range(draw(st.integers(0 if prefix == "init" else 1, 2))):
        resources = {
            "requests": {"cpu": "1", "memory": "1Gi"},
            "limits": {"cpu": "2", "memory": "2Gi"},
        }
        for field, resource, value in draw(st.lists(mutations, max_size=2)):
            if value is None:
                resources[field].pop(resource, None)
            else:
                resources[field][resource] = value
        found.append({"name": f"{prefix}-{index}", "image": "x", "resources": resources})
    return found


@st.composite
def volcano_objects(draw: Any) -> dict[str, Any]:
    tasks = []
    for index in range(draw(st.integers(1, 3))):
        spec: dict[str, Any] = {"containers": draw(task_containers("main"))}
        init = draw(task_containers("init"))
        if init:
            spec["initContainers"] = init
        scheduler = draw(st.sampled_from([None, "volcano", "default-scheduler"]))
        if scheduler:
            spec["schedulerName"] = scheduler
        tasks.append({"name": f"task-{index}", "replicas": 1, "template": {"spec": spec}})
    job_spec: dict[str, Any] = {"tasks": tasks}
    scheduler = draw(st.sampled_from([None, "volcano", "default-scheduler"]))
    if scheduler:
        job_spec["schedulerName"] = scheduler
    kind = draw(st.sampled_from(["CronJob", "Job", "JobTemplate"]))
    group = SENT_AS[kind][0]
    spec = (
        {"schedule": "0 * * * *", "jobTemplate": {"spec": job_spec}}
        if kind == "CronJob"
        else job_spec
    )
    return {
        "apiVersion": f"{group}/v1alpha1",
        "kind": kind,
        "metadata": {"name": "train", "namespace": "team-a"},
        "spec": spec,
    }


def volcano_verdicts(config: Config, obj: dict[str, Any]) -> tuple[Any, Any]:
    """(what each of the webhook's reasons says, what the in-server denial says or None)."""
    evaluation = webhook_evaluation(config, obj, "alice", ())
    reasons = [reason(v) for r in evaluation.results for v in r.verdict.violations]
    allowed, message, _ = in_server_verdict(config, obj, "alice", ())
    return reasons, None if allowed else reason(message)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(obj=volcano_objects())
def test_volcano_jobs_get_the_same_verdict_and_one_of_the_webhooks_reasons(obj):
    reasons, denied = volcano_verdicts(config_of("default"), obj)
    assert (denied is None) == (not reasons), (reasons, denied)
    if denied is not None:
        assert denied in reasons, (denied, reasons)


@pytest.mark.parametrize("template", [{}, {"metadata": {"labels": {"a": "b"}}}])
def test_a_cronjob_whose_job_template_has_no_spec_is_admitted_by_both(template):
    """jobTemplate.spec is omitempty: the in-server check read it unguarded, an error that
    refused what the webhook (no tasks, nothing to judge) admits."""
    cronjob = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "CronJob",
        "metadata": {"name": "train", "namespace": "team-a"},
        "spec": {"schedule": "0 * * * *", "jobTemplate": template},
    }
    assert volcano_verdicts(config_of("default"), cronjob) == ([], None)


@pytest.mark.parametrize(
    ("requests", "limits", "expected"),
    [
        ({"cpu": "1"}, {}, {"missing": "memory"}),
        (
            {"cpu": "1", "memory": "-1Gi"},
            {},
            {"unusable": "negative", "resource": "memory", "field": "request"},
        ),
        (
            {"cpu": "1", "memory": "1Gi"},
            {"cpu": "abc"},
            {"unusable": "invalid", "resource": "cpu", "field": "limit"},
        ),
        ({"cpu": "2", "memory": "1Gi"}, {"cpu": "1"}, {"over": "cpu"}),
    ],
)
def test_each_kind_of_problem_is_refused_in_the_server_for_the_same_reason(
    requests, limits, expected
):
    job = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "team-a"},
        "spec": {
            "tasks": [
                {
                    "name": "worker",
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "tf",
                                    "image": "x",
                                    "resources": {"requests": requests, "limits": limits},
                                }
                            ]
                        }
                    },
                }
            ]
        },
    }
    reasons, denied = volcano_verdicts(config_of("default"), job)
    assert denied is not None and reasons == [denied]
    said = dict(zip(REASON.groupindex, denied, strict=True))
    assert (said["object"], said["task"], said["container"]) == ("team-a/train", "worker", "tf")
    assert {key: said[key] for key in expected} == expected


def test_volcanos_job_crd_admits_the_negative_quantities_the_policy_refuses():
    """Why the Volcano kinds' policy checks quantities: the Job CRD's pattern for a resource
    quantity lets a sign through (and a request over its limit is no schema's concern), so
    nothing before admission refuses them."""
    crd = volcano_file("config/crd/volcano/bases/batch.volcano.sh_jobs.yaml", "v1.11.0")
    patterns = set(re.findall(r"pattern: (\^\(\\\+\|-\)\?.*\$)", crd))
    assert len(patterns) == 1
    quantity = re.compile(patterns.pop())
    assert quantity.match("-1") and quantity.match("-500m") and quantity.match("2Gi")
    assert not quantity.match("abc") and not quantity.match("1.5 cores")


# The workloads of Volcano's installer at v1.11.0: named here, not read at collection, so that
# their tests skip where the source is not (a clone) and are one each where it is.
INSTALLER_WORKLOADS = (
    "volcano-admission",
    "volcano-admission-init",
    "volcano-controllers",
    "volcano-scheduler",
)


def installer_pods() -> dict[str, dict[str, Any]]:
    """The pods of Volcano's own installer (its control plane), as their templates make them,
    by workload name."""
    found = {}
    for document in volcano_manifest("installer/volcano-development.yaml", "v1.11.0"):
        if document.get("kind") in ("Deployment", "Job", "DaemonSet"):
            template = document["spec"]["template"]
            metadata = {
                **template.get("metadata", {}),
                "name": document["metadata"]["name"],
                "namespace": document["metadata"]["namespace"],
            }
            found[document["metadata"]["name"]] = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": metadata,
                "spec": template["spec"],
            }
    return found


def test_the_installer_has_the_workloads_named_here():
    assert sorted(installer_pods()) == sorted(INSTALLER_WORKLOADS)


@pytest.mark.parametrize("workload", INSTALLER_WORKLOADS)
def test_volcanos_control_plane_pods_get_the_same_verdict(workload):
    pod = installer_pods()[workload]
    assert_same_verdict(config_of("default"), pod)
    assert_same_verdict(config_of("gpus, warn, exemptions"), pod)


# -- node states as params --------------------------------------------------------------------


def pinned_pod(node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "team-a"},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]},
    }


@pytest.mark.parametrize("name", ["selectors", "selectors, unknown nodes allowed"])
@pytest.mark.parametrize("node", [*NODE_NAMES, "ghost", "a", "zzz"])
def test_known_and_unknown_nodes_get_the_same_verdict_and_reason_from_the_states(name, node):
    assert_same_verdict(config_of(name), pinned_pod(node))
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "p", "namespace": "team-a"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    assert_same_verdict(config_of(name), binding, "alice", ())


def test_before_the_guard_publishes_any_state_the_policy_leaves_pods_to_the_webhook():
    """Params are collected before matchConditions run: refusing when there are none would
    refuse every pod CREATE in the cluster, so none means the check is skipped. A pinned pod
    then gets through only if the webhook is down too."""
    for node in ("gpu-1", "web-1"):
        assert in_server_verdict(config_of("selectors"), pinned_pod(node), "alice", (), params=[])[
            0
        ]
    unpinned = {
        **pinned_pod("x"),
        "spec": {
            "schedulerName": "volcano",
            "containers": [
                {"name": "c", "image": "x", "resources": {"requests": {"cpu": "1", "memory": "1"}}}
            ],
        },
    }
    assert in_server_verdict(config_of("selectors"), unpinned, "alice", (), params=[])[0]


def test_a_node_that_joins_while_the_guard_is_down_is_refused_until_it_is_published():
    config, joined = config_of("selectors"), {**NODE_LABELS, "web-2": {"role": "web"}}
    stale = published_states(config)
    assert not in_server_verdict(config, pinned_pod("web-2"), "alice", (), stale)[0]
    assert in_server_verdict(
        config, pinned_pod("web-2"), "alice", (), published_states(config, joined)
    )[0]


def test_a_node_relabelled_managed_while_the_guard_is_down_stays_unmanaged_until_it_is_back():
    """The one way stale states admit what the webhook refuses (docs/decisions/registrations.md,
    "Which nodes are managed")."""
    config, relabelled = config_of("selectors"), {**NODE_LABELS, "web-1": SELECTOR_LABELS}
    pod = pinned_pod("web-1")
    assert in_server_verdict(config, pod, "alice", (), published_states(config))[0]
    assert not webhook_verdict_for(config, pod, relabelled)
    assert not in_server_verdict(config, pod, "alice", (), published_states(config, relabelled))[0]


SELECTOR_LABELS = {"volcano.sh/role": "train"}


def webhook_verdict_for(
    config: Config, pod: dict[str, Any], labels: Mapping[str, Mapping[str, str]]
) -> bool:
    request = AdmissionRequest(
        uid="u",
        kind=GroupVersionKind("", "v1", "Pod"),
        resource=GroupVersionResource("", "v1", "pods"),
        operation="CREATE",
        namespace="team-a",
        name="p",
        user=UserInfo("alice", ()),
        object=pod,
    )
    return evaluate(
        "validate", request, PolicyContext(config, {NODES: static_snapshot(labels)})
    ).decision.allowed


def test_a_valid_volcano_job_past_cel_cpps_iteration_cap_is_admitted_as_1_30_admits_it():
    """34 tasks of 100 containers, each with cpu and memory requests under its limits: a
    variable of the resource-requests policy iterates 10,234 times, past cel-cpp's cap of
    10,000, which denied it; kube-apiserver 1.30 has no cap, and its cost (bench.policy_cost)
    is within every limit."""
    job = volcano_job(tasks=34, containers=100)
    assert in_server_verdict(config_of("default"), job, "alice", ()) == (True, "", [])


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_the_sandbox_counts_the_cost_of_every_expression_of_the_policies(name):
    """No expression of the guard's policies falls back to cel-cpp, whose evaluation counts no
    cost and stops at 10,000 iterations."""
    for policy in admission_policies(config_of(name)):
        if policy["kind"] != "ValidatingAdmissionPolicy":
            continue
        spec = policy["spec"]
        for field_name, key in (
            ("matchConditions", "expression"),
            ("variables", "expression"),
            ("validations", "expression"),
            ("validations", "messageExpression"),
        ):
            for item in spec.get(field_name) or ():
                expression = item[key]
                assert cel_eval.plan_of(policy_validation.program, expression), expression


@pytest.mark.slow
def test_the_largest_job_etcd_stores_is_admitted_within_the_cost_limits():
    """The Job of bench.policy_cost: 14,095 containers in 1.5 MiB. Its resource-requests
    policy's containersOverLimit variable cost 1,142,818 there, over kube-apiserver's per-call
    limit of 1,000,000, and 1.30 (failurePolicy Fail) refused the valid Job; the policy's
    variables now cost at most 367,597 and its validations 2,329,364 of 10,000,000."""
    job = largest_job()
    assert in_server_verdict(config_of("default"), job, "alice", ()) == (True, "", [])
    found = job_costs(config_of("default"), job)[0][1]
    assert found.validations + found.messages <= cel_cost.RUNTIME_BUDGET
    assert found.costliest[0] <= cel_cost.PER_CALL_LIMIT


def requests_below_limits(job: dict[str, Any]) -> dict[str, Any]:
    """The Job with every container's limits above its requests, as burstable pods have them
    (the same size: every quantity is compared, none is equal)."""
    job = copy.deepcopy(job)
    for task in job["spec"]["tasks"]:
        for container in task["template"]["spec"]["containers"]:
            container["resources"]["limits"] = {"cpu": "2", "memory": "2"}
    return job


@pytest.mark.slow
@pytest.mark.parametrize("shape", ["requests at limits", "requests below limits"])
def test_every_expression_of_the_guards_policies_costs_at_most_half_a_call_on_the_largest_job(
    shape,
):
    """Headroom of 2x the per-call limit, for every variable, validation and message of every
    policy (and webhook matchConditions) that sees a Volcano Job, on the largest one etcd
    stores (bench.policy_cost); each policy's total well within the evaluation's budget. Slow:
    building and evaluating the 1.5 MiB Job takes about 6 s."""
    job = largest_job() if shape == "requests at limits" else requests_below_limits(largest_job())
    for name, found in job_costs(config_of("default"), job):
        assert found.costliest[0] <= cel_cost.PER_CALL_LIMIT // 2, (name, found.costliest)
        assert found.validations + found.messages <= cel_cost.RUNTIME_BUDGET // 2, name
