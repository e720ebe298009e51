"""Who a request comes from: bearer tokens from a static token file, as kube-apiserver's
`--token-auth-file` reads it (k8s.io/apiserver authentication/token/tokenfile `NewCSV`).

The file is CSV, one user a line: `token,user,uid` and optionally `"group1,group2"`. An empty
token is skipped; a line with fewer than 3 columns makes the file unusable; a token listed twice
names its last user. Every authenticated user is also in `system:authenticated`, as the
apiserver adds it. Without a token file the sandbox serves one administrator.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from pathlib import Path

from volcano_guard.base.files import read_text
from volcano_guard_sandbox.apiserver.matching import User

AUTHENTICATED = "system:authenticated"
ADMIN = User("sandbox-admin", "", ("system:masters", AUTHENTICATED))


class TokenFileError(ValueError):
    """The token file cannot be used; the message names the line."""


def load_token_file(path: str | Path) -> dict[str, User]:
    """token -> user, from the apiserver's CSV token file format."""
    tokens: dict[str, User] = {}
    text = read_text(path, "--token-auth-file")
    for number, record in enumerate(csv.reader(io.StringIO(text, newline="")), start=1):
        if not record:  # Go's csv reader skips empty lines
            continue
        if len(record) < 3:
            raise TokenFileError(
                f"token file '{path}' must have at least 3 columns (token, "
                f"user name, user uid), found {len(record)} on line {number}"
            )
        token, name, uid = record[:3]
        if not token:
            continue
        groups = tuple(record[3].split(",")) if len(record) >= 4 else ()
        tokens[token] = User(name, uid, (*groups, AUTHENTICATED))
    return tokens


class Authenticator:
    """Maps a request's Authorization header to a user: with tokens, an unknown or missing
    bearer token is None (the server answers 401); without, every request is ADMIN."""

    def __init__(self, tokens: Mapping[str, User] | None = None) -> None:
        self._tokens = tokens

    def user(self, authorization: str | None) -> User | None:
        if self._tokens is None:
            return ADMIN
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        return self._tokens.get(token.strip())
