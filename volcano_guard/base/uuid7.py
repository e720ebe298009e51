"""UUIDv7 (RFC 9562): 48-bit Unix milliseconds, version 7, variant 10, and 74 random bits that
increase within a millisecond, so ids from one process sort in the order they were made."""

from __future__ import annotations

import secrets
import threading
import time
import uuid
from collections.abc import Callable

_RANDOM_BITS = 74


class UUIDv7:
    """A monotonic generator: `UUIDv7()()` -> uuid.UUID. Thread-safe (one lock, one owner)."""

    def __init__(
        self,
        clock_ns: Callable[[], int] = time.time_ns,
        random_bits: Callable[[int], int] = secrets.randbits,
    ) -> None:
        self._clock_ns, self._random_bits = clock_ns, random_bits
        self._last = 0
        self._lock = threading.Lock()

    def __call__(self) -> uuid.UUID:
        millis = self._clock_ns() // 1_000_000
        with self._lock:
            candidate = (millis << _RANDOM_BITS) | self._random_bits(_RANDOM_BITS)
            if candidate <= self._last:  # same millisecond (or a clock step back): count up
                candidate = self._last + 1
            self._last = candidate
        millis, rand = candidate >> _RANDOM_BITS, candidate & ((1 << _RANDOM_BITS) - 1)
        rand_a, rand_b = rand >> 62, rand & ((1 << 62) - 1)
        value = (millis << 80) | (0x7 << 76) | (rand_a << 64) | (0b10 << 62) | rand_b
        return uuid.UUID(int=value)


new_uuid7 = UUIDv7()


def timestamp_ms(value: uuid.UUID) -> int:
    """The Unix milliseconds a UUIDv7 carries."""
    return value.int >> 80
