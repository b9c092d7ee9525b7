"""What /readyz answers: one Readiness per serving process, whichever HTTP server serves it.

No HTTP library here: the admission port (serving.reviews) and the aiohttp servers
(serving.lifecycle) share it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Readiness:
    """Ready once certificates are loaded and the listener is up; not ready while draining."""

    serving: bool = False
    draining: bool = False
    checks: list[Callable[[], bool]] = field(default_factory=list)
    # One worker among several (serving.workers): told when this process starts and stops serving,
    # and asked last, so that every worker's answer says whether all of them serve.
    announce: Callable[[bool], None] | None = None
    shared: Callable[[], tuple[bool, str]] | None = None

    def ready(self) -> tuple[bool, str]:
        if self.draining:
            return False, "shutting down"
        if not self.serving:
            return False, "not serving yet"
        for check in self.checks:
            if not check():
                return False, f"{getattr(check, '__name__', 'check')} failed"
        return self.shared() if self.shared is not None else (True, "ok")

    def set_serving(self) -> None:
        self.serving = True
        if self.announce is not None:
            self.announce(True)

    def set_draining(self) -> None:
        self.draining = True
        if self.announce is not None:
            self.announce(False)
