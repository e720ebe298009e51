"""docs/reference.md is the contract: every command flag, config key, annotation key and metric
name the code has is on it, and the repository cites nothing a user does not have."""

from __future__ import annotations

import argparse
import re
import subprocess
import typing

import msgspec
import pytest

from tests.conftest import REPO
from volcano_guard.cli import build_parser
from volcano_guard.webhook.config import Config
from volcano_guard_sandbox.commands import PARSERS

REFERENCE = (REPO / "docs" / "reference.md").read_text()
SOURCES = sorted((REPO / "volcano_guard").rglob("*.py"))


def command_flags(parser: argparse.ArgumentParser, path: str = "") -> set[tuple[str, str]]:
    """(command, long flag) for every option of every command."""
    found = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found |= command_flags(sub, f"{path} {name}".strip())
        else:
            found |= {
                (path, flag)
                for flag in action.option_strings
                if flag.startswith("--") and flag not in ("--help", "--version")
            }
    return found


def config_keys(struct: type = Config, prefix: str = "") -> set[str]:
    keys = set()
    hints = typing.get_type_hints(struct)
    for field in msgspec.structs.fields(struct):
        hint = hints[field.name]
        if isinstance(hint, type) and issubclass(hint, msgspec.Struct):
            keys |= config_keys(hint, f"{prefix}{field.name}.")
        else:
            keys.add(f"{prefix}{field.name}")
    return keys


def in_sources(pattern: str) -> set[str]:
    return {found for source in SOURCES for found in re.findall(pattern, source.read_text())}


def every_command_flag() -> set[tuple[str, str]]:
    """The product's commands' flags, and those of the commands the harness hands it."""
    found = command_flags(build_parser())
    for name, parser in PARSERS.items():
        found |= command_flags(parser(), name)
    return found


@pytest.mark.parametrize(("command", "flag"), sorted(every_command_flag()))
def test_every_command_flag_is_in_the_reference(command, flag):
    synopsis = [
        line for line in REFERENCE.splitlines() if line.startswith(f"volcano-guard {command}")
    ]
    assert synopsis, f"volcano-guard {command} has no synopsis line"
    start = REFERENCE.index(synopsis[0])
    block = REFERENCE[
        start : REFERENCE.index("\nvolcano-guard ", start + 1)
        if "\nvolcano-guard " in REFERENCE[start + 1 :]
        else None
    ]
    assert re.search(rf"{re.escape(flag)}\b", block), f"{command} {flag}"


def test_every_config_key_is_in_the_reference():
    table = REFERENCE[REFERENCE.index("## Configuration") : REFERENCE.index("### Policy")]
    documented = set(re.findall(r"^\| `([\w.]+)` \|", table, re.M))
    assert config_keys() == documented


def test_every_annotation_and_label_key_is_in_the_reference():
    keys = in_sources(r'"(volcano-guard\.io/[a-z-]+)"')
    assert keys
    assert {key for key in keys if f"`{key}`" not in REFERENCE} == set()


def test_every_metric_is_in_the_reference():
    names = in_sources(r'PREFIX\}([a-z_]+)"')
    assert len(names) > 20
    documented = set(re.findall(r"`volcano_guard_([a-z_]+)`", REFERENCE))
    missing = {name for name in names if not {name, f"{name}_total"} & documented}
    assert missing == set()


def test_the_readme_is_short_and_nothing_cites_what_users_lack():
    assert len((REPO / "README.md").read_text().splitlines()) <= 150
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    citing = []
    for name in tracked:
        path = REPO / name
        if path.is_symlink() or not path.is_file() or name.startswith("tests/"):
            continue
        text = path.read_text(errors="replace")
        if re.search(r"design\.md|\.\./shared|/work/|/root/|/home/", text):
            citing.append(name)
    assert citing == []


def test_the_advisory_table_in_the_reference_is_the_codes():
    from volcano_guard.base.advisories import ADVISORIES

    def affected(low: str | None, high: str | None) -> str:
        if low and high:
            return f"from {low}, before {high}"
        return f"before {high}" if high else (f"from {low}" if low else "every release")

    section = REFERENCE[REFERENCE.index("### Volcano advisories") : REFERENCE.index("## Metrics")]
    rows = re.findall(
        r"^\| `([a-z-]+)` \| ([^|]+) \| ([^|]+) \| ([^|]+) \| ([^|]+) \| `(\w+)` \|$", section, re.M
    )
    documented = {
        (key, frozenset(c.strip() for c in components.split(",")), when, fixed, issues, cover)
        for key, components, when, fixed, issues, cover in rows
    }
    assert documented == {
        (
            a.key,
            a.components,
            "; ".join(affected(low, high) for low, high in a.affected),
            a.fixed_in or "open",
            ", ".join(f"#{n}" for n in a.issues),
            a.cover,
        )
        for a in ADVISORIES
    }
