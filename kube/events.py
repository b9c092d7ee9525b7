"""core/v1 Events with client-go's manners: repeats are aggregated, and each object has a budget.

``EventRecorder.event`` never blocks a reconcile: it decides at once (``kube.eventcorrelator``)
whether the event is new (create), a repeat (patch ``count`` and ``lastTimestamp``) or over the
object's budget (drop), and a background task owned by the recorder does the writing.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections import deque
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from .client import EVENTS, ApiError, FencedWrite, KubeClient
from .eventcorrelator import EventCorrelator, EventType, Write, involved_object, wire_time
from .metrics import Metrics

log = logging.getLogger(__name__)

__all__ = ["EventCorrelator", "EventRecorder", "EventType", "involved_object", "wire_time"]

WallClock = Callable[[], datetime]


def _utcnow() -> datetime:
    return datetime.now(UTC)


class EventRecorder:
    """Records Events for objects without making the caller wait on the apiserver.

    ``writers`` tasks write concurrently; all events of one object go through the same writer,
    so a repeat's patch never overtakes the create it patches. Past ``max_pending`` queued
    writes new events are dropped, as client-go's broadcaster drops past its 1000.
    """

    def __init__(
        self,
        client: KubeClient,
        component: str,
        *,
        host: str | None = None,
        correlator: EventCorrelator | None = None,
        max_pending: int = 1000,
        writers: int = 4,
        metrics: Metrics | None = None,
        wall_clock: WallClock = _utcnow,
    ) -> None:
        self.client = client
        self.component = component
        self.host = host or socket.gethostname()
        self.correlator = correlator or EventCorrelator(component, self.host)
        self.max_pending = max_pending
        self.metrics = metrics
        self._wall_clock = wall_clock
        self._shards: list[deque[Write]] = [deque() for _ in range(max(1, writers))]
        self._wakeups = [asyncio.Event() for _ in self._shards]
        self._pending = 0  # queued or being written
        self._overflow = 0  # events dropped because the queue was full
        self._tasks: list[asyncio.Task[None]] = []
        self._idle = asyncio.Event()
        self._idle.set()

    def _count(self, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.events_total.labels(outcome).inc()

    def event(self, obj: Mapping[str, Any], type_: EventType, reason: str, message: str) -> None:
        """Record that ``reason``/``message`` happened to ``obj`` (Normal or Warning)."""
        ref = involved_object(obj)
        self._submit(self.correlator.correlate_ref(ref, type_, reason, message, self._wall_clock()), ref, reason)

    def _submit(self, write: Write | None, ref: Mapping[str, Any], reason: str) -> None:
        if write is None:
            self._count("dropped")
            log.debug("event budget spent for %s/%s: dropping %s", ref.get("namespace"), ref.get("name"), reason)
            return
        if self._pending >= self.max_pending:
            self._count("dropped")
            self._overflow += 1
            if self._overflow % 1000 == 1:  # one line per thousand, not a line per event
                log.warning("event queue full (%d pending): %d events dropped so far", self._pending, self._overflow)
            return
        shard = hash(write.identity) % len(self._shards)
        self._shards[shard].append(write)
        self._pending += 1
        self._idle.clear()
        self._wakeups[shard].set()

    def start(self) -> None:
        if not self._tasks:
            self._tasks = [
                asyncio.create_task(self._run(i), name=f"event-writer-{i}") for i in range(len(self._shards))
            ]

    async def flush(self, timeout: float | None = None) -> bool:
        """Wait until every recorded event was written (or dropped); False on timeout."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        return True

    async def stop(self, timeout: float = 5.0) -> None:
        """Write what is pending (for at most ``timeout``), then stop the writers."""
        if not self._tasks:
            return
        await self.flush(timeout)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    async def _run(self, shard: int) -> None:
        queue, wakeup = self._shards[shard], self._wakeups[shard]
        while True:
            await wakeup.wait()
            wakeup.clear()
            while queue:
                write = queue.popleft()
                try:
                    await self._write(write)
                finally:
                    self._pending -= 1
            if self._pending == 0:
                self._idle.set()

    async def _write(self, write: Write) -> None:
        try:
            if write.action == "create":
                await self.client.create(EVENTS, write.body, namespace=write.namespace)
                self._count("created")
                return
            try:
                await self.client.patch(EVENTS, write.name, write.body, namespace=write.namespace)
                self._count("patched")
            except ApiError as exc:
                if not exc.not_found:
                    raise
                # The event expired (events live an hour): start a new one for this repeat.
                self.correlator.forget(write.identity, write.key)
                again = self.correlator.correlate_ref(
                    write.ref, write.type_, write.reason, write.message, self._wall_clock()
                )
                self._submit(again, write.ref, write.reason)
        except FencedWrite as exc:
            self._count("dropped")
            log.debug("not writing event %s/%s: %s", write.namespace, write.name, exc)
        except ApiError as exc:
            self._count("failed")
            log.warning("cannot write event %s/%s: %s", write.namespace, write.name, exc)
        except asyncio.CancelledError:
            raise
        except Exception:
            self._count("failed")
            log.exception("cannot write event %s/%s", write.namespace, write.name)
