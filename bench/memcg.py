"""A memory cgroup of the chart's limit around a benchmarked server, as its container has.

Without it a worker that goes past 256 MiB just grows; with it, the kernel kills it as it would in
the pod, and what the supervisor then does (finding 2 of issue #25) shows. cgroup v1 (this
machine's hierarchy, root needed); where neither is there, the server runs unlimited and the run
says so.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

MEMORY_ROOT = Path("/sys/fs/cgroup/memory")


@dataclass(frozen=True)
class MemoryCgroup:
    path: Path

    def launcher(self) -> list[str]:
        """Argv prefix that moves the process into this cgroup before it execs (its workers follow)."""
        return ["sh", "-c", f'echo $$ > {self.path}/cgroup.procs && exec "$@"', "sh"]

    def oom_kills(self) -> int:
        """Processes the kernel killed for this cgroup's limit."""
        return parse_oom_kills((self.path / "memory.oom_control").read_text())

    def peak_mib(self) -> float:
        return int((self.path / "memory.max_usage_in_bytes").read_text()) / (1 << 20)


def parse_oom_kills(oom_control: str) -> int:
    for line in oom_control.splitlines():
        name, _, value = line.partition(" ")
        if name == "oom_kill":
            return int(value)
    return 0


def available() -> bool:
    return os.geteuid() == 0 and (MEMORY_ROOT / "cgroup.procs").exists()


@contextmanager
def limited(name: str, limit_mib: int) -> Iterator[MemoryCgroup | None]:
    """A fresh memory cgroup limited to ``limit_mib`` (no swap), removed afterwards; None where
    this machine has no cgroup v1 memory hierarchy we may write."""
    if not available():
        yield None
        return
    path = MEMORY_ROOT / f"{name}-{os.getpid()}"
    path.mkdir(exist_ok=True)
    try:
        (path / "memory.limit_in_bytes").write_text(str(limit_mib << 20))
        yield MemoryCgroup(path)
    finally:
        for pid in (path / "cgroup.procs").read_text().split():
            try:
                os.kill(int(pid), 9)  # a server of ours the run left behind
            except ProcessLookupError:
                pass
        for _ in range(50):  # until the killed processes have left it
            try:
                path.rmdir()
                break
            except OSError:
                time.sleep(0.1)
