"""The README's shell examples work for a newcomer who types them after `make demo`, which
installs the command in .venv and puts nothing on PATH."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

README = (REPO / "README.md").read_text()
ACTIVATION = re.compile(r"(source|\.) \.venv/bin/activate")
PROMPT = "$ "


def shell_blocks(text: str) -> list[tuple[list[str], list[str]]]:
    """(commands, output) of each sh and console block. In sh every line but a comment is a
    command; in console the lines after the prompt are, and the others are what they print.
    Trailing comments are dropped."""
    blocks = []
    for language, body in re.findall(r"^```(sh|console)\n(.*?)^```", text, re.M | re.S):
        commands, output = [], []
        for line in body.splitlines():
            if language == "console" and not line.startswith(PROMPT):
                output.append(line)
            elif line.strip() and not line.lstrip().startswith("#"):
                commands.append(re.sub(r"\s+#.*$", "", line.removeprefix(PROMPT)).strip())
        blocks.append((commands, output))
    return blocks


def test_every_volcano_guard_command_in_the_readme_is_on_the_path_it_says():
    """Typed as .venv/bin/volcano-guard, or after the block activates the venv: a reader who
    jumps to one example copies that block alone."""
    typed = unreachable = 0
    for commands, _ in shell_blocks(README):
        activated = False
        for command in commands:
            activated = activated or bool(ACTIVATION.fullmatch(command))
            if command.startswith(("volcano-guard ", ".venv/bin/volcano-guard ")):
                typed += 1
                unreachable += not (activated or command.startswith(".venv/bin/"))
    assert typed and not unreachable


def test_the_readmes_check_example_prints_what_the_readme_shows():
    """The block run as written by bash in the repository, on a PATH without the venv, its
    activation that of the venv running these tests; its first line is the README's (to the
    `...` where the README cuts it short)."""
    [(commands, shown)] = [
        block for block in shell_blocks(README) if "volcano-guard check" in " ".join(block[0])
    ]
    venv_bin = Path(sys.prefix) / "bin"
    path = [p for p in os.environ["PATH"].split(os.pathsep) if p and Path(p) != venv_bin]
    env = {key: value for key, value in os.environ.items() if key != "VIRTUAL_ENV"}
    env["PATH"] = os.pathsep.join(path)
    script = "\n".join(
        f"source {shlex.quote(str(venv_bin / 'activate'))}"
        if ACTIVATION.fullmatch(command)
        else command
        for command in commands
    )
    result = subprocess.run(
        ["bash", "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.stdout, result.stderr
    first, expected = result.stdout.splitlines()[0], shown[0]
    if expected.endswith("..."):
        assert first.startswith(expected.removesuffix("...")), first
    else:
        assert first == expected
