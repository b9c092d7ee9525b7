"""Rate limiters with client-go's semantics: a token bucket, per-item exponential backoff, their max.

Limiters answer *how long to wait* (``when``) instead of sleeping, so the workqueue can schedule
the retry and tests can drive them with a fake clock.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Hashable
from typing import Protocol

Clock = Callable[[], float]


class TokenBucket:
    """golang.org/x/time/rate's Limiter: ``qps`` tokens a second, at most ``burst`` saved up.

    ``reserve`` always takes a token, borrowing from the future when the bucket is empty, and
    answers how long the caller must wait for it: n callers in a burst get evenly spaced slots.
    ``qps <= 0`` or infinite means no limit.
    """

    def __init__(self, qps: float, burst: int, *, clock: Clock = time.monotonic) -> None:
        if burst < 1 and not self._unlimited(qps):
            raise ValueError("burst must be at least 1")
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._last = clock()

    @staticmethod
    def _unlimited(qps: float) -> bool:
        return qps <= 0 or math.isinf(qps)

    def _advance(self) -> float:
        now = self._clock()
        elapsed = max(0.0, now - self._last)
        self._tokens = min(float(self.burst), self._tokens + elapsed * self.qps)
        self._last = now
        return now

    def reserve(self) -> float:
        """Take one token; seconds until it is really ours (0 when one was in the bucket)."""
        if self._unlimited(self.qps):
            return 0.0
        self._advance()
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    def try_take(self) -> bool:
        """Take one token only if it is there right now (a budget check, never a debt)."""
        if self._unlimited(self.qps):
            return True
        self._advance()
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False

    async def acquire(self) -> None:
        """Wait for a token (the client-side QPS limiter of a Kubernetes client)."""
        delay = self.reserve()
        if delay > 0:
            await asyncio.sleep(delay)


class RateLimiter(Protocol):
    """client-go's workqueue.RateLimiter."""

    def when(self, item: Hashable) -> float:
        """Seconds to wait before ``item`` may be processed again (counts as one more failure)."""
        ...

    def forget(self, item: Hashable) -> None:
        """Stop tracking ``item``: its next failure starts from the base delay again."""
        ...

    def num_requeues(self, item: Hashable) -> int:
        """How many times ``item`` has failed since it was last forgotten."""
        ...


class ItemExponentialFailureRateLimiter:
    """Per-item backoff: ``base * 2**failures``, capped at ``max_delay`` (client-go: 5 ms → 1000 s)."""

    def __init__(self, base_delay: float = 0.005, max_delay: float = 1000.0) -> None:
        self.base_delay = base_delay
        self.max_delay = max_delay
        self._failures: dict[Hashable, int] = {}

    def when(self, item: Hashable) -> float:
        exp = self._failures.get(item, 0)
        self._failures[item] = exp + 1
        if exp > 64:  # 2**64 * anything positive is past any sane cap; avoid float overflow
            return self.max_delay
        return min(self.base_delay * (2.0**exp), self.max_delay)

    def forget(self, item: Hashable) -> None:
        self._failures.pop(item, None)

    def num_requeues(self, item: Hashable) -> int:
        return self._failures.get(item, 0)


def default_controller_rate_limiter() -> ItemExponentialFailureRateLimiter:
    """Per-item backoff, 5 ms → 1000 s, and nothing shared between items.

    client-go's DefaultControllerRateLimiter adds an overall token bucket (10 qps, burst 100)
    that answers every failure with a slot *reserved* in the future: n failures of one tenant's
    objects push every other object's retry n/10 seconds out, and the debt outlives the objects
    that made it (kubernetes/kubernetes#104554). Here a retry waits for its own failures only;
    what one namespace's retries may take from another's turn is bounded by the queue's round
    robin between namespaces instead.
    """
    return ItemExponentialFailureRateLimiter(0.005, 1000.0)
