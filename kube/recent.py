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


# Our writes to one key the cache may still be behind: a write judged from our own last one
# (a status after a status, while a lagging watch has brought neither) keeps the versions before
# it. Past this many the oldest go: a cache that far behind is read as it is, and the write's
# resourceVersion precondition answers 409 until it catches up.
MAX_CHAIN = 8


class RecentWrites:
    def __init__(self, ttl: float = 60.0, *, clock: Clock = time.monotonic) -> None:
        self.ttl = ttl
        self._clock = clock
        # key -> (the resourceVersions the cache may still show from before our last write,
        #         oldest first: the one the first write replaced (None for a create), then our
        #         own writes before the last; the object the apiserver answered with; expiry)
        self._entries: dict[str, tuple[tuple[str | None, ...], Object, float]] = {}
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
        behind: tuple[str | None, ...] = (_rv(before),)
        previous = self._entries.get(key)
        if previous is not None and previous[2] > now and _rv(previous[1]) == _rv(before):
            behind = (*previous[0], _rv(before))[-MAX_CHAIN:]  # judged from our own last write
        self._entries[key] = (behind, written, now + self.ttl)

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
        if entry is None:
            return False
        if _rv(obj) == _rv(entry[1]):
            del self._entries[key]
            return True
        return _rv(obj) in entry[0][1:]  # an earlier write of ours, the last still to come

    def resolve(self, key: str, cached: Object | None) -> Object | None:
        """The cached object, unless it still predates our last write to ``key``."""
        entry = self._entries.get(key)
        if entry is None:
            return cached
        behind, written, expires = entry
        if self._clock() >= expires:
            del self._entries[key]
            return cached
        cached_rv = _rv(cached)
        if cached_rv in behind:
            return written  # the cache still shows a state our writes replaced (None: not our create yet)
        if cached is None or cached_rv == _rv(written):
            del self._entries[key]  # caught up (or deleted since): the cache is the truth again
        return cached
