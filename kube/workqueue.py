"""A rate-limited work queue with client-go's semantics, for asyncio workers.

* An item queued twice is queued once (the *dirty* set).
* An item is never handed to two workers at once: re-added while it is being processed, it is
  queued again only when the worker calls ``done`` (the *processing* set).
* ``add_after`` delays an add; ``add_rate_limited`` delays it by the rate limiter's answer
  (per-item exponential backoff by default: one item's failures never delay another's).
* ``shutdown`` stops new adds and wakes idle workers; ``drain`` waits for in-flight items.

Unlike client-go's single FIFO, queued items wait in one line per *flow* (``flow_of``: the
controller's is the namespace) and ``get`` serves the lines round robin, so an item of a quiet
flow waits for one item of each busy flow, not for all of them. A flow's line exists only while
it holds items. With no ``flow_of`` every item is in one flow: client-go's FIFO.

Time comes in through two seams, ``clock`` (now) and ``timers`` (call me after a delay), so tests
drive delays on a fake clock instead of sleeping (client-go's queue takes a clock likewise).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable
from typing import Generic, Protocol, TypeVar

from .metrics import Metrics
from .ratelimit import Clock, RateLimiter, default_controller_rate_limiter

T = TypeVar("T", bound=Hashable)


class Timer(Protocol):
    def cancel(self) -> None: ...


class Timers(Protocol):
    """What schedules a delayed add: the running loop (``call_later``) or a test's fake clock."""

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer: ...


class _LoopTimers:
    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        return asyncio.get_running_loop().call_later(delay, callback)


class ShutDown(Exception):
    """The queue is shutting down and has nothing more to hand out."""


def _one_flow(item: Hashable) -> Hashable:
    return None


class _RoundRobin(Generic[T]):
    """FIFO lines, one per flow, served in turn: the flow just served goes to the back.

    A flow that has nothing queued has no line, so state lives only as long as work does (a
    deleted namespace leaves nothing behind).
    """

    def __init__(self, flow_of: Callable[[T], Hashable]) -> None:
        self._flow_of = flow_of
        self._lines: OrderedDict[Hashable, deque[T]] = OrderedDict()
        self._length = 0

    def __len__(self) -> int:
        return self._length

    @property
    def flows(self) -> int:
        return len(self._lines)

    def append(self, item: T) -> None:
        flow = self._flow_of(item)
        line = self._lines.get(flow)
        if line is None:
            line = self._lines[flow] = deque()
        line.append(item)
        self._length += 1

    def popleft(self) -> T:
        flow, line = next(iter(self._lines.items()))
        item = line.popleft()
        self._length -= 1
        if line:
            self._lines.move_to_end(flow)
        else:
            del self._lines[flow]
        return item

    def clear(self) -> None:
        self._lines.clear()
        self._length = 0


class WorkQueue(Generic[T]):
    """client-go's rate-limiting workqueue (Type + delaying + rate-limiting) in one class, fair between flows."""

    def __init__(
        self,
        name: str = "",
        *,
        rate_limiter: RateLimiter | None = None,
        flow_of: Callable[[T], Hashable] = _one_flow,
        metrics: Metrics | None = None,
        clock: Clock = time.monotonic,
        timers: Timers | None = None,
    ) -> None:
        self.name = name
        self.rate_limiter: RateLimiter = rate_limiter or default_controller_rate_limiter()
        self._metrics = metrics
        self._clock = clock
        self._timers: Timers = timers or _LoopTimers()
        self._queue: _RoundRobin[T] = _RoundRobin(flow_of)
        self._dirty: set[T] = set()
        self._processing: set[T] = set()
        self._added_at: dict[T, float] = {}
        self._started_at: dict[T, float] = {}
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._idle_waiters: list[asyncio.Future[None]] = []
        self._delayed: dict[T, tuple[float, Timer]] = {}
        self._shutting_down = False

    # ---- state -------------------------------------------------------------------------------

    def __len__(self) -> int:
        """Items waiting to be handed out (not counting delayed or in-flight ones)."""
        return len(self._queue)

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    @property
    def processing(self) -> frozenset[T]:
        return frozenset(self._processing)

    @property
    def flows(self) -> int:
        """Flows with items waiting to be handed out (each has a line of its own)."""
        return self._queue.flows

    @property
    def delayed(self) -> int:
        """Items waiting for an ``add_after`` timer."""
        return len(self._delayed)

    def _set_depth(self) -> None:
        if self._metrics is not None:
            self._metrics.workqueue_depth.labels(self.name).set(len(self._queue))

    # ---- adding ------------------------------------------------------------------------------

    def add(self, item: T) -> None:
        """Queue ``item`` unless it is already queued; ignored once shutting down."""
        if self._shutting_down:
            return
        if self._metrics is not None:
            self._metrics.workqueue_adds_total.labels(self.name).inc()
        if item in self._dirty:
            return
        self._dirty.add(item)
        self._added_at.setdefault(item, self._clock())
        if item in self._processing:
            return  # ``done`` queues it again; a second worker must not see it meanwhile
        self._queue.append(item)
        self._set_depth()
        self._wake_one()

    def add_after(self, item: T, delay: float) -> None:
        """Queue ``item`` after ``delay`` seconds; a pending earlier add wins over a later one."""
        if self._shutting_down:
            return
        if delay <= 0:
            self.add(item)
            return
        ready_at = self._clock() + delay
        pending = self._delayed.get(item)
        if pending is not None:
            if pending[0] <= ready_at:
                return
            pending[1].cancel()
        handle = self._timers.call_later(delay, lambda: self._fire(item))
        self._delayed[item] = (ready_at, handle)

    def _fire(self, item: T) -> None:
        self._delayed.pop(item, None)
        self.add(item)

    def add_rate_limited(self, item: T) -> None:
        """Queue ``item`` again once the rate limiter allows (one more failure for it)."""
        if self._shutting_down:
            return
        if self._metrics is not None:
            self._metrics.workqueue_retries_total.labels(self.name).inc()
        self.add_after(item, self.rate_limiter.when(item))

    def forget(self, item: T) -> None:
        """``item`` succeeded: its next failure backs off from the base delay again."""
        self.rate_limiter.forget(item)

    def num_requeues(self, item: T) -> int:
        return self.rate_limiter.num_requeues(item)

    # ---- taking ------------------------------------------------------------------------------

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def get(self) -> T:
        """The next item, now owned by the caller until ``done``; raises ``ShutDown`` at the end."""
        while True:
            if self._queue:
                item = self._queue.popleft()
                self._dirty.discard(item)
                self._processing.add(item)
                now = self._clock()
                added = self._added_at.pop(item, None)
                self._started_at[item] = now
                if self._metrics is not None and added is not None:
                    self._metrics.workqueue_queue_duration_seconds.labels(self.name).observe(now - added)
                self._set_depth()
                return item
            if self._shutting_down:
                raise ShutDown(self.name)
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self._wake_one()  # we were woken for an item we will not take: pass it on
                else:
                    try:
                        self._waiters.remove(waiter)
                    except ValueError:
                        pass
                raise

    def done(self, item: T) -> None:
        """The caller finished ``item``; if it was re-added meanwhile it is queued again now."""
        self._processing.discard(item)
        started = self._started_at.pop(item, None)
        if self._metrics is not None and started is not None:
            self._metrics.workqueue_work_duration_seconds.labels(self.name).observe(self._clock() - started)
        if item in self._dirty:
            self._queue.append(item)
            self._set_depth()
            self._wake_one()
        self._notify_idle()

    # ---- stopping ----------------------------------------------------------------------------

    def shutdown(self, *, discard_queued: bool = False) -> None:
        """Refuse new adds, cancel delayed ones and wake idle workers.

        Queued items are still handed out (client-go's ShutDown) unless ``discard_queued``:
        a controller that stops taking work drops them, since the next leader lists everything.
        """
        self._shutting_down = True
        for _, handle in self._delayed.values():
            handle.cancel()
        self._delayed.clear()
        if discard_queued:
            # Also forget re-adds of in-flight items, so ``done`` does not queue them again.
            self._dirty.clear()
            self._added_at.clear()
            self._queue.clear()
            self._set_depth()
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
        self._notify_idle()

    def _idle(self) -> bool:
        return not self._processing and not self._queue

    def _notify_idle(self) -> None:
        if self._idle_waiters and self._idle():
            for waiter in self._idle_waiters:
                if not waiter.done():
                    waiter.set_result(None)
            self._idle_waiters.clear()

    async def drain(self, timeout: float | None = None) -> bool:
        """Wait until nothing is queued or in flight (client-go's ShutDownWithDrain wait).

        Answers False if ``timeout`` passed first.
        """
        if self._idle():
            return True
        waiter = asyncio.get_running_loop().create_future()
        self._idle_waiters.append(waiter)
        try:
            await asyncio.wait_for(asyncio.shield(waiter), timeout)
        except TimeoutError:
            return False
        return True
