"""A fake monotonic clock for tests: time moves only when a test steps it, and timers fire then.

It answers like ``time.monotonic`` (call it) and schedules like the event loop (``call_later``),
so code that takes a clock and timers runs its delays without a real sleep.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(order=True)
class FakeTimer:
    due: float
    order: int
    callback: Callable[[], None] = field(compare=False)
    cancelled: bool = field(default=False, compare=False)

    def cancel(self) -> None:
        self.cancelled = True


class FakeClock:
    def __init__(self, start: float = 0.0) -> None:
        self.now = start
        self._timers: list[FakeTimer] = []
        self._order = itertools.count()

    def __call__(self) -> float:
        return self.now

    def call_later(self, delay: float, callback: Callable[[], None]) -> FakeTimer:
        timer = FakeTimer(self.now + delay, next(self._order), callback)
        heapq.heappush(self._timers, timer)
        return timer

    def step(self, seconds: float) -> None:
        """Move time on by ``seconds``, firing each timer that falls due, in order, at its own time."""
        until = self.now + seconds
        while self._timers and self._timers[0].due <= until:
            timer = heapq.heappop(self._timers)
            if not timer.cancelled:
                self.now = timer.due
                timer.callback()
        self.now = until

    @property
    def pending(self) -> int:
        return sum(not timer.cancelled for timer in self._timers)
