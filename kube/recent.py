"""Read your own writes through an informer cache that has not caught up with them yet.

A controller that just created or patched an object may reconcile again before the watch
delivers its own write; the stale cache then asks for the same write again (an AlreadyExists
error or a redundant patch). ``RecentWrites`` remembers each write's answer until the cache
shows it, and ``resolve`` hands out whichever of the two is current. ``observe`` also tells the
event handlers when an event is our own write coming back, which needs no other look.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from apimachinery.objects import Object

from .ratelimit import Clock


def _rv(obj: Mapping[str, Any] | None) -> str | None:
    if obj is None:
        return None
    return (obj.get("metadata") or {}).get("resourceVersion")


class RecentWrites:
    def __init__(self, ttl: float = 60.0, *, clock: Clock = time.monotonic) -> None:
        self.ttl = ttl
        self._clock = clock
        # key -> (resourceVersion the cache showed before our write or None for a create,
        #         the object the apiserver answered with, expiry)
        self._entries: dict[str, tuple[str | None, Object, float]] = {}
        self._next_purge = 1024  # size at which expired entries are swept out
        # key -> resourceVersion a write on its way was judged from (None for a create)
        self._in_flight: dict[str, str | None] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def remember(
        self, key: str, before: Mapping[str, Any] | None, written: Object, *, cached: Mapping[str, Any] | None = None
    ) -> None:
        """Remember ``written``, unless the cache (``cached``, read just now) already holds it.

        The watch may deliver our write before the write's own answer reaches us; an entry
        made after that would wait for an event that already came.
        """
        if cached is not None and _rv(cached) == _rv(written):
            return
        now = self._clock()
        if len(self._entries) >= self._next_purge:
            self._entries = {k: e for k, e in self._entries.items() if e[2] > now}
            self._next_purge = max(1024, 2 * len(self._entries))
        self._entries[key] = (_rv(before), written, now + self.ttl)

    def forget(self, key: str) -> None:
        """Call on a delete event for ``key``: the cache is the truth again."""
        self._entries.pop(key, None)

    @contextmanager
    def writing(self, key: str, before: Mapping[str, Any] | None) -> Iterator[None]:
        """Around a write to ``key`` judged from ``before`` (None for a create).

        The write carries ``before``'s resourceVersion as a precondition, so the version that
        follows ``before`` is ours if the write succeeds; if it fails (409), that version is
        someone else's, and the failed write's retry judges it anyway. Either way an event that
        follows ``before`` while the write is on its way, ahead of its answer, needs no look.
        """
        self._in_flight[key] = _rv(before)
        try:
            yield
        finally:
            self._in_flight.pop(key, None)

    def observe(self, key: str, obj: Mapping[str, Any], previous: Mapping[str, Any] | None = None) -> bool:
        """Call on add (``previous`` None) and update events; True when ``obj`` is our own write
        coming back, which the reconcile that made it already judged.

        Once the cache holds our write, its entry has done its job.
        """
        if key in self._in_flight and self._in_flight[key] == _rv(previous):
            return True
        entry = self._entries.get(key)
        if entry is not None and _rv(obj) == _rv(entry[1]):
            del self._entries[key]
            return True
        return False

    def resolve(self, key: str, cached: Object | None) -> Object | None:
        """The cached object, unless it still predates our last write to ``key``."""
        entry = self._entries.get(key)
        if entry is None:
            return cached
        before_rv, written, expires = entry
        if self._clock() >= expires:
            del self._entries[key]
            return cached
        cached_rv = _rv(cached)
        if cached_rv == before_rv and (cached is not None or before_rv is None):
            return written  # the cache still shows the state our write replaced
        if cached is None or cached_rv == _rv(written):
            del self._entries[key]  # caught up (or deleted since): the cache is the truth again
        return cached
