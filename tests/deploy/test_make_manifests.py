"""`make manifests` in a copy of the repository's files: a config with a mistake fails with the
one-line error and leaves deploy/base/webhooks.yaml as it was (an empty one would install no
guard); a good one replaces it with what `volcano-guard manifests` prints."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

COPIED = ("Makefile", "pyproject.toml", "sandbox/pyproject.toml", "deploy/base/config.yaml")


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    for name in (*COPIED, "deploy/base/webhooks.yaml"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / name, tmp_path / name)
    bin_dir = tmp_path / "bin"  # $(BIN): this checkout's CLI, not an installed one
    bin_dir.mkdir()
    shim = bin_dir / "volcano-guard"
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -m volcano_guard.cli "$@"\n')
    shim.chmod(0o755)
    (tmp_path / "stamp").touch()  # newer than the pyproject files: nothing to install
    return tmp_path


def make_manifests(copy: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "sandbox")])}
    variables = [f"BIN={copy / 'bin'}", f"STAMP={copy / 'stamp'}"]
    return subprocess.run(
        ["make", "--no-print-directory", "manifests", *variables],
        cwd=copy, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_a_typo_in_the_config_fails_and_leaves_webhooks_yaml_untouched(copy):
    config = copy / "deploy/base/config.yaml"
    config.write_text(config.read_text().replace("failClosed: true", "failClosed: ture"))
    webhooks = copy / "deploy/base/webhooks.yaml"
    before = webhooks.read_bytes()
    result = make_manifests(copy)
    assert result.returncode != 0
    errors = [line for line in result.stderr.splitlines() if "volcano-guard" in line]
    assert len(errors) == 1 and "failClosed" in errors[0], result.stderr
    assert webhooks.read_bytes() == before
    assert not (copy / "deploy/base/webhooks.yaml.new").exists()


def test_a_good_config_replaces_webhooks_yaml_with_its_manifests(copy):
    webhooks = copy / "deploy/base/webhooks.yaml"
    webhooks.write_text("")
    result = make_manifests(copy)
    assert result.returncode == 0, result.stderr
    assert webhooks.read_bytes() == (REPO / "deploy/base/webhooks.yaml").read_bytes()
