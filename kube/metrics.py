"""Prometheus metrics named like controller-runtime's and client-go's, in one registry per process.

Dashboards written for Go controllers (``controller_runtime_reconcile_total``, ``workqueue_depth``,
``leader_election_master_status``) work unchanged. ``REGISTRY`` is the process default; tests
and embedders pass their own ``CollectorRegistry`` to ``metrics_for``. Every process registry
(``process_registry``) also carries prometheus-client's own ``process_*`` and ``python_*``
collectors, which Go processes' ``process_*``/``go_*`` counterparts fill in the same dashboards.
"""

from __future__ import annotations

import gc
import os
import weakref
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.metrics_core import Metric

if TYPE_CHECKING:
    from aiohttp.typedefs import Handler


def process_registry() -> CollectorRegistry:
    """A registry for one process's /metrics: ``process_*`` (CPU, memory, open fds, start time),
    ``python_info`` and ``python_gc_*`` from prometheus-client, before any metric of ours."""
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry


REGISTRY = process_registry()


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


# controller-runtime's reconcile_time_seconds buckets.
RECONCILE_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0,
    1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60,
)  # fmt: skip
# client-go's workqueue buckets: prometheus.ExponentialBuckets(10e-9, 10, 12).
WORKQUEUE_BUCKETS = tuple(1e-8 * 10**i for i in range(12))


class Metrics:
    """Every metric the toolkit records, registered once in ``registry``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        # prometheus_client adds the ``_total`` suffix to counters itself.
        self.reconcile_total = Counter(
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller",
            ["controller", "result"],
            registry=registry,
        )
        self.reconcile_errors_total = Counter(
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors per controller",
            ["controller"],
            registry=registry,
        )
        self.reconcile_time_seconds = Histogram(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            ["controller"],
            buckets=RECONCILE_BUCKETS,
            registry=registry,
        )
        self.active_workers = Gauge(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller",
            ["controller"],
            registry=registry,
        )
        self.max_concurrent_reconciles = Gauge(
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller",
            ["controller"],
            registry=registry,
        )
        self.workqueue_depth = Gauge("workqueue_depth", "Current depth of workqueue", ["name"], registry=registry)
        self.workqueue_adds_total = Counter(
            "workqueue_adds", "Total number of adds handled by workqueue", ["name"], registry=registry
        )
        self.workqueue_queue_duration_seconds = Histogram(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            ["name"],
            buckets=WORKQUEUE_BUCKETS,
            registry=registry,
        )
        self.workqueue_work_duration_seconds = Histogram(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes",
            ["name"],
            buckets=WORKQUEUE_BUCKETS,
            registry=registry,
        )
        self.workqueue_retries_total = Counter(
            "workqueue_retries", "Total number of retries handled by workqueue", ["name"], registry=registry
        )
        self.leader_election_master_status = Gauge(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master",
            ["name"],
            registry=registry,
        )
        self.events_total = Counter(
            "kube_events",
            "Kubernetes Events the recorder handled, by outcome (created, patched, dropped, failed)",
            ["outcome"],
            registry=registry,
        )
        self.watch_restarts_total = Counter(
            "informer_watch_restarts",
            "Watches an informer restarted, by why (closed, error, expired)",
            ["resource", "reason"],
            registry=registry,
        )


_BY_REGISTRY: weakref.WeakKeyDictionary[CollectorRegistry, Metrics] = weakref.WeakKeyDictionary()


def metrics_for(registry: CollectorRegistry | None = None) -> Metrics:
    """The toolkit's metrics in ``registry`` (default ``REGISTRY``), created on first use."""
    registry = REGISTRY if registry is None else registry
    metrics = _BY_REGISTRY.get(registry)
    if metrics is None:
        metrics = _BY_REGISTRY[registry] = Metrics(registry)
    return metrics


def metrics_handler(registry: CollectorRegistry | None = None) -> Handler:
    """prometheus-client's own aiohttp handler for ``registry``: text or OpenMetrics as the scraper
    asks (``Accept``), gzip when it accepts it, ``?name[]=`` filters. Imports aiohttp: only a
    listener that serves it calls this (serving.metricsserver, when it starts)."""
    from prometheus_client.aiohttp import make_aiohttp_handler

    return make_aiohttp_handler(REGISTRY if registry is None else registry)
