"""`audit --watch` follows its config file (a ConfigMap volume, updated as the kubelet does):
a pod naming a missing PodGroup, inside the first config's grace period, is counted as an orphan
once the file shortens it; a bad file is refused and counted, the last good config kept."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.audit.test_audit_watch import big_pod, sample, scrape, wait_for
from tests.configmap_volume import ConfigMapVolume
from volcano_guard.base.kubeconfig import write_kubeconfig
from volcano_guard_sandbox.processes import free_port

pytestmark = pytest.mark.slow  # an audit process against a sandbox: 16 s


def test_a_shorter_orphan_grace_is_applied_without_a_restart(sandbox, core, tmp_path):
    volume = ConfigMapVolume(tmp_path / "config")
    volume.write("audit: {orphanGracePeriod: 1h}\n")
    kubeconfig = tmp_path / "kubeconfig"
    write_kubeconfig(kubeconfig, sandbox.url)
    pod = big_pod("member", "1")
    pod["metadata"]["annotations"] = {"scheduling.k8s.io/group-name": "missing"}
    core.create_namespaced_pod("team-a", pod)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "volcano_guard.cli", "audit", "--watch", "--kubeconfig",
         str(kubeconfig), "--config", str(volume.path), "--metrics-listen", f"127.0.0.1:{port}",
         "--lease-namespace", "team-a", "--lease-duration", "3"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_for(port, lambda page: sample(page, "audit_leader") == 1, timeout=20)
        assert sample(scrape(port), "orphaned_pods", namespace="team-a") is None  # within 1h

        volume.write("audit: {orphanGracePeriod: 1s}\n")
        took = wait_for(port, lambda page: sample(page, "orphaned_pods", namespace="team-a") == 1)
        assert took < 8, f"took {took:.1f}s"
        page = scrape(port)
        assert sample(page, "config_reloads_total", result="applied") == 1

        volume.write("audit: {orphanGracePeriod: soon}\n")
        wait_for(port, lambda page: sample(page, "config_reloads_total", result="rejected") == 1)
        time.sleep(0.5)
        assert sample(scrape(port), "orphaned_pods", namespace="team-a") == 1  # still 1s
    finally:
        proc.terminate()
        assert proc.wait(10) == 0
