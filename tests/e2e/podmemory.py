"""A real node's pods' memory as the kubelet counts it, read from the cgroups it made for them.

Working set = the cgroup's usage less its inactive file pages: what the kubelet reports, and what
a container's limit and the OOM killer judge. The pod's cgroup exists from its sandbox on, before
its container starts, so a container's start (a restart that relists everything) is seen whole.
"""

from __future__ import annotations

from pathlib import Path

from hack.plane.machine import cgroup_dirs
from serving.cgroups import MemoryCgroup


def _memory_cgroup_named(pattern: str, what: str) -> Path:
    for top in cgroup_dirs():
        for path in top.rglob(pattern):
            if (path / "memory.usage_in_bytes").exists() or (path / "memory.current").exists():
                return path
    raise AssertionError(f"no memory cgroup for {what}")


def container_cgroup(container_id: str) -> Path:
    """The memory cgroup the kubelet made for a container (v1 hierarchy or unified)."""
    short = container_id.split("://", 1)[-1]
    return _memory_cgroup_named(f"*{short}*", f"container {short}")


def pod_cgroup(uid: str) -> Path | None:
    """The memory cgroup of the pod ``uid`` (cgroupfs: ``pod<uid>``; systemd: ``..._pod<uid_>.slice``),
    None until the kubelet has made it."""
    for pattern in (f"pod{uid}", f"*pod{uid.replace('-', '_')}.slice"):
        try:
            return _memory_cgroup_named(pattern, f"pod {uid}")
        except AssertionError:
            continue
    return None


def working_set_mib(cgroup: Path) -> float:
    """What the kubelet calls the container's (or pod's) working set: usage less inactive file pages."""
    found = MemoryCgroup.at(cgroup)
    working_set = found.working_set() if found is not None else None
    if working_set is None:
        raise OSError(f"no memory cgroup at {cgroup} any more")
    return working_set / (1 << 20)


def charges_mib(cgroup: Path) -> dict[str, float]:
    """The cgroup's charge by kind (MiB): anonymous memory, and file pages active and inactive."""
    stat = dict(line.split() for line in (cgroup / "memory.stat").read_text().splitlines())
    v1 = (cgroup / "memory.usage_in_bytes").exists()
    keys = {"anon": "total_rss" if v1 else "anon", "active_file": "total_active_file" if v1 else "active_file",
            "inactive_file": "total_inactive_file" if v1 else "inactive_file"}  # fmt: skip
    return {name: round(int(stat[key]) / (1 << 20), 1) for name, key in keys.items()}


class PodWorkingSet:
    """A reader of one pod's working set (MiB) for ``attacks.tenants.Peaks``: None until the
    pod's cgroup exists, or once it is gone."""

    def __init__(self, uid: str) -> None:
        self.uid = uid
        self.cgroup: Path | None = None

    def __call__(self) -> float | None:
        if self.cgroup is None:
            self.cgroup = pod_cgroup(self.uid)
            if self.cgroup is None:
                return None
        try:
            return working_set_mib(self.cgroup)
        except OSError:
            return None
