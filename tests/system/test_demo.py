"""`volcano-guard demo` end to end, as `make demo` runs it (half a minute: the slow suite)."""

import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def result() -> subprocess.CompletedProcess[str]:
    """One run of the demo, read by every test here."""
    return subprocess.run(
        [sys.executable, "-m", "volcano_guard.cli", "demo"],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_demo_replays_the_examples_over_tls_and_prints_the_decisions(result):
    assert result.returncode == 0, result.stderr
    rows = {
        line.split()[0]: line.split()[1:3]
        for line in result.stdout.splitlines()
        if line[:2].isdigit()
    }
    assert rows["01-volcano-job-complete"] == ["allowed", "allowed"]
    assert rows["02-volcano-job-task-missing-cpu"] == ["allowed", "DENIED"]
    assert rows["03-pod-missing-memory-defaulted"] == ["PATCHED", "allowed"]
    assert rows["04-pod-init-container-no-requests"] == ["PATCHED", "DENIED"]
    assert rows["05-pod-bad-quantity"] == ["allowed", "DENIED"]
    assert rows["06-pod-request-over-limit"] == ["allowed", "DENIED"]
    assert rows["07-pod-default-scheduler"] == ["allowed", "allowed"]
    assert rows["08-configmap"] == ["allowed", "allowed"]
    assert rows["09-pod-node-name-on-volcano-node"] == ["allowed", "DENIED"]
    assert rows["10-pod-node-name-on-other-node"] == ["allowed", "allowed"]
    assert 'task "worker"' in result.stdout
    assert "volcano_guard_admission_requests_total{" in result.stdout
    assert "webhook shut down cleanly" in result.stdout
    storm = [
        line.split()
        for line in result.stdout.splitlines()
        if line.strip().startswith("10 ") and ("direct" in line or "sidecar" in line)
    ]
    modes = {row[1]: row for row in storm}
    assert set(modes) == {"direct", "sidecar"}
    assert int(modes["direct"][4].replace(",", "")) > 0  # 409s direct
    assert modes["sidecar"][4] == "0"  # and none through the sidecar


def kubectl_sessions(stdout: str) -> tuple[dict[str, str], dict[str, str]]:
    """What kubectl printed for each command: with the guard up, and with it stopped."""
    up, down = stdout[stdout.index("$ kubectl create namespace team-a") :].split(
        "with the webhook process stopped", 1
    )
    down = down[down.index("$ kubectl create namespace team-a") : down.index("Queue status")]
    return tuple(
        dict(block.split("\n", 1) for block in session.split("$ kubectl ")[1:])
        for session in (up, down)
    )  # type: ignore[return-value]


POLICY_REFUSED = (
    "ValidatingAdmissionPolicy 'volcano-guard-resource-requests' with binding "
    "'volcano-guard-resource-requests' denied request: Pod \"team-a/trainer\": "
    'container "worker" has no cpu request'
)


QUEUES = "apply -f examples/kubectl/queues.yaml"
QUEUE_OVER_PARENT = "apply -f examples/kubectl/queue-over-parent.yaml"
QUEUE_CYCLE = """patch queue research --type=merge -p '{"spec":{"parent":"research-vision"}}'"""


def test_demo_shows_the_registered_guard_answering_kubectl(result):
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed")
    assert result.returncode == 0, result.stderr
    said, _ = kubectl_sessions(result.stdout)
    assert said["create namespace team-a"].strip() == "namespace/team-a created"
    assert POLICY_REFUSED in said["apply -f examples/kubectl/pod-without-requests.yaml"]
    assert said["apply -f examples/kubectl/pod-with-requests.yaml"].strip() == (
        "pod/trainer created"
    )
    assert (
        "the node is managed by the Volcano scheduler"
        in said["apply -f examples/kubectl/pod-on-a-node.yaml"]
    )
    assert said["run web -n team-a --image=nginx"].strip() == "pod/web created"
    assert (
        "volcano-guard.io/generation-id"
        in said["get podgroup pg-train -n team-a -o jsonpath={.metadata.annotations}"]
    )
    assert "still has live member pods" in said["delete podgroup pg-train -n team-a"]
    assert "queue.scheduling.volcano.sh/research-vision created" in said[QUEUES]
    assert 'of its ancestor queue "research"' in said[QUEUE_OVER_PARENT]
    assert "makes a cycle" in said[QUEUE_CYCLE]


def test_demo_replays_kubectl_with_the_guard_stopped(result):
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed")
    _, said = kubectl_sessions(result.stdout)
    assert POLICY_REFUSED in said["apply -f examples/kubectl/pod-without-requests.yaml"]
    assert (
        "ValidatingAdmissionPolicy 'volcano-guard-node-name'"
        in said["apply -f examples/kubectl/pod-on-a-node.yaml"]
    )
    assert said["apply -f examples/kubectl/pod-with-requests.yaml"].strip() == (
        "pod/trainer created"
    )
    assert said["run web -n team-a --image=nginx"].strip() == "pod/web created"
    podgroup = said["create -f examples/kubectl/podgroup.yaml"]
    assert "pod/member created" in podgroup
    assert 'failed calling webhook "mutate.volcano-guard.io"' in podgroup
    assert 'failed calling webhook "validate.volcano-guard.io"' in said[QUEUES]
    assert "connect: connection refused" in podgroup
    assert "Failed calling webhook" not in result.stderr  # the API server's log, unseen


def test_demo_certifies_the_service_deploy_base_installs(result):
    """The demo's webhook serves a certificate for deploy/base's Service in deploy/base's
    namespace, the name the API server calls it by once installed."""
    import yaml

    from tests.conftest import REPO

    namespace = yaml.safe_load((REPO / "deploy/base/kustomization.yaml").read_text())["namespace"]
    service = yaml.safe_load((REPO / "deploy/base/service.yaml").read_text())["metadata"]["name"]
    assert result.returncode == 0, result.stderr
    assert f"(certificate for {service}.{namespace}.svc," in result.stdout


@pytest.mark.parametrize("after", [2.0, 6.0], ids=["while the guard starts", "while kubectl runs"])
def test_ctrl_c_ends_the_demo_at_once_with_130_and_no_traceback(after):
    """Ctrl-C interrupts the whole process group, the demo's children (webhook, kubectl) too."""
    import os
    import signal
    import time

    demo = subprocess.Popen(
        [sys.executable, "-m", "volcano_guard.cli", "demo"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    time.sleep(after)
    os.killpg(demo.pid, signal.SIGINT)
    interrupted = time.monotonic()
    _, err = demo.communicate(timeout=60)
    assert demo.returncode == 130, err
    assert time.monotonic() - interrupted < 5, err
    assert "Traceback" not in err, err
