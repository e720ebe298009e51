"""Sidecar injection: the patch applied to real-shaped pods, and the result validated against
the Kubernetes Pod schema (kubernetes-validate, offline)."""

import copy

import kubernetes_validate
import pytest

from volcano_guard.base.jsonpatch import apply_patch
from volcano_guard.webhook.config import config_from_dict
from volcano_guard.webhook.evaluation import evaluate
from volcano_guard.webhook.policies.base import PolicyContext
from volcano_guard.webhook.policies.sidecar_injection import CONTAINER_NAME, KUBECONFIG
from volcano_guard.webhook.review import from_document
from volcano_guard.webhook.workloads import ObjectShapeError

SCHEMA_VERSION = "1.30.0"


def volcano_controller_pod(**annotations):
    """The pod template of Volcano's controller-manager Deployment, labelled for injection."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "volcano-controllers-7d9f",
            "namespace": "volcano-system",
            "labels": {"app": "volcano-controller", "volcano-guard.io/inject": "true"},
            "annotations": annotations,
        },
        "spec": {
            "serviceAccountName": "volcano-controllers",
            "priorityClassName": "system-cluster-critical",
            "containers": [
                {
                    "name": "volcano-controllers",
                    "image": "volcanosh/vc-controller-manager:v1.10.0",
                    "args": [
                        "--logtostderr",
                        "--enable-healthz=true",
                        "--leader-elect=true",
                        "-v=4",
                        "2>&1",
                    ],
                    "imagePullPolicy": "IfNotPresent",
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                }
            ],
        },
    }


def admit(obj, *, copied=True, **sidecar):
    data = {"policies": {"sidecarInjection": sidecar}} if sidecar else {}
    ctx = PolicyContext(config=config_from_dict(data))
    request = from_document(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "i",
                "operation": "CREATE",
                "namespace": obj["metadata"]["namespace"],
                "name": obj["metadata"]["name"],
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "object": copy.deepcopy(obj) if copied else obj,
            },
        }
    )
    return evaluate("mutate", request, ctx)


def injected(obj, **sidecar):
    result = admit(obj, **sidecar)
    assert result.decision.allowed, result.decision.message
    patched = apply_patch(obj, list(result.decision.patch))
    kubernetes_validate.validate(patched, SCHEMA_VERSION, strict=True)
    return patched


def test_native_sidecar_is_the_first_init_container_and_the_app_gets_the_kubeconfig():
    pod = injected(volcano_controller_pod())
    sidecar = pod["spec"]["initContainers"][0]
    assert sidecar["name"] == CONTAINER_NAME and sidecar["restartPolicy"] == "Always"
    assert sidecar["securityContext"]["readOnlyRootFilesystem"] is True
    assert sidecar["resources"]["requests"] and sidecar["resources"]["limits"]
    app = pod["spec"]["containers"][0]
    assert app["args"][-1] == f"--kubeconfig={KUBECONFIG}"
    assert app["args"][:-1] == volcano_controller_pod()["spec"]["containers"][0]["args"]
    assert {
        "name": "volcano-guard-kubeconfig",
        "mountPath": "/var/run/volcano-guard",
        "readOnly": True,
    } in app["volumeMounts"]
    assert pod["spec"].get("terminationGracePeriodSeconds", 30) >= 20 + 10  # drain + margin


def test_termination_grace_covers_the_drain_timeout():
    assert (
        injected(volcano_controller_pod(), drainTimeout=40)["spec"]["terminationGracePeriodSeconds"]
        == 50
    )
    obj = volcano_controller_pod()
    obj["spec"]["terminationGracePeriodSeconds"] = 120
    assert injected(obj, drainTimeout=40)["spec"]["terminationGracePeriodSeconds"] == 120


def test_existing_init_containers_run_after_the_sidecar():
    obj = volcano_controller_pod()
    obj["spec"]["initContainers"] = [
        {
            "name": "migrate",
            "image": "busybox",
            "resources": {"requests": {"cpu": "10m", "memory": "8Mi"}},
        }
    ]
    pod = injected(obj)
    assert [c["name"] for c in pod["spec"]["initContainers"]] == [CONTAINER_NAME, "migrate"]


def test_plain_container_mode_and_env_mode():
    pod = injected(
        volcano_controller_pod(**{"volcano-guard.io/proxy-mode": "env"}), nativeSidecar=False
    )
    assert pod["spec"]["containers"][-1]["name"] == CONTAINER_NAME
    assert "restartPolicy" not in pod["spec"]["containers"][-1]
    assert {"name": "KUBECONFIG", "value": KUBECONFIG} in pod["spec"]["containers"][0]["env"]


def test_a_container_without_args_or_command_gets_env_so_its_image_cmd_survives():
    obj = volcano_controller_pod()
    del obj["spec"]["containers"][0]["args"]
    app = injected(obj)["spec"]["containers"][0]
    assert "args" not in app
    assert {"name": "KUBECONFIG", "value": KUBECONFIG} in app["env"]


def test_annotation_overrides_reach_the_sidecar_args():
    pod = injected(
        volcano_controller_pod(
            **{"volcano-guard.io/flush-interval": "0.5", "volcano-guard.io/ack": "sync"}
        )
    )
    args = pod["spec"]["initContainers"][0]["args"]
    assert args[args.index("--flush-interval") + 1] == "0.5"
    assert args[args.index("--ack") + 1] == "sync"


@pytest.mark.parametrize(
    ("annotation", "value", "needle"),
    [
        ("volcano-guard.io/flush-interval", "fast", "seconds from 0.05 to 60"),
        ("volcano-guard.io/flush-interval", "600", "seconds from 0.05 to 60"),
        ("volcano-guard.io/ack", "maybe", "allowed: async or sync"),
        ("volcano-guard.io/proxy-mode", "magic", "allowed: args or env"),
        ("volcano-guard.io/proxy-containers", "nope", "not containers of this pod"),
    ],
)
def test_bad_annotations_are_denied_naming_the_annotation_and_what_is_allowed(
    annotation, value, needle
):
    decision = admit(volcano_controller_pod(**{annotation: value})).decision
    assert not decision.allowed and decision.code == 403
    assert annotation in decision.message and needle in decision.message


def test_only_the_named_proxy_containers_are_pointed_at_the_sidecar():
    obj = volcano_controller_pod(**{"volcano-guard.io/proxy-containers": "volcano-controllers"})
    obj["spec"]["containers"].append(
        {
            "name": "exporter",
            "image": "x",
            "args": ["--a"],
            "resources": {"requests": {"cpu": "1m", "memory": "1Mi"}},
        }
    )
    pod = injected(obj)
    assert pod["spec"]["containers"][1]["args"] == ["--a"]


def test_a_host_network_pod_is_refused_unless_configured_to_warn():
    obj = volcano_controller_pod()
    obj["spec"]["hostNetwork"] = True
    refused = admit(obj).decision
    assert not refused.allowed and "uses hostNetwork" in refused.message
    assert "policies.sidecarInjection.hostNetwork: warn" in refused.message
    warned = admit(obj, hostNetwork="warn").decision
    assert warned.allowed and warned.patch
    assert any("every process on the node can reach it" in w for w in warned.warnings)


def test_injection_is_idempotent_and_unlabelled_pods_are_left_alone():
    once = injected(volcano_controller_pod())
    assert admit(once).decision.patch == ()
    plain = volcano_controller_pod()
    plain["metadata"]["labels"].pop("volcano-guard.io/inject")
    assert admit(plain).decision.patch == () and admit(plain).results == ()


def test_the_injected_pod_passes_the_resource_requests_policy():
    pod = injected(volcano_controller_pod())
    pod["spec"]["schedulerName"] = "volcano"
    request = from_document(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "v",
                "operation": "CREATE",
                "namespace": "volcano-system",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "object": pod,
            },
        }
    )
    result = evaluate("validate", request, PolicyContext(config=config_from_dict({})))
    assert result.decision.allowed, result.decision.message


def test_the_sidecar_writes_a_kubeconfig_that_points_at_itself(tmp_path):
    import json

    from volcano_guard.base.kubeconfig import write_kubeconfig

    path = tmp_path / "sub" / "kubeconfig"
    write_kubeconfig(str(path), "http://127.0.0.1:8001")
    document = json.loads(path.read_text())
    assert document["clusters"][0]["cluster"]["server"] == "http://127.0.0.1:8001"
    from kubernetes import client, config

    configuration = client.Configuration()
    config.load_kube_config(config_file=str(path), client_configuration=configuration)
    assert configuration.host == "http://127.0.0.1:8001"


def test_labels_that_are_not_an_object_mean_no_injection():
    pod = volcano_controller_pod()
    pod["metadata"]["labels"] = "volcano-guard.io/inject=true"
    assert admit(pod).results == ()


@pytest.mark.parametrize(
    ("field", "value", "path"),
    [
        ("containers", ["not-a-container"], "spec.containers[0] must be an object"),
        ("initContainers", {"name": "x"}, "spec.initContainers must be a list"),
    ],
)
def test_containers_of_the_wrong_shape_are_a_shape_error_naming_the_path(field, value, path):
    pod = volcano_controller_pod()
    pod["spec"][field] = value
    with pytest.raises(ObjectShapeError, match=path.replace("[", r"\[").replace("]", r"\]")):
        admit(pod)


def test_a_non_string_annotation_is_denied_with_the_value_shown_bounded():
    deep = "x"
    for _ in range(990):  # nested past Python's recursion limit for repr()
        deep = [deep]
    pod = volcano_controller_pod(**{"volcano-guard.io/proxy-containers": deep})
    result = admit(pod, copied=False)  # deepcopy() cannot copy it
    assert not result.decision.allowed
    assert "proxy-containers is [[[[...]]]], not a string" in result.decision.message


def test_the_flush_interval_annotation_reaches_the_sidecar_as_written():
    pod = injected(volcano_controller_pod(**{"volcano-guard.io/flush-interval": "0.50"}))
    args = pod["spec"]["initContainers"][0]["args"]
    assert args[args.index("--flush-interval") + 1] == "0.50"


@pytest.mark.parametrize("value", [" 1", "1e0", "1_0", "+1", ".5", "5.", "0.1234567", "\u0661"])
def test_a_flush_interval_not_written_as_plain_decimal_seconds_is_refused(value):
    """What CEL's double() and Python's float() read alike, so the API server's policy and the
    webhook take the same values."""
    decision = admit(volcano_controller_pod(**{"volcano-guard.io/flush-interval": value})).decision
    assert not decision.allowed and "a decimal number of seconds" in decision.message


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("fast", '"fast"'),
        ("a\nb", "a value of 3 characters, not shown"),
        ("x" * 81, "a value of 81 characters, not shown"),
    ],
)
def test_a_bad_annotation_is_shown_only_as_one_short_printable_line(value, said):
    decision = admit(volcano_controller_pod(**{"volcano-guard.io/ack": value})).decision
    assert f"volcano-guard.io/ack is {said}; allowed: async or sync" in decision.message


def test_past_20_containers_an_unknown_proxy_container_names_only_their_count():
    pod = volcano_controller_pod(**{"volcano-guard.io/proxy-containers": "ghost"})
    pod["spec"]["containers"] *= 21
    message = admit(pod).decision.message
    assert 'names "ghost", not containers of this pod (it has 21 containers)' in message


def test_a_pod_with_more_containers_than_an_answer_can_patch_is_refused_before_building_it(
    monkeypatch,
):
    """A forged labelled pod of 200,000 containers once cost ~2 s and ~285 MB building a patch
    the answer's size cap then refused; now it is refused first, as resourceRequests does."""
    monkeypatch.setattr("volcano_guard.webhook.policies.sidecar_injection.PATCHED_CONTAINERS", 3)
    pod = volcano_controller_pod()
    app = pod["spec"]["containers"][0]
    pod["spec"]["containers"] = [{**app, "name": f"app-{i}"} for i in range(4)]
    decision = admit(pod).decision
    assert not decision.allowed and not decision.patch
    assert "has 4 containers, more than the 3 one answer can point at the sidecar" in (
        decision.message
    )
    pod["spec"]["containers"] = pod["spec"]["containers"][:3]
    assert admit(pod).decision.patch
