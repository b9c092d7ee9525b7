"""`--workers N|auto`: how many processes a pod gets, from fixture cgroup trees, and the flag's words."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, ProcessCollector

from serving.budget import CLIENT_MIB, RESERVED_MIB, MiB, budget_for_memory_limit, processes_memory_feeds
from serving.cpus import cgroup_cpu_limit, workers_for
from serving.workermetrics import PodProcessCollector
from serving.workers import Worker, describe_exit, runtime_layout
from webhook.command import parse_args, settings_from, workers

IN_A_CONTAINER = "0::/\n"  # the cgroup namespace makes the container's own cgroup "/"
V1_IN_A_CONTAINER = "12:cpu,cpuacct:/\n11:memory:/\n0::/\n"


def cgroup_files(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text + "\n")
    return root


# --- the CPU limit from cgroup v2 and v1 ------------------------------------------------------------


@pytest.mark.parametrize(
    ("cpu_max", "limit"),
    [("200000 100000", 2.0), ("150000 100000", 1.5), ("50000 100000", 0.5), ("max 100000", None)],
)
def test_cgroup_v2_cpu_max_is_quota_over_period(tmp_path: Path, cpu_max: str, limit: float | None) -> None:
    root = cgroup_files(tmp_path, {"cpu.max": cpu_max})
    assert cgroup_cpu_limit(root, IN_A_CONTAINER) == limit


@pytest.mark.parametrize("mount", ["cpu", "cpu,cpuacct"])
def test_cgroup_v1_cfs_quota_over_period(tmp_path: Path, mount: str) -> None:
    root = cgroup_files(tmp_path, {f"{mount}/cpu.cfs_quota_us": "300000", f"{mount}/cpu.cfs_period_us": "100000"})
    assert cgroup_cpu_limit(root, V1_IN_A_CONTAINER) == 3.0


def test_cgroup_v1_quota_of_minus_one_is_no_limit(tmp_path: Path) -> None:
    root = cgroup_files(tmp_path, {"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000"})
    assert cgroup_cpu_limit(root, V1_IN_A_CONTAINER) is None


def test_without_a_cgroup_namespace_the_process_own_cgroup_directory_is_read(tmp_path: Path) -> None:
    root = cgroup_files(
        tmp_path,
        {
            "cpu/cpu.cfs_quota_us": "-1",  # the host's root cgroup: no limit
            "cpu/cpu.cfs_period_us": "100000",
            "cpu/kubepods/pod1/c1/cpu.cfs_quota_us": "100000",
            "cpu/kubepods/pod1/c1/cpu.cfs_period_us": "100000",
        },
    )
    assert cgroup_cpu_limit(root, "4:cpu:/kubepods/pod1/c1\n") == 1.0


def test_a_hybrid_host_without_the_v2_cpu_controller_falls_back_to_v1(tmp_path: Path) -> None:
    root = cgroup_files(
        tmp_path,
        {"unified/cgroup.procs": "1", "cpu/cpu.cfs_quota_us": "200000", "cpu/cpu.cfs_period_us": "100000"},
    )
    assert cgroup_cpu_limit(root, "1:cpu:/\n0::/\n") == 2.0


def test_no_cgroup_files_at_all_is_no_limit(tmp_path: Path) -> None:
    assert cgroup_cpu_limit(tmp_path, "") is None


def test_unreadable_numbers_are_no_limit(tmp_path: Path) -> None:
    root = cgroup_files(tmp_path, {"cpu.max": "lots 100000"})
    assert cgroup_cpu_limit(root, IN_A_CONTAINER) is None


# --- automaxprocs' rounding ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("limit", "usable", "expected"),
    [
        (2.0, 8, 2),
        (1.5, 8, 1),  # rounded down: never two half-starved workers
        (2.9, 8, 2),
        (0.5, 8, 1),  # at least one
        (None, 4, 4),  # no limit: every CPU the process may run on
        (16.0, 4, 4),  # never more than the CPUs it may run on
        (None, 0, 1),
    ],
)
def test_workers_are_the_limit_rounded_down_at_least_one(limit: float | None, usable: int, expected: int) -> None:
    assert workers_for(limit, usable) == expected


# --- the flag ------------------------------------------------------------------------------------------


def test_workers_default_to_auto_and_take_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WEBHOOK_WORKERS", raising=False)
    assert parse_args(["--cert-dir", "/x"]).workers is None
    monkeypatch.setenv("WEBHOOK_WORKERS", "3")
    assert parse_args(["--cert-dir", "/x"]).workers == 3
    assert parse_args(["--cert-dir", "/x", "--workers", "auto"]).workers is None
    assert workers(parse_args(["--cert-dir", "/x", "--workers", "1"])) == 1


@pytest.mark.parametrize("word", ["0", "-2", "two", "1.5"])
def test_workers_that_are_neither_auto_nor_a_count_are_one_line(word: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse_args(["--cert-dir", "/x", "--workers", word])
    assert exit_.value.code == 2
    assert "is neither auto nor a whole number of at least 1" in capsys.readouterr().err


def test_auto_never_starts_more_workers_than_the_memory_limit_feeds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("serving.cpus.auto_workers", lambda: 64)
    assert workers(parse_args(["--cert-dir", "/x", "--memory-limit-mib", "256"])) == 1
    assert workers(parse_args(["--cert-dir", "/x", "--memory-limit-mib", "384"])) == 2
    assert workers(parse_args(["--cert-dir", "/x", "--memory-limit-mib", "384", "--metrics-secure"])) == 1
    assert workers(parse_args(["--cert-dir", "/x", "--memory-limit-mib", "512", "--metrics-secure"])) == 2
    assert workers(parse_args(["--cert-dir", "/x", "--memory-limit-mib", "100"])) == 1
    assert processes_memory_feeds(1024) == 5


def test_each_worker_gets_its_share_of_the_memory_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEMORY_LIMIT_MIB", raising=False)
    args = parse_args(["--cert-dir", "/x"])
    assert settings_from(args).in_flight_budget == 112 * MiB
    assert settings_from(args, 2).in_flight_budget == 16 * MiB == budget_for_memory_limit(256, 2)  # the floor
    secure = parse_args(["--cert-dir", "/x", "--metrics-secure", "--memory-limit-mib", "512"])
    assert settings_from(secure, 2).in_flight_budget == 88 * MiB  # (512 - 128 - 48 - 2 * 80) / 2


@pytest.mark.parametrize("shared_mib", [0, CLIENT_MIB])
@pytest.mark.parametrize("limit_mib", [192, 256, 512, 1024, 4096])
def test_every_workers_plan_summed_leaves_the_pod_headroom_under_its_limit(limit_mib: int, shared_mib: int) -> None:
    # Before: N workers' budgets and needs summed to seven eighths of the limit, and each worker
    # held the Kubernetes client on its own: two at their budgets took the chart's pod to 246 of
    # its 256 MiB on the real node (issue 25).
    count = processes_memory_feeds(limit_mib, shared_mib=shared_mib)
    each = budget_for_memory_limit(limit_mib, count, shared_mib=shared_mib)
    planned = shared_mib * MiB + count * (RESERVED_MIB * MiB + each)
    assert planned <= limit_mib * MiB * 3 // 4


# --- the state workers share -----------------------------------------------------------------------------


def test_readiness_needs_every_worker_serving(tmp_path: Path) -> None:
    runtime_layout(tmp_path)
    first, second = (Worker(index, 2, tmp_path) for index in range(2))
    assert first.first and not second.first
    first.announce(True)
    assert second.readiness() == (False, "worker 1 of 2: 1 of 2 workers serving")
    second.announce(True)
    assert first.readiness() == (True, "ok (worker 0 of 2)")
    second.announce(False)  # draining
    assert not first.readiness()[0]


def test_a_dead_worker_is_described_by_its_signal() -> None:
    assert describe_exit(-9) == "was killed by SIGKILL"
    assert describe_exit(3) == "exited with code 3"


# --- the pod's process_* ------------------------------------------------------------------------------------


def test_the_pods_process_metrics_sum_its_processes_but_keep_the_earliest_start_and_the_fd_limit() -> None:
    registry = CollectorRegistry()
    PodProcessCollector(lambda: [os.getpid(), os.getppid()], registry)
    own = {s.name: s.value for family in ProcessCollector(registry=None).collect() for s in family.samples}
    pod = {s.name: s.value for family in registry.collect() for s in family.samples}
    assert set(pod) == set(own)
    assert pod["process_resident_memory_bytes"] > own["process_resident_memory_bytes"]
    assert pod["process_open_fds"] > own["process_open_fds"]
    assert pod["process_start_time_seconds"] <= own["process_start_time_seconds"]
    assert pod["process_max_fds"] == own["process_max_fds"]


def test_a_process_that_is_gone_adds_nothing() -> None:
    registry = CollectorRegistry()
    PodProcessCollector(lambda: [os.getpid(), 2**22 + 1], registry)  # above pid_max: never a process
    pod = {s.name: s.value for family in registry.collect() for s in family.samples}
    own = {s.name: s.value for family in ProcessCollector(registry=None).collect() for s in family.samples}
    assert set(pod) == set(own) and pod["process_max_fds"] == own["process_max_fds"]
    assert pod["process_open_fds"] == pytest.approx(own["process_open_fds"], abs=2)


def test_the_supervisor_imports_the_kubernetes_client_once_for_every_worker() -> None:
    # Before: each worker imported kubernetes_asyncio after the fork for `--metrics-secure`'s
    # TokenReviews, ~45 MiB of its own each: the chart's pod idled at 137 MiB (issue 25).
    probe = (
        "import sys; from webhook.command import import_what_workers_share, parse_args; "
        "import_what_workers_share(parse_args(sys.argv[1:])); "
        "print(sorted(m for m in ('kubernetes_asyncio', 'aiohttp.web') if m in sys.modules))"
    )
    secure = subprocess.run(
        [sys.executable, "-c", probe, "--cert-dir", "/x", "--metrics-secure"],
        capture_output=True,
        text=True,
        check=True,
    )
    plain = subprocess.run(
        [sys.executable, "-c", probe, "--cert-dir", "/x", "--metrics-bind-address", "0"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert secure.stdout.split() == ["['aiohttp.web',", "'kubernetes_asyncio']"]
    assert plain.stdout.strip() == "[]"
