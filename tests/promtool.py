"""Prometheus's own `promtool` (Debian package prometheus; .ci/run installs it): the tests that
prove metrics and rules with it skip, saying so, only where it is not installed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool is not installed (apt-get install prometheus; .ci/run does)")
    return path


def check_metrics(exposition: str) -> subprocess.CompletedProcess[str]:
    """`promtool check metrics` on an exposition text (its lint: names, units, HELP)."""
    return subprocess.run(
        [promtool(), "check", "metrics"],
        input=exposition,
        text=True,
        capture_output=True,
        check=False,
    )


def check_rules(rules_file: Path) -> subprocess.CompletedProcess[str]:
    """`promtool check rules` on a rules file (syntax, PromQL, duplicate names)."""
    return subprocess.run(
        [promtool(), "check", "rules", str(rules_file)], text=True, capture_output=True, check=False
    )


def run_rule_tests(test_file: Path) -> subprocess.CompletedProcess[str]:
    """`promtool test rules` on a unit-test file."""
    return subprocess.run(
        [promtool(), "test", "rules", str(test_file)], text=True, capture_output=True, check=False
    )
