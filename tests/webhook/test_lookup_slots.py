"""LookupSlots: the live-lookup slots, shared fairly between source addresses."""

import asyncio

from volcano_guard.webhook.lookup_slots import LookupSlots


async def test_a_freed_slot_goes_to_the_next_source_in_turn_not_the_busiest():
    slots = LookupSlots(2, max_waiting=50)
    assert await slots.acquire("attacker", 1) and await slots.acquire("api-server", 1)
    flood = [asyncio.create_task(slots.acquire("attacker", 1)) for _ in range(20)]
    real = asyncio.create_task(slots.acquire("api-server", 1))
    await asyncio.sleep(0)
    slots.release("api-server")  # the api-server's own slot frees: the attacker is at its share
    assert await asyncio.wait_for(real, 0.5)
    assert not any(task.done() for task in flood)
    for task in flood:
        task.cancel()
    await asyncio.gather(*flood, return_exceptions=True)


async def test_one_source_never_holds_more_than_half():
    slots = LookupSlots(4)
    assert await slots.acquire("a", 1) and await slots.acquire("a", 1)
    assert not await slots.acquire("a", 0.05)  # 2 free slots, but a has its half
    assert await slots.acquire("b", 0.05)


async def test_a_full_queue_is_refused_at_once_and_a_timed_out_wait_leaves_no_trace():
    slots = LookupSlots(2, max_waiting=1)
    assert await slots.acquire("a", 1)
    waiting = asyncio.create_task(slots.acquire("a", 0.05))
    await asyncio.sleep(0)
    assert not await slots.acquire("a", 5)  # no room in a's line: no wait at all
    assert not await waiting
    slots.release("a")
    assert await slots.acquire("a", 0.01)  # nothing left behind holds the slot


async def test_a_cancelled_wait_hands_its_slot_on():
    slots = LookupSlots(2)
    assert await slots.acquire("a", 1) and await slots.acquire("b", 1)
    cancelled = asyncio.create_task(slots.acquire("c", 1))
    other = asyncio.create_task(slots.acquire("d", 1))
    await asyncio.sleep(0)
    cancelled.cancel()
    slots.release("a")
    assert await asyncio.wait_for(other, 0.5)
