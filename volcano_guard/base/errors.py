"""CommandError: what stops a command, in one line.

Every command (the CLI's, and those the sandbox harness hands it) raises it; the CLI's main
prints it once, after the command's name as typed, and exits with its code. It lives here, not
in the CLI, because `python -m volcano_guard.cli` runs the CLI as __main__: a class defined there
would be a second class, and the harness's errors would pass main uncaught.
"""

from __future__ import annotations

EXIT_USAGE = 2  # the command cannot run as asked (docs/reference.md, "Exit codes")


class CommandError(Exception):
    def __init__(self, message: str, exit_code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.exit_code = exit_code
