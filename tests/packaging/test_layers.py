"""The layer contracts in pyproject.toml hold, and catch what they exist for: checked by running
lint-imports, as `make lint` does, on copies of the packages with one import added."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.copies import run_on_copy

LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
PACKAGES = {
    "volcano_guard": REPO / "volcano_guard",
    "volcano_guard_sandbox": REPO / "sandbox" / "volcano_guard_sandbox",
}


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """lint-imports over the copies of the packages under root, with the repository's
    contracts; the copies come first on the path, before the installed packages."""
    config = str(REPO / "pyproject.toml")
    return run_on_copy(root, str(LINT_IMPORTS), "--config", config, "--no-cache", timeout=120)


@pytest.fixture
def packages(tmp_path) -> Path:
    for name, source in PACKAGES.items():
        shutil.copytree(source, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def add_import(module: Path, statement: str) -> None:
    """A function at the end of module that imports inside its body (grimp sees those too)."""
    with module.open("a") as file:
        file.write(f"\n\ndef _added() -> None:\n    {statement}\n")


def test_the_copies_keep_every_contract(packages):
    ran = lint_imports(packages)
    assert ran.returncode == 0, ran.stdout[-3000:]


@pytest.mark.parametrize(
    ("module", "statement", "contract"),
    [
        (
            "volcano_guard/audit/cluster.py",
            "import volcano_guard_sandbox.apiserver.store",
            "What ships never imports the sandbox harness",
        ),
        (
            "volcano_guard/cli.py",
            "from volcano_guard_sandbox import commands",
            "What ships never imports the sandbox harness",
        ),
        (
            "volcano_guard/webhook/config.py",
            "import volcano_guard.audit",
            "Layers run one way",
        ),
        (
            "volcano_guard/webhook/policies/node_name/decision.py",
            "from volcano_guard.webhook import metrics",
            "The webhook:",
        ),
        (
            "volcano_guard/webhook/policies/base.py",
            "from volcano_guard.webhook import caches",
            "The webhook:",
        ),
        (
            "volcano_guard/webhook/policies/node_name/settings.py",
            "from volcano_guard.webhook import evaluation",
            "The webhook:",
        ),
        (
            "volcano_guard/webhook/sections.py",
            "from volcano_guard.webhook import config",
            "The webhook:",
        ),
        (
            "volcano_guard_sandbox/apiserver/store.py",
            "import volcano_guard_sandbox.demo",
            "The harness:",
        ),
    ],
)
def test_a_forbidden_import_inside_a_function_breaks_its_contract(
    packages, module, statement, contract
):
    add_import(packages / module, statement)
    ran = lint_imports(packages)
    assert ran.returncode != 0, ran.stdout[-3000:]
    # "<name> BROKEN", or "<name> BROKEN (n ignored imports)" for a contract that ignores some
    broken = [line for line in ran.stdout.splitlines() if " BROKEN" in line]
    assert [line for line in broken if line.startswith(contract)], ran.stdout[-3000:]
