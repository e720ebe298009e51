"""Run an async context manager on a thread with its own event loop, for synchronous clients
(kubectl, the `kubernetes` package). Everything inside stays on that loop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Future
from contextlib import AbstractAsyncContextManager, contextmanager
from typing import Any


@contextmanager
def on_thread(factory: Callable[[], AbstractAsyncContextManager[Any]]):
    loop = asyncio.new_event_loop()
    started: Future[Any] = Future()
    stop: list[asyncio.Event] = []

    async def main() -> None:
        stop.append(asyncio.Event())
        try:
            async with factory() as value:
                started.set_result(value)
                await stop[0].wait()
        except BaseException as exc:
            if not started.done():
                started.set_exception(exc)
            raise

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    try:
        yield started.result(timeout=20)
    finally:
        loop.call_soon_threadsafe(stop[0].set)
        thread.join(30)
        loop.close()
