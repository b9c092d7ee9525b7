"""This process's cgroup, as the kubelet and the kernel see it: where its CPU and memory files are.

Inside a container's cgroup namespace the mount *is* the container's cgroup (``/proc/self/cgroup``
says ``/``); without one (a process a benchmark put into a cgroup of its own) the path in
``/proc/self/cgroup`` names a directory below the mount. Pure functions over a root handed in,
so tests give them fixture files.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_SELF_CGROUP = Path("/proc/self/cgroup")


def read_text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def own_cgroups(proc_self_cgroup: str) -> dict[str, str]:
    """``/proc/self/cgroup`` as {controller: path}; the v2 line (``0::/path``) is under ""."""
    paths: dict[str, str] = {}
    for line in proc_self_cgroup.splitlines():
        _, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        for controller in controllers.split(",") if controllers else [""]:
            paths[controller] = path
    return paths


def candidate_dirs(base: Path, own_path: str | None) -> list[Path]:
    """This process's own cgroup directory first, then the mount itself."""
    dirs = [base / own_path.lstrip("/")] if own_path and own_path != "/" else []
    return [*dirs, base]


@dataclass(frozen=True)
class MemoryCgroup:
    """The memory files of this process's cgroup (v2 or v1)."""

    usage_file: Path  # memory.current (v2), memory.usage_in_bytes (v1)
    stat_file: Path
    inactive_file_key: str  # inactive_file (v2), total_inactive_file (v1)
    limit_file: Path  # memory.max (v2), memory.limit_in_bytes (v1)

    @classmethod
    def at(cls, directory: Path) -> MemoryCgroup | None:
        """The memory files of the cgroup ``directory`` (v2 or v1), None if it has none."""
        if (directory / "memory.current").is_file():
            return cls(
                directory / "memory.current", directory / "memory.stat", "inactive_file", directory / "memory.max"
            )
        if (directory / "memory.usage_in_bytes").is_file():
            return cls(
                directory / "memory.usage_in_bytes",
                directory / "memory.stat",
                "total_inactive_file",
                directory / "memory.limit_in_bytes",
            )
        return None

    def limit(self) -> int | None:
        """The cgroup's memory limit in bytes; None if it has none (v2 ``max``, v1's near-2**63)."""
        text = read_text(self.limit_file)
        if text is None or not text.isdigit():
            return None
        value = int(text)
        return value if value < 1 << 62 else None

    def working_set(self) -> int | None:
        """Bytes in use less inactive file pages: what the kubelet calls the container's working
        set, and what its memory limit and the OOM killer judge. None if unreadable."""
        usage, stat = read_text(self.usage_file), read_text(self.stat_file)
        if usage is None or stat is None:
            return None
        inactive = 0
        for line in stat.splitlines():
            key, _, value = line.partition(" ")
            if key == self.inactive_file_key:
                inactive = int(value)
                break
        return max(int(usage) - inactive, 0)


def memory_cgroup(root: Path = CGROUP_ROOT, proc_self_cgroup: str | None = None) -> MemoryCgroup | None:
    """This process's memory cgroup, or None where there is none to read."""
    if proc_self_cgroup is None:
        proc_self_cgroup = read_text(PROC_SELF_CGROUP) or ""
    own = own_cgroups(proc_self_cgroup)
    for directory in candidate_dirs(root, own.get("")):
        if (found := MemoryCgroup.at(directory)) is not None:
            return found
    for directory in candidate_dirs(root / "memory", own.get("memory")):
        if (found := MemoryCgroup.at(directory)) is not None:
            return found
    return None
