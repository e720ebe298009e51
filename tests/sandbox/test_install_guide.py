"""docs/install.md's install commands, as written, against the sandbox: kubectl with its
default validation, through a kubeconfig as an operator has one. The test plays the
Deployment controller (the sandbox runs none) before `kubectl rollout status`."""

import json
import os
import shlex
import subprocess

import pytest

from tests.conftest import REPO
from tests.sandbox_fixtures import KUBECTL
from volcano_guard.base.kubeconfig import write_kubeconfig


def install_commands():
    """The kubectl lines of the guide's "Install" section, comments dropped."""
    guide = (REPO / "docs" / "install.md").read_text()
    section = guide[guide.index("## 3. Install with kustomize") :]
    block = section[
        section.index("```sh\n") + 6 : section.index("```", section.index("```sh\n") + 6)
    ]
    return [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]


@pytest.fixture
def operator(sandbox, tmp_path):
    if KUBECTL is None:
        pytest.skip("kubectl is not installed (.ci/run installs it)")
    write_kubeconfig(tmp_path / "config", sandbox.url)
    env = {**os.environ, "KUBECONFIG": str(tmp_path / "config")}

    def run(line):
        return subprocess.run(
            shlex.split(line), capture_output=True, text=True, timeout=60, env=env, cwd=REPO
        )

    return run


def roll_out(run, namespace, name):
    """What the Deployment controller and kubelets would write once the pods are up."""
    status = {
        "status": {
            "observedGeneration": 1,
            "replicas": 2,
            "updatedReplicas": 2,
            "readyReplicas": 2,
            "availableReplicas": 2,
        }
    }
    result = run(
        f"kubectl -n {namespace} patch deployment {name} --subresource=status "
        f"--type=merge -p '{json.dumps(status)}'"
    )
    assert result.returncode == 0, result.stderr


def test_the_install_guides_commands_pass_as_written(operator):
    commands = install_commands()
    assert commands[0] == "kubectl apply -k deploy/base" and len(commands) == 6
    for line in commands:
        if "rollout status" in line:
            roll_out(operator, "volcano-guard", line.split("/")[-1])
        result = operator(line)
        assert result.returncode == 0, f"{line}: {result.stderr}"
        assert "Warning" not in result.stderr, result.stderr
    for kind in (
        "deployment/volcano-guard",
        "deployment/volcano-guard-audit",
        "deployment/volcano-guard-reconciler",
        "servicemonitor/volcano-guard",
        "prometheusrule/volcano-guard",
        "poddisruptionbudget/volcano-guard",
    ):
        assert operator(f"kubectl -n volcano-guard get {kind}").returncode == 0, kind
    again = operator("kubectl apply -k deploy/base")
    assert again.returncode == 0, again.stderr
    changed = [line for line in again.stdout.splitlines() if not line.endswith(" unchanged")]
    # A PDB's selector has patch strategy "replace" (policy/v1 types.go), so kubectl's
    # computed patch is never empty and it says "configured" against any API server.
    assert changed == ["poddisruptionbudget.policy/volcano-guard configured"], changed


def test_a_mistyped_field_is_refused_as_kube_apiserver_refuses_it(operator, tmp_path):
    manifest = tmp_path / "sa.yaml"
    manifest.write_text(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: x, "
        "namespace: team-a}\nautomountServiceAcountToken: false\n"
    )
    result = operator(f"kubectl apply -f {manifest}")
    assert result.returncode != 0
    assert 'unknown field "automountServiceAcountToken"' in result.stderr
