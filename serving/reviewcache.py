"""The apiserver's answers to our TokenReviews and SubjectAccessReviews, kept for a while, in a bounded space.

Two tiers, each with a cap of its own: answers that let a caller in, and every other answer.
Anyone can make us ask about a token (a random one, or the many valid tokens a tenant mints for
its own ServiceAccounts), but only a caller the apiserver lets in can put an answer in the first
tier. So a flood of refused callers evicts only the oldest refused answers, never the one an
honest scraper is served from, and the whole holds at most ``granted_cap + refused_cap`` answers.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class _Tier(Generic[V]):
    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.entries: OrderedDict[Hashable, tuple[V, float]] = OrderedDict()  # oldest first

    def put(self, key: Hashable, value: V, expires: float) -> None:
        self.entries.pop(key, None)
        while len(self.entries) >= self.cap:
            self.entries.popitem(last=False)
        self.entries[key] = (value, expires)


class ReviewCache(Generic[V]):
    """Answers by key until they expire; ``get`` None for none (or an expired one, dropped then)."""

    def __init__(self, *, granted_cap: int, refused_cap: int, clock: Callable[[], float]) -> None:
        self._granted: _Tier[V] = _Tier(granted_cap)
        self._refused: _Tier[V] = _Tier(refused_cap)
        self._clock = clock

    def __len__(self) -> int:
        return len(self._granted.entries) + len(self._refused.entries)

    def get(self, key: Hashable) -> tuple[V] | None:
        """(value,) while it lives; None when there is none."""
        for tier in (self._granted, self._refused):
            found = tier.entries.get(key)
            if found is not None:
                if found[1] > self._clock():
                    return (found[0],)
                del tier.entries[key]
        return None

    def granted(self, key: Hashable, value: V, ttl: float) -> None:
        """An answer that let the caller in: the tier refused callers cannot reach."""
        self._refused.entries.pop(key, None)
        self._granted.put(key, value, self._clock() + ttl)

    def refused(self, key: Hashable, value: V, ttl: float) -> None:
        """Any other answer; the oldest of them makes room."""
        self._granted.entries.pop(key, None)
        self._refused.put(key, value, self._clock() + ttl)

    def promote(self, key: Hashable) -> None:
        """Move a live answer into the granted tier, keeping its expiry (a token whose user was then let in)."""
        found = self._refused.entries.pop(key, None)
        if found is not None:
            self._granted.put(key, found[0], found[1])
