"""`volcano-guard demo` end to end, as `make demo` runs it (half a minute: the slow suite)."""

import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow


def test_demo_replays_the_examples_over_tls_and_prints_the_decisions():
    result = subprocess.run([sys.executable, "-m", "volcano_guard.cli", "demo"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line.split()[1:3] for line in result.stdout.splitlines()
            if line[:2].isdigit()}
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
    storm = [line.split() for line in result.stdout.splitlines()
             if line.strip().startswith("10 ") and ("direct" in line or "sidecar" in line)]
    modes = {row[1]: row for row in storm}
    assert set(modes) == {"direct", "sidecar"}
    assert int(modes["direct"][4].replace(",", "")) > 0  # 409s direct
    assert modes["sidecar"][4] == "0"  # and none through the sidecar
