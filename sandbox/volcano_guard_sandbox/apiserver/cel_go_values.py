"""Values cel-go keeps that cel-cpp's (and Python's plain ones) lose, for the sandbox's evaluator
(cel_eval):

- a timestamp's offset: cel-go's timestamp is a Go time.Time, which keeps the zone it was parsed
  in (`timestamp('2011-08-18T19:03:37.01+01:00')`), adds durations in it, and prints it with
  time.RFC3339Nano in that zone (`string()`, `format`'s `%s`); cel-cpp holds the instant in UTC.
  Python's aware datetime carries the offset; cel-cpp still computes each instant;
- optionals (cel-go's types.Optional), which cel-expr-python cannot hand to Python: Go's zero
  time (`optional.ofNonZeroValue`) is year 1, where cel-cpp takes the Unix epoch;
- a map keyed both by `true` and by `1` (or `false` and `0`): CEL's keys differ, Python's dict
  takes them as one, so the bool key is held as a BoolKey.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_UTC = datetime.UTC
# Go's zero time.Time, what IsZero() is true of (whatever its zone).
GO_ZERO_TIME = datetime.datetime(1, 1, 1, tzinfo=_UTC)
_OFFSET = re.compile(r"([+-])(\d\d):(\d\d)$")


def rfc3339_nano(value: datetime.datetime) -> str:
    """Go's t.Format(time.RFC3339Nano): the time in its own zone, fraction digits without
    trailing zeros, `Z` for a zero offset."""
    offset = value.utcoffset() or datetime.timedelta(0)
    text = f"{value.year:04d}-{value:%m-%dT%H:%M:%S}"
    if value.microsecond:
        text += "." + f"{value.microsecond:06d}".rstrip("0")
    if not offset:
        return text + "Z"
    minutes = abs(int(offset.total_seconds())) // 60
    sign = "-" if offset < datetime.timedelta(0) else "+"
    return f"{text}{sign}{minutes // 60:02d}:{minutes % 60:02d}"


def zone_of(arguments: tuple[Any, ...]) -> datetime.tzinfo | None:
    """The zone cel-go's result keeps: a timestamp argument's, or the offset an RFC 3339 string
    gives (`timestamp(string)`, Go's time.Parse); None for UTC."""
    for argument in arguments:
        if isinstance(argument, datetime.datetime) and argument.utcoffset():
            return argument.tzinfo
        if isinstance(argument, str) and (found := _OFFSET.search(argument)):
            sign, hours, minutes = found.groups()
            offset = datetime.timedelta(hours=int(hours), minutes=int(minutes))
            return datetime.timezone(-offset if sign == "-" else offset) if offset else None
    return None


def in_zone(value: Any, zone: datetime.tzinfo | None) -> Any:
    """A timestamp cel-cpp computed (in UTC), in the zone cel-go's would have."""
    if zone is None or not isinstance(value, datetime.datetime):
        return value
    try:
        return value.astimezone(zone)
    except OverflowError:  # year 1 or 9999 shifted past Python's range: keep UTC
        return value


# -- optionals ----------------------------------------------------------------------------------

_ABSENT = object()


@dataclass(frozen=True, eq=False)
class Optional:
    """cel-go's types.Optional: a value or none."""

    value: Any = _ABSENT

    @property
    def has_value(self) -> bool:
        return self.value is not _ABSENT


NONE = Optional()


def is_zero(value: Any) -> bool:
    """cel-go's traits.Zeroer IsZeroValue: the type's zero (Go's zero time for a timestamp)."""
    if value is None or value is False:
        return True
    if isinstance(value, datetime.datetime):
        aware = value if value.tzinfo else value.replace(tzinfo=_UTC)
        return aware == GO_ZERO_TIME
    if isinstance(value, int | float | str | bytes | list | dict | datetime.timedelta):
        return not value
    return False


# -- maps keyed by a bool and an equal int ------------------------------------------------------


@dataclass(frozen=True)
class BoolKey:
    """A map's bool key beside an int key Python's dict would merge it with (1 and true)."""

    value: bool


def _has_bool(mapping: Mapping[Any, Any], key: Any) -> bool:
    return any(isinstance(k, bool) and k == key for k in mapping)


def put(mapping: dict[Any, Any], key: Any, value: Any) -> None:
    """mapping[key] = value with CEL's keys: 1 and true stay two entries."""
    if isinstance(key, bool) and key in mapping and not _has_bool(mapping, key):
        mapping[BoolKey(key)] = value
        return
    if not isinstance(key, bool) and isinstance(key, int) and _has_bool(mapping, key):
        existing = mapping.pop(key)  # the bool holds the slot: move it to a BoolKey
        mapping[BoolKey(bool(key))] = existing
    mapping[key] = value


def plain_key(key: Any) -> Any:
    """The CEL value of a dict key."""
    return key.value if isinstance(key, BoolKey) else key


def has_bool_keys(mapping: Mapping[Any, Any]) -> bool:
    return any(isinstance(key, BoolKey) for key in mapping)
