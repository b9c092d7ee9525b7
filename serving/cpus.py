"""How many CPUs this container may use: its cgroup's CPU limit, else the CPUs it may run on.

What uber-go/automaxprocs gives a Go server's GOMAXPROCS, so `--workers auto` starts as many
processes as a Go webhook in the same pod would run threads: the quota divided by the period,
rounded down, at least 1 (a limit of 1.5 CPUs is one worker, never two half-starved ones).
Pure functions over a cgroup root handed in, so tests give them fixture files.
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path

from .cgroups import CGROUP_ROOT, PROC_SELF_CGROUP, candidate_dirs, own_cgroups, read_text

log = logging.getLogger(__name__)


def _v2_limit(root: Path, own_path: str | None) -> tuple[bool, float | None]:
    """cgroup v2 ``cpu.max`` (``"max 100000"`` or ``"150000 100000"``): (found, CPUs or None)."""
    for directory in candidate_dirs(root, own_path):
        text = read_text(directory / "cpu.max")
        if text is None:
            continue
        quota, _, period = text.partition(" ")
        if quota == "max" or not period:
            return True, None
        return True, _ratio(quota, period)
    return False, None


def _v1_limit(root: Path, own_path: str | None) -> float | None:
    """cgroup v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``; a quota of -1 is no limit."""
    for mount in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
        for directory in candidate_dirs(root / mount, own_path):
            quota = read_text(directory / "cpu.cfs_quota_us")
            period = read_text(directory / "cpu.cfs_period_us")
            if quota is not None and period is not None:
                return _ratio(quota, period)
    return None


def _ratio(quota: str, period: str) -> float | None:
    try:
        q, p = int(quota), int(period)
    except ValueError:
        return None
    return q / p if q > 0 and p > 0 else None


def cgroup_cpu_limit(root: Path = CGROUP_ROOT, proc_self_cgroup: str | None = None) -> float | None:
    """The CPU limit of this process's cgroup in CPUs (1.5 for ``150000 100000``), None when there is none.

    v2 (``cpu.max``) when the unified hierarchy has the cpu controller, else v1's CFS quota.
    """
    if proc_self_cgroup is None:
        proc_self_cgroup = read_text(PROC_SELF_CGROUP) or ""
    own = own_cgroups(proc_self_cgroup)
    found, limit = _v2_limit(root, own.get(""))
    if found:
        return limit
    return _v1_limit(root, own.get("cpu"))


def workers_for(limit: float | None, usable_cpus: int) -> int:
    """automaxprocs' rounding: the limit rounded down, at least 1; no limit: every usable CPU.

    Never more than the usable CPUs (as Go 1.25's own GOMAXPROCS): a limit above the node's
    cores, or a pod pinned to fewer, gains nothing from processes that only take turns.
    """
    cpus = max(1, usable_cpus)
    if limit is None:
        return cpus
    return max(1, min(math.floor(limit), cpus))


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask: `taskset` and cpusets narrow it)."""
    return len(os.sched_getaffinity(0))


def auto_workers(root: Path = CGROUP_ROOT) -> int:
    """`--workers auto`: one worker per CPU of the pod's limit, else per CPU it may run on."""
    limit = cgroup_cpu_limit(root)
    count = workers_for(limit, usable_cpus())
    log.debug("workers from CPUs", extra={"cpu_limit": limit, "workers": count})
    return count
