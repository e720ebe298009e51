"""Fair shares of the live-lookup slots between the addresses that ask for them.

Anyone who reaches the admission port can send a review that makes the guard list pods (a
PodGroup DELETE of a PodGroup whose uid it knows: one in its own namespace will do). Slots
refused at once when full let a flood of such reviews from one pod refuse every real delete
meanwhile. Here a request waits for a slot instead, in a queue of its own source address; a freed
slot goes to the next address in turn (round robin), one address holds at most half the slots, and
one address may have only so many waiting. The API server (one address per instance) then waits
for at most one lookup per other address asking, however many reviews each sends.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque


class LookupSlots:
    """`slots` lookups at once; per source address at most `per_source` held and `max_waiting`
    waiting."""

    def __init__(self, slots: int, max_waiting: int = 8) -> None:
        self._free = slots
        self._per_source = max(1, slots // 2)
        self._max_waiting = max_waiting
        self._held: dict[str, int] = {}
        self._waiting: OrderedDict[str, deque[asyncio.Future[None]]] = OrderedDict()

    async def acquire(self, source: str, timeout: float) -> bool:
        """True once a slot is this source's (release it after); False when its queue is full or
        no slot came within timeout."""
        queue = self._waiting.setdefault(source, deque())
        if len(queue) >= self._max_waiting:
            return False
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue.append(granted)
        self._grant_next()
        if granted.done():
            return True
        try:
            await asyncio.wait_for(asyncio.shield(granted), timeout)
            return True
        except TimeoutError:
            self._withdraw(source, granted)
            return False
        except asyncio.CancelledError:  # the client went away
            self._withdraw(source, granted)
            raise

    def _withdraw(self, source: str, granted: asyncio.Future[None]) -> None:
        if granted.done():  # granted as the wait ended: hand it on
            self.release(source)
            return
        queue = self._waiting.get(source)
        if queue is not None and granted in queue:
            queue.remove(granted)
            self._forget_if_empty(source)

    def release(self, source: str) -> None:
        held = self._held.get(source, 0) - 1
        if held > 0:
            self._held[source] = held
        else:
            self._held.pop(source, None)
        self._free += 1
        self._grant_next()

    def _take(self, source: str) -> None:
        self._free -= 1
        self._held[source] = self._held.get(source, 0) + 1

    def _grant_next(self) -> None:
        """Give free slots to the waiting sources in turn, skipping those at their share."""
        for source in list(self._waiting):
            if self._free == 0:
                return
            if self._held.get(source, 0) >= self._per_source:
                continue
            queue = self._waiting.pop(source)
            if not queue:
                continue
            granted = queue.popleft()
            self._take(source)
            granted.set_result(None)
            if queue:
                self._waiting[source] = queue  # to the back of the line

    def _forget_if_empty(self, source: str) -> None:
        if not self._waiting.get(source, True):
            del self._waiting[source]
