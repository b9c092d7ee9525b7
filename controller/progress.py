"""How far a walk over every Foo has come, and how long the rest should take. Pure.

The total comes from the list's ``metadata.remainingItemCount`` (the apiserver's count of what
the next pages hold, as of the first page's snapshot), so it is an estimate: Foos made or
deleted meanwhile move it. Time left assumes the pace so far holds.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Progress:
    done: int
    total: int | None  # None: the apiserver did not say (no remainingItemCount on the page)
    elapsed: float  # seconds since the walk began

    @property
    def fraction(self) -> float | None:
        if not self.total:
            return None
        return min(1.0, self.done / self.total)

    @property
    def seconds_left(self) -> float | None:
        if self.total is None or self.done == 0:
            return None
        return max(0.0, self.elapsed / self.done * (self.total - self.done))


def total_after_page(done: int, remaining: object, more_pages: bool) -> int | None:
    """Done so far plus what the apiserver says is left; exact once there are no more pages."""
    if not more_pages:
        return done
    if isinstance(remaining, int) and not isinstance(remaining, bool) and remaining >= 0:
        return done + remaining
    return None


def human_seconds(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 90:
        return f"{seconds}s"
    if seconds < 90 * 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def describe(progress: Progress) -> str:
    """'120 of ~1000, ~42s left' — or just '120' when the total is unknown."""
    if progress.total is None:
        return f"{progress.done} so far"
    text = f"{progress.done} of ~{progress.total}"
    left = progress.seconds_left
    if left is not None and progress.done < progress.total:
        text += f", ~{human_seconds(left)} left"
    return text


def bar(progress: Progress, width: int = 30) -> str:
    """A one-line bar for a terminal: '[#########.....................]  30% 300 of ~1000, ~7s left'."""
    fraction = progress.fraction
    if fraction is None:
        return f"[{'?' * width}] {describe(progress)}"
    filled = int(fraction * width)
    return f"[{'#' * filled}{'.' * (width - filled)}] {fraction:4.0%} {describe(progress)}"
