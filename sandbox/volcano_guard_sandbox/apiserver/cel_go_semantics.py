"""Standard functions where cel-go v0.17.8 (kube-apiserver 1.30's CEL) answers differently from
cel-cpp, and the sandbox answers as cel-go.

CEL's C++ runtime already registers these functions for the same argument kinds, so another
implementation cannot stand beside them: the environment renames each call the checker
resolved to them (cel_checked.rename_calls) to a runtime function of the sandbox's own,
`<function>@cel-go`, implemented here for every overload the call may resolve to at runtime.

- `duration.getMilliseconds()`: cel-go's is the whole duration in milliseconds
  (common/types/duration.go DurationGetMilliseconds: `dur.Milliseconds()`), cel-cpp's the
  millisecond part of the second.
"""

from __future__ import annotations

import datetime
from typing import Any

from cel_expr_python import cel
from google.protobuf import duration_pb2, timestamp_pb2

GET_MILLISECONDS = "getMilliseconds@cel-go"


def duration_milliseconds(duration: datetime.timedelta) -> int:
    """Go's Duration.Milliseconds: the whole duration, truncated toward zero."""
    microseconds = (duration.days * 86_400 + duration.seconds) * 1_000_000 + duration.microseconds
    milliseconds = abs(microseconds) // 1000
    return milliseconds if microseconds >= 0 else -milliseconds


def timestamp_milliseconds(timestamp: datetime.datetime) -> int:
    """The millisecond part of the second, as both runtimes answer."""
    return timestamp.microsecond // 1000


def get_milliseconds(value: Any) -> int:
    """getMilliseconds of a duration or a timestamp (a call the checker could not narrow), as
    Python values or as their protobuf well-known types (what cel-cpp hands back)."""
    if isinstance(value, duration_pb2.Duration):
        value = value.ToTimedelta()
    elif isinstance(value, timestamp_pb2.Timestamp):
        value = value.ToDatetime()
    if isinstance(value, datetime.timedelta):
        return duration_milliseconds(value)
    return timestamp_milliseconds(value)


# The overload ids whose calls are renamed (a call resolved to any of them only).
RENAMED = {
    "duration_to_milliseconds": GET_MILLISECONDS,
    "timestamp_to_milliseconds": GET_MILLISECONDS,
}


def runtime_extension() -> cel.CelExtension:
    """The renamed functions, for the runtime environment."""
    overloads = [
        cel.Overload(overload_id, cel.Type.INT, [kind], is_member=True, impl=implementation)
        for overload_id, kind, implementation in (
            ("duration_to_milliseconds", cel.Type.DURATION, duration_milliseconds),
            ("timestamp_to_milliseconds", cel.Type.TIMESTAMP, timestamp_milliseconds),
        )
    ]
    return cel.CelExtension("cel-go semantics", [cel.FunctionDecl(GET_MILLISECONDS, overloads)])
