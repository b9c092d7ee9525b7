"""Decide what an Event occurrence costs the apiserver: a new Event, a patch of a seen one, or nothing.

client-go's EventCorrelator (tools/record/events_cache.go), with memory that a tenant cannot turn
into a flood. Per involved object (and source, which is ours) it keeps:

* the *aggregator*: the distinct messages seen per (type, reason) in the last 10 minutes; from
  the 10th on, occurrences become one Event "(combined from similar events): <latest message>";
* the *logger*: the Events already written for it, so a repeat patches ``count`` instead of
  creating another Event (counts include occurrences the spam filter held back, as client-go's);
* the *spam filter*: a token bucket, burst 25, then one Event per 5 minutes.

client-go keeps each of the three in an LRU of 4,096 entries, and forgetting a spam bucket gives
the object a fresh burst: a tenant with more objects than that cycles them and is never limited
(issue 34: 401 new Events a second). Here one record per object holds all three, and a record is
dropped only once its bucket has refilled (it then holds nothing a fresh one would not give).
While every record is still spending, an object without one shares a single overflow bucket
(one Event a second, burst 25), and what it writes is not remembered: eviction never hands out
a burst, whatever the number of objects.

Messages are remembered by hash only, so a long message costs nothing after it is written.
Pure and synchronous: the recorder decides at once and writes in the background.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from .ratelimit import Clock, TokenBucket

EventType = Literal["Normal", "Warning"]

COMBINED = "(combined from similar events): "


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
    """client-go's spam key without the source (one correlator is one source): not the resourceVersion."""
    return tuple(str(ref.get(k, "")) for k in ("apiVersion", "kind", "namespace", "name", "uid"))


# (type, reason, hash of the message, or COMBINED_KEY for the aggregate Event)
EventKey = tuple[str, str, int]
COMBINED_KEY = -1  # never a hash() value (CPython maps -1 to -2)


@dataclass
class _Written:
    """An Event we created for the object: its name's suffix and how often it occurred."""

    nanos: int
    count: int


@dataclass
class _Similar:
    """The aggregator's view of one (type, reason): distinct messages lately, by hash."""

    messages: set[int] = field(default_factory=set)
    last: float = float("-inf")


@dataclass
class _ObjectRecord:
    full_at: float = float("-inf")  # when the spam bucket is whole again (GCRA's "theoretical arrival time")
    similar: dict[tuple[str, str], _Similar] = field(default_factory=dict)
    written: OrderedDict[EventKey, _Written] = field(default_factory=OrderedDict)


@dataclass(frozen=True)
class Write:
    """What the recorder must send: a new Event (``create``) or a patch of a seen one."""

    action: Literal["create", "patch"]
    namespace: str
    name: str
    body: dict[str, Any]
    identity: tuple[str, ...] = field(compare=False)
    key: EventKey = field(compare=False)
    # What was recorded, to record it again if the patched Event has expired meanwhile.
    ref: dict[str, Any] = field(compare=False, default_factory=dict)
    type_: EventType = field(compare=False, default="Normal")
    reason: str = field(compare=False, default="")
    message: str = field(compare=False, default="")


class EventCorrelator:
    """client-go's aggregator, logger and spam filter, one bounded record per involved object."""

    def __init__(
        self,
        component: str,
        host: str,
        *,
        burst: int = 25,
        refill_seconds: float = 300.0,
        aggregate_after: int = 10,
        aggregate_window: float = 600.0,
        cache_size: int = 4096,
        events_per_object: int = 8,
        overflow_qps: float = 1.0,
        clock: Clock = time.monotonic,
    ) -> None:
        self.component = component
        self.host = host
        self.burst = burst
        self.refill_seconds = refill_seconds
        self.aggregate_after = aggregate_after
        self.aggregate_window = aggregate_window
        self.cache_size = cache_size
        self.events_per_object = events_per_object
        self._clock = clock
        self._records: OrderedDict[tuple[str, ...], _ObjectRecord] = OrderedDict()
        self._overflow = TokenBucket(overflow_qps, burst, clock=clock)

    def __len__(self) -> int:
        """Objects with a record (at most ``cache_size``)."""
        return len(self._records)

    # ---- the three parts -----------------------------------------------------------------------

    def _record(self, identity: tuple[str, ...], now: float) -> _ObjectRecord | None:
        """The object's record; a new one only where a refilled record can make room."""
        record = self._records.get(identity)
        if record is not None:
            self._records.move_to_end(identity)
            return record
        if len(self._records) >= self.cache_size and not self._make_room(now):
            return None
        record = self._records[identity] = _ObjectRecord()
        return record

    def _make_room(self, now: float, look: int = 8) -> bool:
        """Drop one record whose bucket has refilled, looking at the ``look`` least recently used.

        Records looked at and kept go to the back, so a long run of spending records is not
        looked at again on every call (a clock sweep over the cache).
        """
        for _ in range(min(look, len(self._records))):
            identity, record = next(iter(self._records.items()))
            if record.full_at <= now:
                del self._records[identity]
                return True
            self._records.move_to_end(identity)
        return False

    def _aggregate(self, record: _ObjectRecord, type_: str, reason: str, message: str, now: float) -> EventKey:
        similar = record.similar.get((type_, reason))
        if similar is None or now - similar.last > self.aggregate_window:
            similar = record.similar[(type_, reason)] = _Similar()
        similar.last = now
        digest = hash(message)
        if digest in similar.messages or len(similar.messages) < self.aggregate_after - 1:
            similar.messages.add(digest)
            return (type_, reason, digest)
        return (type_, reason, COMBINED_KEY)  # the 10th distinct message on: one Event for all

    def _take(self, record: _ObjectRecord, now: float) -> bool:
        """The spam filter: a token bucket kept as one number (GCRA), ``burst`` then one per refill."""
        full_at = max(record.full_at, now)
        if full_at - now > (self.burst - 1) * self.refill_seconds:
            return False
        record.full_at = full_at + self.refill_seconds
        return True

    # ---- the decision --------------------------------------------------------------------------

    def correlate(
        self, obj: Mapping[str, Any], type_: EventType, reason: str, message: str, now: datetime
    ) -> Write | None:
        """The write for this occurrence, or None when the object's budget is spent."""
        return self.correlate_ref(involved_object(obj), type_, reason, message, now)

    def correlate_ref(
        self, ref: dict[str, Any], type_: EventType, reason: str, message: str, now: datetime
    ) -> Write | None:
        """``correlate`` for an ObjectReference already made."""
        identity = _object_identity(ref)
        moment = self._clock()
        record = self._record(identity, moment)
        if record is None:
            # Every record is still spending: objects beyond them share one small budget.
            if not self._overflow.try_take():
                return None
            key: EventKey = (type_, reason, hash(message))
            return self._create(ref, identity, key, type_, reason, message, now, time.time_ns())
        key = self._aggregate(record, type_, reason, message, moment)
        shown = COMBINED + message if key[2] == COMBINED_KEY else message
        written = record.written.get(key)
        if written is not None:
            written.count += 1  # counted even when filtered: the next patch carries every occurrence
            record.written.move_to_end(key)
        if not self._take(record, moment):
            return None
        stamp = wire_time(now)
        if written is not None:
            body: dict[str, Any] = {"count": written.count, "lastTimestamp": stamp}
            if shown != message:
                body["message"] = shown
            name = _event_name(ref, written.nanos)
            return Write("patch", _namespace(ref), name, body, identity, key, ref, type_, reason, message)
        nanos = time.time_ns()
        record.written[key] = _Written(nanos, 1)
        if len(record.written) > self.events_per_object:
            record.written.popitem(last=False)
        return self._create(ref, identity, key, type_, reason, shown, now, nanos, original=message)

    def _create(
        self,
        ref: dict[str, Any],
        identity: tuple[str, ...],
        key: EventKey,
        type_: EventType,
        reason: str,
        message: str,
        now: datetime,
        nanos: int,
        *,
        original: str | None = None,
    ) -> Write:
        namespace, name, stamp = _namespace(ref), _event_name(ref, nanos), wire_time(now)
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
        recorded = message if original is None else original
        return Write("create", namespace, name, body, identity, key, ref, type_, reason, recorded)

    def forget(self, identity: tuple[str, ...], key: EventKey) -> None:
        """The Event is gone on the server (expired, deleted): the next repeat creates a new one."""
        record = self._records.get(identity)
        if record is not None:
            record.written.pop(key, None)


def _namespace(ref: Mapping[str, Any]) -> str:
    return str(ref.get("namespace") or "default")


def _event_name(ref: Mapping[str, Any], nanos: int) -> str:
    # client-go names events <object>.<unix nanos in hex>: unique and sortable.
    return f"{ref.get('name', 'unknown')}.{nanos:x}"
