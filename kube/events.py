"""core/v1 Events with client-go's manners: repeats are aggregated, and each object has a budget.

``EventRecorder.event`` never blocks a reconcile: it decides at once (pure ``EventCorrelator``)
whether the event is new (create), a repeat (patch ``count`` and ``lastTimestamp``) or over the
object's budget (drop), and a background task owned by the recorder does the writing.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from .client import EVENTS, ApiError, KubeClient
from .metrics import Metrics
from .ratelimit import Clock, TokenBucket

log = logging.getLogger(__name__)

EventType = Literal["Normal", "Warning"]
WallClock = Callable[[], datetime]


def wire_time(moment: datetime) -> str:
    """metav1.Time on the wire: RFC 3339, whole seconds, UTC."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def involved_object(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The ObjectReference of ``obj`` an Event points at."""
    meta = obj.get("metadata") or {}
    ref = {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
        "uid": meta.get("uid"),
        "resourceVersion": meta.get("resourceVersion"),
    }
    return {k: v for k, v in ref.items() if v}


def _object_identity(ref: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(str(ref.get(k, "")) for k in ("apiVersion", "kind", "namespace", "name", "uid"))


@dataclass
class _Seen:
    name: str
    namespace: str
    count: int
    first_timestamp: str


@dataclass(frozen=True)
class Write:
    """What the recorder must send: a new Event (``create``) or a patch of a seen one."""

    action: Literal["create", "patch"]
    namespace: str
    name: str
    body: dict[str, Any]
    key: tuple[str, ...] = field(compare=False)


class EventCorrelator:
    """Decides create vs. patch vs. drop; remembers what it wrote (bounded LRU).

    Aggregation key: source, involved object (not its resourceVersion), type, reason, message —
    as client-go's getEventKey. The budget is a token bucket per (source, object): ``burst``
    events at once, then one per ``refill_seconds`` (client-go: 25, one per 5 minutes).
    """

    def __init__(
        self,
        component: str,
        host: str,
        *,
        burst: int = 25,
        refill_seconds: float = 300.0,
        cache_size: int = 4096,
        clock: Clock = time.monotonic,
    ) -> None:
        self.component = component
        self.host = host
        self.burst = burst
        self.refill_seconds = refill_seconds
        self.cache_size = cache_size
        self._clock = clock
        self._seen: OrderedDict[tuple[str, ...], _Seen] = OrderedDict()
        self._budgets: OrderedDict[tuple[str, ...], TokenBucket] = OrderedDict()

    def _budget(self, identity: tuple[str, ...]) -> TokenBucket:
        bucket = self._budgets.get(identity)
        if bucket is None:
            bucket = TokenBucket(1.0 / self.refill_seconds, self.burst, clock=self._clock)
            self._budgets[identity] = bucket
            if len(self._budgets) > self.cache_size:
                self._budgets.popitem(last=False)
        else:
            self._budgets.move_to_end(identity)
        return bucket

    def correlate(
        self, obj: Mapping[str, Any], type_: EventType, reason: str, message: str, now: datetime
    ) -> Write | None:
        """The write for this occurrence, or None when the object's budget is spent."""
        ref = involved_object(obj)
        identity = _object_identity(ref)
        if not self._budget(identity).try_take():
            return None
        key = (self.component, self.host, *identity, type_, reason, message)
        stamp = wire_time(now)
        seen = self._seen.get(key)
        if seen is not None:
            self._seen.move_to_end(key)
            seen.count += 1
            return Write("patch", seen.namespace, seen.name, {"count": seen.count, "lastTimestamp": stamp}, key)
        namespace = ref.get("namespace") or "default"
        # client-go names events <object>.<unix nanos in hex>: unique and sortable.
        name = f"{ref.get('name', 'unknown')}.{time.time_ns():x}"
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": ref,
            "reason": reason,
            "message": message,
            "type": type_,
            "source": {"component": self.component, "host": self.host},
            "count": 1,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "reportingComponent": self.component,
            "reportingInstance": self.host,
        }
        self.remember(key, name, namespace, 1, stamp)
        return Write("create", namespace, name, body, key)

    def remember(self, key: tuple[str, ...], name: str, namespace: str, count: int, first_timestamp: str) -> None:
        self._seen[key] = _Seen(name, namespace, count, first_timestamp)
        self._seen.move_to_end(key)
        if len(self._seen) > self.cache_size:
            self._seen.popitem(last=False)

    def forget(self, key: tuple[str, ...]) -> None:
        """The event is gone on the server (expired, deleted): the next repeat creates a new one."""
        self._seen.pop(key, None)

    def seen(self, key: tuple[str, ...]) -> _Seen | None:
        return self._seen.get(key)


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
        write = self.correlator.correlate(obj, type_, reason, message, self._wall_clock())
        if write is None:
            self._count("dropped")
            log.debug("event budget spent for %s: dropping %s %s", involved_object(obj).get("name"), reason, message)
            return
        if self._pending >= self.max_pending:
            self._count("dropped")
            self._overflow += 1
            if self._overflow % 1000 == 1:  # one line per thousand, not a line per event
                log.warning("event queue full (%d pending): %d events dropped so far", self._pending, self._overflow)
            return
        shard = hash(write.key[2:7]) % len(self._shards)  # the involved object's identity
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
                self.correlator.forget(write.key)
                self._recreate(write)
        except ApiError as exc:
            self._count("failed")
            log.warning("cannot write event %s/%s: %s", write.namespace, write.name, exc)
        except asyncio.CancelledError:
            raise
        except Exception:
            self._count("failed")
            log.exception("cannot write event %s/%s", write.namespace, write.name)

    def _recreate(self, write: Write) -> None:
        # key = (component, host, apiVersion, kind, namespace, name, uid, type, reason, message)
        _, _, api_version, kind, namespace, name, uid, type_, reason, message = write.key
        obj = {
            "apiVersion": api_version,
            "kind": kind,
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
        }
        self.event(obj, type_, reason, message)  # type: ignore[arg-type]
