"""Kubernetes object names, checked as the API server checks them (apimachinery
pkg/util/validation/validation.go: IsDNS1123Label, IsDNS1123Subdomain, IsDNS1035Label), so a
bad name is refused before it is sent anywhere, in the API server's words."""

from __future__ import annotations

import re

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_LABEL = re.compile(_LABEL)
_DNS1123_SUBDOMAIN = re.compile(rf"{_LABEL}(\.{_LABEL})*")
_DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


def dns1123_label_problem(name: str) -> str | None:
    """Namespaces. None when name is one."""
    return _problem(
        name,
        _DNS1123_LABEL,
        63,
        (
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
            "and must start and end with an alphanumeric character"
        ),
    )


def dns1123_subdomain_problem(name: str) -> str | None:
    """Most objects: Secrets, webhook configurations. None when name is one."""
    return _problem(
        name,
        _DNS1123_SUBDOMAIN,
        253,
        (
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
            "'-' or '.', and must start and end with an alphanumeric character"
        ),
    )


def dns1035_label_problem(name: str) -> str | None:
    """Services. None when name is one."""
    return _problem(
        name,
        _DNS1035_LABEL,
        63,
        (
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start "
            "with an alphabetic character, and end with an alphanumeric character"
        ),
    )


def _problem(name: str, pattern: re.Pattern[str], longest: int, words: str) -> str | None:
    if len(name) > longest:
        return f"must be no more than {longest} characters"
    return None if pattern.fullmatch(name) else words
