"""Two `audit --watch` replicas whose clocks are 60 s apart (faketime shifts one process's
clock), as two nodes with drifting clocks run them: for two minutes exactly one of them leads
(its `volcano_guard_audit_leader` is 1 at every scrape) and only its identity writes
PolicyReports; killed, it is followed by the other once the lease runs out.
Long: in the slow suite (.ci/run installs faketime and runs it)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.processes import LIBFAKETIME
from volcano_guard.base.kubeconfig import write_kubeconfig
from volcano_guard_sandbox.apiserver.authn import load_token_file
from volcano_guard_sandbox.apiserver.runner import SandboxThread
from volcano_guard_sandbox.apiserver.server import AUDIT_KEY, SandboxSettings
from volcano_guard_sandbox.processes import free_port

pytestmark = pytest.mark.slow
LEASE_SECONDS, RETRY = 3, 0.6  # --lease-duration 3: renewals min(2, 3/5) s apart
WINDOW = 120.0
SLACK = 0.5  # seconds for the survivor's write and the test's scrape
TOKENS = """audit-a,audit-a,1,"system:serviceaccounts"
audit-b,audit-b,2,"system:serviceaccounts"
"""
SEED = [
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}},
    {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "gpu-1"},
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "10"}},
    },
]


def orphan(index: int) -> dict:
    """A pod naming a PodGroup that does not exist: a finding, so reports keep being written."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"orphan-{index}",
            "namespace": "team-a",
            "annotations": {"scheduling.k8s.io/group-name": "gone"},
        },
        "spec": {"schedulerName": "volcano", "containers": [{"name": "c", "image": "x"}]},
    }


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[SandboxThread]:
    if LIBFAKETIME is None:
        pytest.skip("faketime is not installed (.ci/run installs it)")
    (tmp_path / "tokens.csv").write_text(TOKENS)
    settings = SandboxSettings(
        tokens=load_token_file(tmp_path / "tokens.csv"), audit_events=100_000
    )
    with SandboxThread(settings=settings) as sandbox:
        sandbox.seed(SEED)
        yield sandbox


def replica(
    sandbox: SandboxThread, directory: Path, user: str, skew: int
) -> tuple[subprocess.Popen[bytes], int]:
    """An audit --watch process as `user`, its clock `skew` seconds off; its metrics port."""
    directory.mkdir()
    kubeconfig = directory / "kubeconfig"
    write_kubeconfig(kubeconfig, sandbox.url, token=user)
    config = directory / "config.yaml"
    config.write_text("audit: {orphanGracePeriod: 1s}\n")
    port = free_port()
    # libfaketime preloaded into the replica itself (the faketime wrapper would be the process
    # a kill reaches, and the replica would live on)
    clock = {"LD_PRELOAD": str(LIBFAKETIME), "FAKETIME": f"{skew:+d}s"} if skew else {}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "volcano_guard.cli",
            "audit",
            "--watch",
            "--kubeconfig",
            str(kubeconfig),
            "--config",
            str(config),
            "--metrics-listen",
            f"127.0.0.1:{port}",
            "--lease-namespace",
            "team-a",
            "--lease-duration",
            str(LEASE_SECONDS),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **clock},
    )
    return proc, port


def leading(port: int) -> int | None:
    """The replica's volcano_guard_audit_leader, or None when it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1) as page:
            for line in page.read().decode().splitlines():
                if line.startswith("volcano_guard_audit_leader "):
                    return int(float(line.split()[1]))
    except OSError:
        return None
    return None


def report_writers(sandbox: SandboxThread) -> set[str]:
    """The users whose writes of PolicyReports the sandbox answered with success."""
    events = sandbox.call(lambda box: box.app[AUDIT_KEY].events())
    return {
        event["user"]
        for event in events
        if "policyreports" in event["resource"]
        and event["verb"] in ("create", "update", "patch")
        and event["code"] < 300
    }


@pytest.mark.parametrize("skew", [60, -60], ids=["b 60 s ahead", "b 60 s behind"])
def test_clocks_60_s_apart_one_leader_one_report_writer_and_a_takeover(cluster, tmp_path, skew):
    a, a_port = replica(cluster, tmp_path / "a", "audit-a", 0)
    b, b_port = replica(cluster, tmp_path / "b", "audit-b", skew)
    try:
        deadline = time.monotonic() + 30
        while (leading(a_port), leading(b_port)) not in ((1, 0), (0, 1)):
            assert time.monotonic() < deadline, "no replica came to lead"
            time.sleep(0.2)
        leaders, scrapes, started = set(), 0, time.monotonic()
        while time.monotonic() - started < WINDOW:
            seen = (leading(a_port), leading(b_port))
            assert seen in ((1, 0), (0, 1)), f"at {time.monotonic() - started:.1f} s: {seen}"
            leaders.add(seen)
            scrapes += 1
            if scrapes % 80 == 0:  # every 20 s a new finding, so reports are written
                cluster.seed([orphan(scrapes)])
            time.sleep(0.25)
        assert len(leaders) == 1, leaders  # the same one all along
        leader_is_a = leaders == {(1, 0)}
        writers = report_writers(cluster)
        assert writers == {"audit-a" if leader_is_a else "audit-b"}, writers
        leader, survivor_port = (a, b_port) if leader_is_a else (b, a_port)
        leader.kill()
        killed = time.monotonic()
        # The survivor saw the last renewal at most a retry after it was made and tries again
        # the moment that record runs out on its clock: duration + retry after the kill, and
        # a little for the write and the scrape.
        while leading(survivor_port) != 1:
            waited = time.monotonic() - killed
            assert waited < LEASE_SECONDS + RETRY + SLACK, f"no takeover in {waited:.2f} s"
            time.sleep(0.05)
        print(f"takeover {time.monotonic() - killed:.2f} s after the kill")
    finally:
        for proc in (a, b):
            if proc.poll() is None:
                proc.terminate()
                proc.wait(10)
