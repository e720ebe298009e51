"""Label and field selectors, parsed as the apiserver parses them (k8s.io/apimachinery labels
and fields packages), matched against an object's labels or selectable fields."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass


class SelectorError(ValueError):
    pass


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str  # = != in notin exists !exists
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.operator == "exists":
            return present
        if self.operator == "!exists":
            return not present
        if self.operator in ("=", "in"):
            return present and value in self.values
        return not present or value not in self.values  # != and notin


_SET = re.compile(r"^\s*(!?)\s*([A-Za-z0-9_./-]+)\s*(?:(notin|in)\s*\(([^)]*)\))?\s*$")
_EQUALITY = re.compile(r"^\s*([A-Za-z0-9_./-]+)\s*(==|=|!=)\s*([A-Za-z0-9_.-]*)\s*$")


def _split(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [part for part in parts if part.strip()]


def parse_label_selector(text: str) -> tuple[Requirement, ...]:
    requirements = []
    for part in _split(text):
        equality = _EQUALITY.match(part)
        if equality:
            key, op, value = equality.groups()
            requirements.append(Requirement(key, "!=" if op == "!=" else "=", frozenset([value])))
            continue
        match = _SET.match(part)
        if not match:
            raise SelectorError(f"unable to parse requirement: {part.strip()!r}")
        negated, key, op, values = match.groups()
        if op:
            if negated:
                raise SelectorError(f"unable to parse requirement: {part.strip()!r}")
            items = frozenset(v.strip() for v in values.split(",") if v.strip())
            requirements.append(Requirement(key, op, items))
        else:
            requirements.append(Requirement(key, "!exists" if negated else "exists"))
    return tuple(requirements)


def parse_field_selector(text: str, allowed: frozenset[str]) -> tuple[Requirement, ...]:
    requirements = []
    for part in (p for p in text.split(",") if p.strip()):
        match = re.match(r"^\s*([A-Za-z0-9_.]+)\s*(==|=|!=)\s*(.*?)\s*$", part)
        if not match:
            raise SelectorError(f"invalid field selector: {part.strip()!r}")
        key, op, value = match.groups()
        if key not in allowed:
            raise SelectorError(f"field label not supported: {key}")
        requirements.append(Requirement(key, "!=" if op == "!=" else "=", frozenset([value])))
    return tuple(requirements)


def matches(requirements: tuple[Requirement, ...], values: Mapping[str, str]) -> bool:
    return all(requirement.matches(values) for requirement in requirements)
