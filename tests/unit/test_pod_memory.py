"""Large bodies wait for the pod's own memory, as its cgroup counts it, to have room under the ceiling.

The budget counts what requests hold; the cgroup counts everything else too (other workers, what
the allocator kept, buffers). Before this check, the webhook's attack mix took a one-process pod
with a 144 MiB budget to its 256 MiB cgroup limit and the OOM killer (issue #25).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from serving.budget import ByteBudget, MiB, PodMemory
from serving.cgroups import memory_cgroup

SELF_IN_A_CONTAINER = "0::/\n"  # a cgroup namespace: the mount is the container's cgroup


def _v2(root: Path, *, current_mib: int, inactive_file_mib: int = 0, limit: str = str(256 * MiB)) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "memory.current").write_text(f"{current_mib * MiB}\n")
    (root / "memory.stat").write_text(f"anon {current_mib * MiB}\ninactive_file {inactive_file_mib * MiB}\n")
    (root / "memory.max").write_text(f"{limit}\n")
    return root


def test_the_working_set_is_usage_less_inactive_file_pages_as_the_kubelet_counts_it(tmp_path: Path) -> None:
    _v2(tmp_path, current_mib=100, inactive_file_mib=30)
    cgroup = memory_cgroup(tmp_path, SELF_IN_A_CONTAINER)
    assert cgroup is not None and cgroup.working_set() == 70 * MiB and cgroup.limit() == 256 * MiB


def test_a_v1_cgroup_named_in_proc_self_cgroup_is_found_below_the_mount(tmp_path: Path) -> None:
    own = tmp_path / "memory" / "bench-1"
    own.mkdir(parents=True)
    (own / "memory.usage_in_bytes").write_text(str(90 * MiB))
    (own / "memory.stat").write_text(f"total_rss {80 * MiB}\ntotal_inactive_file {10 * MiB}\n")
    (own / "memory.limit_in_bytes").write_text(str(256 * MiB))
    cgroup = memory_cgroup(tmp_path, "5:memory:/bench-1\n")
    assert cgroup is not None and cgroup.working_set() == 80 * MiB and cgroup.limit() == 256 * MiB


@pytest.mark.parametrize("limit", ["max", str(512 * MiB)])
def test_no_check_where_the_cgroup_holds_more_than_the_pod_planned_for(tmp_path: Path, limit: str) -> None:
    # A developer's shell or a test runner: its cgroup holds much more than this process.
    _v2(tmp_path, current_mib=400, limit=limit)
    assert PodMemory.of_this_process(256, tmp_path, SELF_IN_A_CONTAINER) is None


def test_in_the_container_the_plan_was_made_for_the_ceiling_is_its_limit_less_a_quarter(tmp_path: Path) -> None:
    _v2(tmp_path, current_mib=60)
    pod = PodMemory.of_this_process(256, tmp_path, SELF_IN_A_CONTAINER)
    assert pod is not None and pod.ceiling == 192 * MiB and pod.room() == 132 * MiB


async def test_a_large_charge_waits_until_the_pods_working_set_leaves_room_then_proceeds(tmp_path: Path) -> None:
    _v2(tmp_path, current_mib=180)
    cgroup = memory_cgroup(tmp_path, SELF_IN_A_CONTAINER)
    assert cgroup is not None
    pod = PodMemory(cgroup, ceiling=192 * MiB, max_age=0)  # 256 MiB less its quarter
    budget = ByteBudget(144 * MiB, pod=pod)
    large = asyncio.create_task(_hold(budget, 24 * MiB))
    await asyncio.sleep(0.2)
    assert not large.done()  # the budget has room (nothing charged); the pod has 12 MiB
    _v2(tmp_path, current_mib=100)  # answers written, pages given back
    await asyncio.wait_for(large, 2)


async def test_small_charges_never_read_the_cgroup(tmp_path: Path) -> None:
    _v2(tmp_path, current_mib=250)  # the pod is full: only large charges are held back
    cgroup = memory_cgroup(tmp_path, SELF_IN_A_CONTAINER)
    assert cgroup is not None
    budget = ByteBudget(144 * MiB, pod=PodMemory(cgroup, ceiling=192 * MiB, max_age=0))
    (tmp_path / "memory.current").unlink()
    async with budget.reserve(4 * 1024):
        pass


async def _hold(budget: ByteBudget, amount: int) -> None:
    async with budget.reserve(amount):
        pass
