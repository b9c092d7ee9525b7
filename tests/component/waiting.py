"""One way for component tests to wait: on a condition the test can read, never on a sleep."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def until(what: str, condition: Callable[[], bool], timeout: float = 10) -> None:
    """Wait on the loop (the server runs on it too) until ``condition()`` holds."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not condition():
        assert loop.time() < end, f"timed out waiting: {what}"
        await asyncio.sleep(0.02)
