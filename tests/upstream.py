"""The upstream source files the project's facts come from: Volcano's and Kubernetes'.

The tests that pin a fact about Volcano or Kubernetes keep the fact as a table beside them
(transcribed from the file and function they name) and check that the source still says it.
The source is a folder of frozen files, `<project>/<revision>/<path>`, copied unchanged from each
project's repository: VOLCANO_GUARD_UPSTREAM names it, else `../shared/upstream` beside the
repository (where CI lays it). Where neither exists, those tests skip, saying so. They read it
inside the test, never at collection (a parametrize takes its cases from a table beside it).
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO

VOLCANO_COMMIT = "ed72c7c815a9fd547a787134676f73d42e9d049c"  # master, 2026-08
KUBERNETES_API_TAG = "v0.32.9"  # k8s.io/api of Kubernetes 1.32
ENVIRONMENT = "VOLCANO_GUARD_UPSTREAM"


def upstream_root() -> Path | None:
    """The folder of frozen upstream files, or None where this machine has none."""
    if named := os.environ.get(ENVIRONMENT):
        if not Path(named).is_dir():  # a mistyped folder must not turn the checks into skips
            pytest.fail(f"{ENVIRONMENT}={named} is not a folder")
        return Path(named)
    root = REPO.parent / "shared" / "upstream"
    return root if root.is_dir() else None


def upstream_file(project: str, revision: str, path: str) -> str:
    """The text of path in project's source at revision; skips when no upstream folder exists,
    fails when the folder exists but lacks the file (a fact's source must not vanish quietly)."""
    if "PYTEST_CURRENT_TEST" not in os.environ:
        # pytest sets it for a test's setup, call and teardown only. Read at collection (in a
        # parametrize), the skip below would be a collection error on every clone without the
        # source: CI, which has it, must fail too.
        raise RuntimeError(f"{project} {path} is read outside a test: read it inside the test")
    root = upstream_root()
    if root is None:
        pytest.skip(f"no upstream source on this machine (set {ENVIRONMENT}): {project} {path}")
    file = root / project / revision / path
    if not file.is_file():
        pytest.fail(f"{path} is not in {project} at {revision} under {root}")
    return file.read_text(encoding="utf-8")


def volcano_file(path: str, release: str | None = None) -> str:
    """path in Volcano's source at VOLCANO_COMMIT, or at a release tag (e.g. "v1.10.0")."""
    return upstream_file("volcano", release or VOLCANO_COMMIT, path)


@functools.cache
def volcano_manifest(path: str, release: str | None = None) -> list[dict[str, Any]]:
    """The objects of a Volcano YAML file, such as an installer (shared: read them only).
    libyaml's loader: 1 MB of installer in 0.3 s, not 3 s."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return [
        d for d in yaml.load_all(volcano_file(path, release), Loader=loader) if isinstance(d, dict)
    ]


def kubernetes_api_file(path: str) -> str:
    """path in k8s.io/api at KUBERNETES_API_TAG."""
    return upstream_file("kubernetes-api", KUBERNETES_API_TAG, path)


def go_function(source: str, name: str) -> str:
    """The text of Go function (or method) `name` in source: from `func` to its closing brace."""
    match = re.search(rf"^func (\([^)]*\) )?{re.escape(name)}\(.*?^}}", source, re.M | re.S)
    assert match, f"func {name} is not in the source"
    return match.group(0)
