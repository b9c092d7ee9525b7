"""The pod's metrics when several webhook processes serve it (``--workers``, serving.workers).

prometheus-client's multiprocess mode keeps each worker's values in files under
``PROMETHEUS_MULTIPROC_DIR``, and any worker's `/metrics` reads them all; what it cannot read from
files (``process_*``, ``python_gc_*``) is gathered here for the pod as one Go server's single
process reports it.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, PlatformCollector, ProcessCollector
from prometheus_client.metrics_core import Metric


class PodProcessCollector:
    """``process_*`` of several processes as one, the way a Go server's single process reports its pod.

    prometheus-client's own ProcessCollector reads each process's ``/proc`` files; the figures
    are summed (CPU seconds, resident and virtual memory, open fds), except the start time
    (the earliest: the supervisor's) and the fd limit (the same for every process). Forked
    workers share pages with the supervisor, which each one's RSS counts again: the summed
    resident memory is an upper bound of the pod's (its cgroup's own figure is exact).
    """

    def __init__(self, pids: Callable[[], Iterable[int]], registry: CollectorRegistry) -> None:
        self._pids = pids
        registry.register(self)

    def collect(self) -> Iterable[Metric]:
        families: dict[str, Metric] = {}
        for pid in self._pids():
            for family in ProcessCollector(pid=_constant(pid), registry=None).collect():
                merged = families.setdefault(family.name, Metric(family.name, family.documentation, family.type))
                for sample in family.samples:
                    merged.samples.append(sample)
        for family in families.values():
            family.samples = _combined(family.samples)
        return families.values()


def _constant(pid: int) -> Callable[[], int]:
    return lambda: pid


def _combined(samples: list[Any]) -> list[Any]:
    by_name: dict[str, Any] = {}
    for sample in samples:
        seen = by_name.get(sample.name)
        if seen is None:
            by_name[sample.name] = sample
        elif sample.name.endswith("start_time_seconds"):
            by_name[sample.name] = min(seen, sample, key=lambda s: s.value)
        elif not sample.name.endswith("max_fds"):
            by_name[sample.name] = seen._replace(value=seen.value + sample.value)
    return list(by_name.values())


def count_gc_in_files() -> None:
    """``python_gc_*`` of every worker, summed: GCCollector reads only the process a scrape reaches,
    so each worker counts its collections into multiprocess Counters (``gc.callbacks``, once per
    collection) from the figures it has at start."""
    throwaway = CollectorRegistry()  # values live in PROMETHEUS_MULTIPROC_DIR, not in a registry
    collected = Counter(
        "python_gc_objects_collected", "Objects collected during gc", ["generation"], registry=throwaway
    )
    uncollectable = Counter(
        "python_gc_objects_uncollectable", "Uncollectable objects found during GC", ["generation"], registry=throwaway
    )
    collections = Counter(
        "python_gc_collections", "Number of times this generation was collected", ["generation"], registry=throwaway
    )
    by_generation = [
        (collected.labels(str(n)), uncollectable.labels(str(n)), collections.labels(str(n)))
        for n in range(len(gc.get_stats()))
    ]
    for (objects, leaks, runs), stat in zip(by_generation, gc.get_stats(), strict=True):
        objects.inc(stat["collected"])
        leaks.inc(stat["uncollectable"])
        runs.inc(stat["collections"])

    def counted(phase: str, info: dict[str, int]) -> None:
        if phase == "stop":
            objects, leaks, runs = by_generation[info["generation"]]
            runs.inc()
            if info["collected"]:
                objects.inc(info["collected"])
            if info["uncollectable"]:
                leaks.inc(info["uncollectable"])

    gc.callbacks.append(counted)


def multiprocess_registry(pids: Callable[[], Iterable[int]]) -> CollectorRegistry:
    """/metrics of one worker among several (``PROMETHEUS_MULTIPROC_DIR`` set): every worker's metrics
    from the shared files (counters and histograms summed, gauges as each one's
    ``multiprocess_mode`` says), the pod's ``process_*`` summed, ``python_info`` and the GC counts."""
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=os.environ["PROMETHEUS_MULTIPROC_DIR"])  # type: ignore[no-untyped-call]
    PodProcessCollector(pids, registry)
    PlatformCollector(registry=registry)
    return registry
