"""Durations as operators write them in flags and config: `90s`, `5m`, `720h`, `30d`."""

from __future__ import annotations

import datetime

_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}


def parse_duration(text: str) -> datetime.timedelta:
    """ "720h", "30d", "90m", "45s" -> timedelta; ValueError otherwise."""
    if len(text) < 2 or text[-1] not in _UNITS or not text[:-1].isdigit():
        raise ValueError(f"{text!r} is not a duration like 45s, 90m, 720h or 30d")
    try:
        return datetime.timedelta(seconds=int(text[:-1]) * _UNITS[text[-1]])
    except OverflowError:
        raise ValueError(f"{text!r} is longer than a duration can be") from None


def format_duration(delta: datetime.timedelta) -> str:
    """A duration as kubectl prints an age, in its largest whole unit: 45s, 5m, 3h, 2d."""
    seconds = max(0, int(delta.total_seconds()))
    for unit, size in _UNITS.items():
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return "0s"
