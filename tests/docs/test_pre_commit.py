"""The pre-commit hooks run what `make lint` runs, so a commit that passes them passes the gate's
lint step."""

from __future__ import annotations

import shlex

import yaml

from tests.conftest import REPO


def lint_commands() -> set[str]:
    """The commands of the Makefile's lint recipe, with $(BIN) as the hooks write it."""
    recipe = REPO.joinpath("Makefile").read_text().split("\nlint:", 1)[1]
    commands = set()
    for line in recipe.splitlines()[1:]:
        if not line.startswith("\t"):
            break
        commands.add(line.strip().replace("$(BIN)/", ".venv/bin/"))
    return commands


def hook_commands() -> set[str]:
    """Each local hook's command as it runs over the whole tree: its entry, and `.` where
    pre-commit passes file names (the Makefile passes the tree)."""
    config = yaml.safe_load(REPO.joinpath(".pre-commit-config.yaml").read_text())
    commands = set()
    for repo in config["repos"]:
        assert repo["repo"] == "local", "hooks must use the project's .venv, not a download"
        for hook in repo["hooks"]:
            words = [word for word in shlex.split(hook["entry"]) if word != "--force-exclude"]
            if hook.get("pass_filenames", True):
                words.append(".")
            commands.add(" ".join(words))
    return commands


def test_the_pre_commit_hooks_run_exactly_the_lint_recipe():
    assert lint_commands()
    assert hook_commands() == lint_commands()
