"""Helpers for tests that run volcano-guard as a real process."""

from __future__ import annotations

import re
import subprocess
import sys
import time


def start_cli(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "volcano_guard.cli", *args],
                            stderr=subprocess.PIPE, text=True)


def wait_for_log(proc: subprocess.Popen[str], pattern: str, timeout: float = 20) -> re.Match:
    """The first stderr line matching pattern (the process logs its address when ready)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line and proc.poll() is not None:
            break
        match = re.search(pattern, line)
        if match:
            return match
    raise AssertionError(f"no log line matching {pattern!r}")
