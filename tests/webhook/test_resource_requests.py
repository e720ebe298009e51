"""Policy resourceRequests, called as the server calls it: evaluate(phase, request, context)."""

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders import container, job_template, pod, review, volcano_cronjob, volcano_job
from volcano_guard.base.jsonpatch import apply_patch
from volcano_guard.webhook.config import config_from_dict
from volcano_guard.webhook.evaluation import evaluate
from volcano_guard.webhook.policies import resource_requests
from volcano_guard.webhook.policies.base import NOTHING_FOUND, PolicyContext
from volcano_guard.webhook.review import from_document
from volcano_guard.webhook.workloads import ObjectShapeError

FULL = {"cpu": "500m", "memory": "1Gi"}


def context(**resource_requests) -> PolicyContext:
    data = {"policies": {"resourceRequests": resource_requests}} if resource_requests else {}
    return PolicyContext(config=config_from_dict(data))


def validate(obj, operation="CREATE", ctx=None):
    return evaluate("validate", from_document(review(obj, operation)), ctx or context())


def mutate(obj, ctx):
    return evaluate("mutate", from_document(review(obj)), ctx)


def test_allows_pod_requesting_cpu_and_memory():
    result = validate(pod(container(requests=FULL)))
    assert result.decision.allowed
    assert [(r.policy, r.outcome) for r in result.results] == [("resourceRequests", "allowed")]


def test_denies_pod_without_cpu_request_naming_pod_container_field_and_fix():
    result = validate(pod(container("trainer", requests={"memory": "1Gi"})))
    assert not result.decision.allowed
    assert result.decision.code == 403
    message = result.decision.message
    assert 'Pod "team-a/train-0"' in message
    assert 'container "trainer"' in message
    assert "spec.containers[0].resources.requests.cpu" in message
    assert "set resources.requests.cpu" in message
    assert "memory" not in message.split("(")[0]


def test_checks_init_containers_too():
    obj = pod(container(requests=FULL), init=(container("setup", requests={"cpu": "1"}),))
    message = validate(obj).decision.message
    assert 'init container "setup" has no memory request' in message
    assert "spec.initContainers[0].resources.requests.memory" in message


def test_every_container_of_a_multi_container_pod_is_checked():
    obj = pod(container("a", requests=FULL), container("b"), container("c", requests=FULL))
    decision = validate(obj).decision
    assert decision.message.count('container "b"') == 2  # cpu and memory
    assert 'container "a"' not in decision.message


def test_limit_without_request_counts_as_requested_as_kubernetes_copies_it():
    assert validate(pod(container(limits={"cpu": "1", "memory": "1Gi"}))).decision.allowed


@pytest.mark.parametrize("bad", ["1.5 cores", "one", "", "1Gb", True])
def test_denies_a_request_that_is_not_a_quantity_quoting_it(bad):
    message = validate(pod(container(requests={"cpu": bad, "memory": "1Gi"}))).decision.message
    assert "invalid cpu request" in message
    quoted = f'"{bad}"' if isinstance(bad, str) else repr(bad)
    assert quoted in message
    assert "spec.containers[0].resources.requests.cpu" in message


def test_denies_a_bad_limit_too():
    obj = pod(container(requests=FULL, limits={"memory": "lots"}))
    assert 'invalid memory limit "lots"' in validate(obj).decision.message


@pytest.mark.parametrize(("bad", "told"), [("lots", '"lots"'), ("-1", '"-1"'), (True, "True")])
def test_limits_equal_to_requests_are_each_told_when_unusable(bad, told):
    obj = pod(
        container(requests={"cpu": bad, "memory": "1Gi"}, limits={"cpu": bad, "memory": "1Gi"})
    )
    message = validate(obj).decision.message
    for field in ("request", "limit"):
        assert f"cpu {field} {told}" in message
        assert f"resources.{field}s.cpu" in message


@pytest.mark.parametrize("flag", [True, False])
def test_a_bool_limit_is_no_quantity_even_where_it_equals_the_request(flag):
    obj = pod(
        container(
            requests={"cpu": int(flag), "memory": "1Gi"}, limits={"cpu": flag, "memory": "1Gi"}
        )
    )
    message = validate(obj).decision.message
    assert f"invalid cpu limit {flag!r}" in message
    assert "invalid cpu request" not in message


def test_guaranteed_pod_with_requests_equal_to_limits_is_allowed():
    both = {"cpu": "4", "memory": "16Gi"}
    assert validate(pod(container(requests=both, limits=dict(both)))).decision.allowed


def test_denies_a_negative_request():
    message = validate(pod(container(requests={"cpu": "-100m", "memory": "1Gi"}))).decision.message
    assert 'negative cpu request "-100m"' in message


@pytest.mark.parametrize(
    ("request_value", "limit", "allowed"),
    [
        ("2", "1", False),
        ("1001m", "1", False),
        ("1", "1000m", True),
        ("1Gi", "1G", False),
        ("1G", "1Gi", True),
        (2, "2", True),
    ],
)
def test_request_may_not_exceed_its_limit(request_value, limit, allowed):
    obj = pod(container(requests={"cpu": request_value, "memory": "1Gi"}, limits={"cpu": limit}))
    decision = validate(obj).decision
    assert decision.allowed is allowed
    if not allowed:
        assert "more than its limit" in decision.message


def test_pods_for_other_schedulers_are_not_handled():
    result = validate(pod(container(), scheduler="default-scheduler"))
    assert result.decision.allowed and result.results == ()


def test_configured_scheduler_names_are_honoured():
    ctx = PolicyContext(config=config_from_dict({"volcanoSchedulerNames": ["vc-a", "vc-b"]}))
    assert not validate(pod(container(), scheduler="vc-b"), ctx=ctx).decision.allowed
    assert validate(pod(container(), scheduler="volcano"), ctx=ctx).results == ()


def test_pod_update_is_not_handled():
    assert validate(pod(container()), operation="UPDATE").results == ()


def test_configured_resources_replace_the_default_list():
    ctx = context(resources=["nvidia.com/gpu"])
    assert (
        "no nvidia.com/gpu request"
        in validate(pod(container(requests=FULL)), ctx=ctx).decision.message
    )
    assert validate(pod(container(limits={"nvidia.com/gpu": 1})), ctx=ctx).decision.allowed


def test_volcano_job_denial_names_the_task_and_its_path():
    job = volcano_job(
        {"ps": [container("tf", requests=FULL)], "worker": [container("tf", requests={"cpu": "2"})]}
    )
    message = validate(job).decision.message
    assert 'Job "team-a/mnist" task "worker": container "tf" has no memory request' in message
    assert "spec.tasks[1].template.spec.containers[0].resources.requests.memory" in message
    assert 'task "ps"' not in message


@pytest.mark.parametrize(
    ("build", "subject", "path"),
    [
        (
            volcano_cronjob,
            'CronJob "team-a/nightly"',
            "spec.jobTemplate.spec.tasks[1].template.spec.containers[0].resources.requests.memory",
        ),
        (
            job_template,
            'JobTemplate "team-a/train"',
            "spec.tasks[1].template.spec.containers[0].resources.requests.memory",
        ),
    ],
)
@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
def test_kinds_volcano_makes_jobs_from_are_denied_naming_task_container_and_path(
    build, subject, path, operation
):
    obj = build(
        {"ps": [container("tf", requests=FULL)], "worker": [container("tf", requests={"cpu": "2"})]}
    )
    message = validate(obj, operation).decision.message
    assert f'{subject} task "worker": container "tf" has no memory request' in message
    assert path in message
    assert 'task "ps"' not in message
    complete = build({"worker": [container("tf", requests=FULL)]})
    assert validate(complete, operation).decision.allowed


def test_volcano_job_update_is_checked():
    job = volcano_job({"worker": [container("tf")]})
    assert not validate(job, operation="UPDATE").decision.allowed


def test_volcano_job_without_scheduler_name_gets_volcanos_default():
    assert not validate(volcano_job({"w": [container()]}, scheduler=None)).decision.allowed


def test_volcano_job_task_template_scheduler_overrides_the_jobs():
    job = volcano_job({"w": [container()]}, scheduler="volcano")
    job["spec"]["tasks"][0]["template"]["spec"]["schedulerName"] = "default-scheduler"
    assert validate(job).results == ()
    job = volcano_job({"w": [container()]}, scheduler="default-scheduler")
    assert validate(job).results == ()


def test_volcanos_example_job_shape_passes(tmp_path):
    from tests.conftest import REPO
    from volcano_guard.webhook.check import load_documents

    [job] = load_documents(REPO / "examples" / "manifests" / "volcano-job-ok.yaml")
    assert validate(job).decision.allowed


@pytest.mark.parametrize(
    ("spec_change", "needle"),
    [
        ({"containers": "main"}, "spec.containers must be a list"),
        ({"containers": [["x"]]}, "spec.containers[0] must be an object"),
        ({"containers": [{"name": 3}]}, "spec.containers[0].name must be a string"),
        ({"containers": [{"name": "a", "resources": []}]}, "spec.containers[0].resources"),
        ({"containers": [{"name": "a", "resources": {"requests": "1"}}]}, "requests must be"),
        (
            {"containers": [{"name": "a", "resources": {"limits": ["1"]}}]},
            "spec.containers[0].resources.limits must be an object",
        ),
        ({"schedulerName": ["volcano"]}, "spec.schedulerName must be a string"),
    ],
)
def test_object_of_the_wrong_shape_raises_shape_error_naming_the_path(spec_change, needle):
    obj = pod(container(requests=FULL))
    obj["spec"].update(spec_change)
    with pytest.raises(ObjectShapeError) as info:
        validate(obj)
    assert needle in str(info.value)


# --- defaults filled in by /mutate ------------------------------------------------------------

DEFAULTS = {"cpu": "100m", "memory": "128Mi"}


@pytest.mark.parametrize(
    ("resources", "expected"),
    [
        (None, {"requests": DEFAULTS}),
        ({}, {"requests": DEFAULTS}),
        ({"limits": {"cpu": "2"}}, {"limits": {"cpu": "2"}, "requests": {"memory": "128Mi"}}),
        ({"requests": None}, {"requests": DEFAULTS}),
        ({"requests": {"cpu": "1"}}, {"requests": {"cpu": "1", "memory": "128Mi"}}),
        ({"requests": FULL}, {"requests": FULL}),
    ],
)
def test_mutate_fills_missing_requests_for_every_resources_shape(resources, expected):
    main = {"name": "main", "image": "busybox"}
    if resources is not None:
        main["resources"] = resources
    obj = pod(main)
    result = mutate(obj, context(defaults=DEFAULTS))
    patched = apply_patch(obj, list(result.decision.patch))
    assert patched["spec"]["containers"][0]["resources"] == expected
    assert validate(patched, ctx=context(defaults=DEFAULTS)).decision.allowed


def test_mutate_fills_init_containers_and_job_tasks():
    job = volcano_job({"a": [container("x")], "b": [container("y", requests={"cpu": "1"})]})
    job["spec"]["tasks"][0]["template"]["spec"]["initContainers"] = [container("init")]
    result = mutate(job, context(defaults=DEFAULTS))
    patched = apply_patch(job, list(result.decision.patch))
    tasks = patched["spec"]["tasks"]
    assert tasks[0]["template"]["spec"]["initContainers"][0]["resources"]["requests"] == DEFAULTS
    assert tasks[0]["template"]["spec"]["containers"][0]["resources"]["requests"] == DEFAULTS
    assert tasks[1]["template"]["spec"]["containers"][0]["resources"]["requests"] == {
        "cpu": "1",
        "memory": "128Mi",
    }


def test_mutate_without_defaults_does_nothing():
    result = mutate(pod(container()), context())
    assert result.decision.patch == () and result.results == ()


def test_mutate_leaves_non_volcano_pods_alone():
    result = mutate(pod(container(), scheduler="default-scheduler"), context(defaults=DEFAULTS))
    assert result.decision.patch == ()


# --- modes ------------------------------------------------------------------------------------


def test_warn_mode_allows_with_a_warning_naming_the_policy():
    result = validate(pod(container("c")), ctx=context(mode="warn"))
    assert result.decision.allowed
    assert result.decision.warnings and result.decision.warnings[0].startswith(
        'resourceRequests: Pod "team-a/train-0": container "c" has no cpu request'
    )
    assert result.results[0].outcome == "warned"


def test_audit_mode_allows_with_an_audit_annotation():
    result = validate(pod(container("c")), ctx=context(mode="audit"))
    assert result.decision.allowed
    [(key, value)] = result.decision.audit_annotations
    assert key == "resourceRequests"
    assert "no cpu request" in value
    assert result.results[0].outcome == "audited"


def test_warn_mode_mutate_describes_instead_of_patching():
    result = mutate(pod(container("c")), context(mode="warn", defaults=DEFAULTS))
    assert result.decision.patch == ()
    assert 'would set container "c" requests cpu=100m, memory=128Mi' in result.decision.warnings[0]


def test_off_mode_skips_the_policy():
    result = validate(pod(container()), ctx=context(mode="off"))
    assert result.decision.allowed and result.results == ()


GUARANTEED = {"cpu": "4", "memory": "16Gi"}


@pytest.mark.parametrize(
    "obj",
    [
        pod(container(requests=GUARANTEED, limits=GUARANTEED)),
        pod(container(requests=FULL, limits={"cpu": "1", "memory": "2Gi", "nvidia.com/gpu": "1"})),
        pod(container(requests=FULL)),
        pod(container("a", requests=FULL), init=(container("setup", requests=FULL),)),
    ],
    ids=["guaranteed", "burstable-with-extra-limit", "no-limits", "init-container"],
)
def test_usual_volcano_pods_are_allowed(obj):
    assert validate(obj).results[0].outcome == "allowed"


GOOD_QUANTITIES = st.sampled_from(["1", "500m", "2", "16Gi", "1Gi", "0", "1e3", "2.5"])
HOSTILE: st.SearchStrategy[Any] = st.sampled_from(
    [None, "x", "", "-1", "1Gb", "1.5 cores", 1, 1.5, True, [], {}, "0", "64Gi", "volcano"]
)


@st.composite
def pod_specs(draw) -> dict:
    """A compliant Volcano pod's spec, then up to three of its fields set to hostile values or
    removed: near misses of every kind, and plenty of pods that pass."""

    def resources() -> dict:
        made = resources_of_a_kind()
        if draw(st.integers(0, 7)) == 0:  # requests or limits of the wrong type
            made[draw(st.sampled_from(["requests", "limits"]))] = draw(HOSTILE)
        return made

    def resources_of_a_kind() -> dict:
        requests = {"cpu": draw(GOOD_QUANTITIES), "memory": draw(GOOD_QUANTITIES)}
        if draw(st.booleans()):
            requests["nvidia.com/gpu"] = draw(GOOD_QUANTITIES)
        limits = draw(st.sampled_from(["same", "copy", "none", "other", "extra"]))
        if limits == "none":
            return {"requests": requests}
        if limits == "other":
            return {
                "requests": requests,
                "limits": {name: draw(GOOD_QUANTITIES) for name in requests},
            }
        if limits == "extra":  # a limit without a request
            extra = draw(st.one_of(GOOD_QUANTITIES, HOSTILE))
            return {"requests": requests, "limits": {**requests, "ephemeral-storage": extra}}
        return {
            "requests": requests,
            "limits": requests if limits == "same" else copy.copy(requests),
        }

    def containers() -> list:
        return [
            {"name": f"c{index}", "resources": resources()}
            for index in range(draw(st.integers(0, 2)))
        ]

    spec: dict = {"schedulerName": "volcano", "containers": containers()}
    if draw(st.booleans()):
        spec["initContainers"] = containers()
    places = [(spec, None)]  # (holder, key): every value in the spec, and the spec itself
    pending = [spec]
    while pending:
        holder = pending.pop()
        for key in holder if isinstance(holder, dict) else range(len(holder)):
            places.append((holder, key))
            if isinstance(holder[key], dict | list):
                pending.append(holder[key])
    for _ in range(draw(st.integers(0, 3))):
        holder, key = draw(st.sampled_from(places))
        if key is None:
            return draw(HOSTILE)
        if isinstance(holder, dict) and draw(st.booleans()):
            holder.pop(key, None)
        elif isinstance(holder, dict) or key < len(holder):
            holder[key] = draw(HOSTILE)
    return spec


CONFIGS = st.sampled_from(
    [
        {},
        {
            "volcanoSchedulerNames": ["volcano", "kube-batch"],
            "policies": {"resourceRequests": {"resources": ["cpu", "memory", "nvidia.com/gpu"]}},
        },
    ]
)


@pytest.mark.slow  # an attack fuzz run
@settings(max_examples=500, deadline=None)
@given(spec=pod_specs(), operation=st.sampled_from(["CREATE", "CREATE", "UPDATE"]), config=CONFIGS)
def test_hostile_pod_specs_get_a_verdict_or_a_shape_error_never_a_crash(spec, operation, config):
    obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "team-a"},
        "spec": spec,
    }
    request = from_document(review(obj, operation))
    ctx = PolicyContext(config=config_from_dict(config))
    try:
        verdict = resource_requests.validate(request, ctx)
    except ObjectShapeError as exc:
        assert str(exc)  # answered 400, naming the field
        return
    assert verdict is None or verdict is NOTHING_FOUND or verdict.violations
    if verdict is not None and verdict.violations:
        assert all(line.startswith('Pod "team-a/p": ') for line in verdict.violations)
