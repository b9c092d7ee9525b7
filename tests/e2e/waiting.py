"""One way for e2e tests to wait: on a condition, never on a fixed sleep."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from typing import Any, TypeVar

from hack.plane.procs import Component

T = TypeVar("T")


def wait_for(
    what: str,
    probe: Callable[[], T | None],
    timeout: float = 90.0,
    interval: float = 0.25,
    *,
    server: Component | None = None,
) -> T:
    """Poll ``probe`` until it answers something truthy and return that; fail naming ``what``.

    A kubectl that fails (e.g. NotFound while the object is being created) counts as "not yet";
    its error is what the failure message shows as last seen. With ``server``, a server that
    exits fails the wait at once, and a timeout shows the end of its log.
    """
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        if server is not None:
            server.check_alive()
        try:
            value = probe()
        except subprocess.CalledProcessError as exc:
            last = exc.stderr
        else:
            if value:
                return value
            last = value
        if time.monotonic() > deadline:
            logs = f"\n{server.describe_log(60)}" if server is not None else ""
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last saw: {last!r}{logs}")
        time.sleep(interval)


def wait_for_more(what: str, count: Callable[[], int], more: int, timeout: float = 60.0) -> int:
    """Wait until ``count()`` has grown by ``more`` (e.g. requests answered by a load running in the
    background) and return it: a load brackets an event by its own progress, not by a sleep."""
    target = count() + more
    wait_for(f"{more} more {what}", lambda: count() >= target, timeout=timeout)
    return count()
