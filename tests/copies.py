"""Commands run over a copy of the packages (a test changes the copy, never the checkout)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def run_on_copy(
    root: Path, *command: str, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """command in root, with the copies under root first on the path, before the installed
    (editable) packages of this checkout."""
    return subprocess.run(
        command,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
