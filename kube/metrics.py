"""Prometheus metrics named like controller-runtime's and client-go's, in one registry per process.

Dashboards written for Go controllers (``controller_runtime_reconcile_total``, ``workqueue_depth``,
``leader_election_master_status``) work unchanged. ``REGISTRY`` is the process default; tests
and embedders pass their own ``CollectorRegistry`` to ``metrics_for``. Every process registry
(``process_registry``) also carries prometheus-client's own ``process_*`` and ``python_*``
collectors, which Go processes' ``process_*``/``go_*`` counterparts fill in the same dashboards.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)

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
