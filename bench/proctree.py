"""A server's memory as its pod sees it: the RSS of a process and every process below it, summed.

`--workers auto` makes one supervisor and N workers; the container's limit is charged for all of
them, so a peak is the sum over the tree at one instant, not one process's VmHWM.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

PROC = Path("/proc")


def parent_of_stat(stat: str) -> int:
    """The parent pid in a ``/proc/<pid>/stat`` line (the comm may hold spaces and parentheses)."""
    return int(stat.rsplit(")", 1)[1].split()[1])


def rss_kib_of_status(status: str) -> int:
    """VmRSS (KiB) of a ``/proc/<pid>/status`` text; 0 for a zombie, which has none."""
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def descendants(root: int, parents: Mapping[int, int]) -> set[int]:
    """``root`` and every pid whose chain of parents reaches it."""
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    found, todo = {root}, [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, ValueError):  # the process ended between listing and reading
        return None


def parents(proc: Path = PROC) -> dict[int, int]:
    """pid → parent pid of every process on the machine."""
    found: dict[int, int] = {}
    for entry in proc.iterdir():
        if entry.name.isdigit() and (stat := _read(entry / "stat")) is not None:
            found[int(entry.name)] = parent_of_stat(stat)
    return found


def tree(root: int, proc: Path = PROC) -> set[int]:
    """``root`` and its live descendants (a supervisor and its workers)."""
    return descendants(root, parents(proc))


def rss_mib(pids: Iterable[int], proc: Path = PROC) -> float:
    """The RSS of ``pids`` summed, in MiB (pids that ended count 0)."""
    total = 0
    for pid in pids:
        status = _read(proc / str(pid) / "status")
        total += rss_kib_of_status(status) if status is not None else 0
    return total / 1024
