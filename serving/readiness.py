"""What `/readyz` answers, on whichever port asks: the probe port (serving.probes), the admission
port (serving.reviews) and insights' port (serving.appserving) read one Readiness per process,
which serving.lifecycle turns on once listening and off when draining.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

# The check every serving process runs: its serving pair loaded (serving.tls.CertWatcher.loaded).
CERTIFICATE_LOADED = "certificate-loaded"


@dataclass
class Readiness:
    """Ready once listening and every check passes; not ready while draining. Each check has the
    name `/readyz` says when it fails (``certificate-loaded failed``), as kube-apiserver's and
    controller-runtime's named checks do."""

    serving: bool = False
    draining: bool = False
    checks: dict[str, Callable[[], bool]] = field(default_factory=dict)
    # One worker among several (serving.workers): told when this process starts and stops serving,
    # and asked last, so that every worker's answer says whether all of them serve.
    announce: Callable[[bool], None] | None = None
    shared: Callable[[], tuple[bool, str]] | None = None

    def ready(self) -> tuple[bool, str]:
        if self.draining:
            return False, "shutting down"
        if not self.serving:
            return False, "not serving yet"
        for name, check in self.checks.items():
            if not check():
                return False, f"{name} failed"
        return self.shared() if self.shared is not None else (True, "ok")

    def set_serving(self) -> None:
        self.serving = True
        if self.announce is not None:
            self.announce(True)

    def set_draining(self) -> None:
        self.draining = True
        if self.announce is not None:
            self.announce(False)
