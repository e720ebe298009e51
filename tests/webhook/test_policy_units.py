"""Each policy is one unit behind a small public interface: code outside a policy (the registry,
`check`, the audit, the node-state publisher, the config, the harness and the benchmarks)
imports only the names its `__all__` lists, from the policy itself, never one of its modules."""

from __future__ import annotations

import ast
import functools
import importlib
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO
from volcano_guard.webhook.evaluation import POLICIES as REGISTERED

POLICIES = "volcano_guard.webhook.policies"
POLICIES_DIR = REPO / "volcano_guard" / "webhook" / "policies"
SHARED = {"__init__", "base"}  # what every policy builds on, not a policy
# Each policy: a module, or a package (one job a module) when it grows.
UNITS = sorted(
    path.stem if path.suffix == ".py" else path.name
    for path in POLICIES_DIR.iterdir()
    if (path.suffix == ".py" or (path / "__init__.py").exists()) and path.stem not in SHARED
)
# Where the rest of the guard lives: what ships, the harness and the benchmarks. Tests may
# reach inside a policy to test its parts.
OUTSIDE = (REPO / "volcano_guard", REPO / "sandbox", REPO / "bench")


@functools.cache  # every unit's test reads the same files
def imports(path: Path) -> tuple[tuple[int, str, tuple[str, ...]], ...]:
    """(line, module, names) of every import in path; names () for `import module`."""
    found: list[tuple[int, str, tuple[str, ...]]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module, tuple(alias.name for alias in node.names)))
        elif isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name, ()) for alias in node.names)
    return tuple(found)


def sources_outside(unit: str) -> Iterator[Path]:
    inside = POLICIES_DIR / unit
    for root in OUTSIDE:
        for path in root.rglob("*.py"):
            if path != inside.with_suffix(".py") and inside not in path.parents:
                yield path


@pytest.mark.parametrize("unit", UNITS)
def test_outside_a_policy_only_its_public_names_are_imported(unit):
    package = f"{POLICIES}.{unit}"
    public = set(importlib.import_module(package).__all__)
    wrong = []
    for path in sources_outside(unit):
        for line, module, names in imports(path):
            where = f"{path.relative_to(REPO)}:{line}"
            if module.startswith(f"{package}."):
                wrong.append(f"{where} imports {module}, a module inside the policy")
            elif module == package:
                wrong.extend(
                    f"{where} imports {name}, not in {unit}.__all__"
                    for name in names
                    if name not in public
                )
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("unit", UNITS)
def test_a_policy_lists_only_names_used_outside_it(unit):
    """Its interface stays small: each name it lists is named somewhere outside it."""
    policy = importlib.import_module(f"{POLICIES}.{unit}")
    outside = "\n".join(path.read_text() for path in sources_outside(unit))
    assert [name for name in policy.__all__ if not re.search(rf"\b{name}\b", outside)] == []


@pytest.mark.parametrize("unit", UNITS)
def test_a_policy_lists_only_names_it_has(unit):
    """Its interface is written down (`__all__`), and holds no private name."""
    policy = importlib.import_module(f"{POLICIES}.{unit}")
    assert [name for name in policy.__all__ if not hasattr(policy, name)] == []
    assert [name for name in policy.__all__ if name.startswith("_")] == []


def test_every_unit_registers_its_policies():
    """Each module or package beside base is a policy in the registry, and each policy the
    registry runs is defined in one (where its mode is read)."""
    defined_in = {policy.mode.__module__.removeprefix(f"{POLICIES}.") for policy in REGISTERED}
    assert {module.partition(".")[0] for module in defined_in} == set(UNITS)
