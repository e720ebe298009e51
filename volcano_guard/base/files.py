"""Reading the files a user names: a problem is one FileProblem whose message names the file and
says what is wrong in words ("no such file", "line 3: ..."), never an errno or a traceback."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any


class FileProblem(ValueError):
    """A file that cannot be used; the message names it and says why."""


_ERRNO_WORDS = {
    errno.ENOENT: "no such file",
    errno.EACCES: "permission denied",
    errno.EISDIR: "is a directory, not a file",
    errno.ENOTDIR: "no such file",
}


def os_error_words(exc: OSError) -> str:
    """An OSError as a user reads it: "no such file", "permission denied"."""
    return _ERRNO_WORDS.get(exc.errno or 0) or (exc.strerror or str(exc)).lower()


def describe_os_error(exc: OSError) -> str:
    """ "FILE: no such file", or the error in words when it names no file."""
    words = os_error_words(exc)
    return f"{exc.filename}: {words}" if exc.filename else words


def read_bytes(path: str | Path, what: str = "") -> bytes:
    """path's bytes; FileProblem "WHAT PATH: no such file" when it cannot be read."""
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise FileProblem(f"{_name(path, what)}: {os_error_words(exc)}") from None


def read_text(path: str | Path, what: str = "") -> str:
    data = read_bytes(path, what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise FileProblem(f"{_name(path, what)}: not text (UTF-8)") from None


def yaml_documents(text: str, name: str) -> list[Any]:
    """The YAML (or JSON) documents in text; FileProblem "NAME line N: not YAML: ..." when it
    does not parse."""
    import yaml

    try:
        return list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        raise FileProblem(
            f"{name}{yaml_error_line(exc)}: not YAML: {yaml_error_problem(exc)}"
        ) from None


def yaml_error_line(exc: Exception) -> str:
    """ " line N" where a YAML error happened, or "" when it does not say."""
    mark = getattr(exc, "problem_mark", None)
    return f" line {mark.line + 1}" if mark is not None else ""


def yaml_error_problem(exc: Exception) -> str:
    """What a YAML error found, in one line."""
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return str(problem)


def _name(path: str | Path, what: str) -> str:
    return f"{what} {path}" if what else str(path)
