"""Volcano's own source, where this machine has a copy: the tests that pin a fact about Volcano
keep the fact as a table beside them (transcribed from the file and function they name) and,
when the source is here, also check that the source still says it.

Set VOLCANO_SRC to a clone of volcano-sh/volcano (a work tree or a bare git directory); without
it, the copy the project's tooling fetches is used if present. The tables were read at commit
VOLCANO_COMMIT."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

VOLCANO_COMMIT = "ed72c7c815a9fd547a787134676f73d42e9d049c"
_DEFAULT_CLONE = Path("/work/.mirror/volcano-sh+volcano/repo")


def volcano_file(path: str, release: str | None = None) -> str:
    """The text of path in Volcano's source at VOLCANO_COMMIT (or HEAD), or at a release tag
    (e.g. "v1.10.0"); skips when the source is absent."""
    clone = Path(os.environ.get("VOLCANO_SRC", _DEFAULT_CLONE))
    if not clone.exists():
        pytest.skip(f"Volcano's source is not on this machine (set VOLCANO_SRC): {path}")
    for revision in (release,) if release else (VOLCANO_COMMIT, "HEAD"):
        shown = subprocess.run(["git", "-C", str(clone), "show", f"{revision}:{path}"],
                               capture_output=True, text=True, check=False)
        if shown.returncode == 0:
            return shown.stdout
    pytest.fail(f"{path} is not in Volcano's source at {clone}")


def go_function(source: str, name: str) -> str:
    """The text of Go function (or method) `name` in source: from `func` to its closing brace."""
    match = re.search(rf"^func (\([^)]*\) )?{re.escape(name)}\(.*?^}}", source, re.M | re.S)
    assert match, f"func {name} is not in the source"
    return match.group(0)
