"""Webhook metrics, named as controller-runtime names them so existing dashboards work.

With several workers (``--workers``) prometheus-client keeps each worker's values in files and
any worker's /metrics reads them all: counters and histograms are summed; each gauge says
how (``multiprocess_mode``, ignored by a single process).
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from kube.metrics import process_registry


@dataclass(frozen=True)
class WebhookMetrics:
    registry: CollectorRegistry
    requests: Counter
    latency: Histogram
    in_flight: Gauge
    certificate_expiry: Gauge

    @classmethod
    def create(cls, registry: CollectorRegistry | None = None) -> WebhookMetrics:
        registry = registry if registry is not None else process_registry()
        return cls(
            registry=registry,
            requests=Counter(
                "controller_runtime_webhook_requests_total",
                "Total number of admission requests by HTTP status code.",
                ["webhook", "code"],
                registry=registry,
            ),
            latency=Histogram(
                "controller_runtime_webhook_latency_seconds",
                "Histogram of the latency of processing admission requests",
                ["webhook"],
                registry=registry,
            ),
            in_flight=Gauge(
                "controller_runtime_webhook_requests_in_flight",
                "Current number of admission requests being served.",
                ["webhook"],
                registry=registry,
                multiprocess_mode="livesum",  # the pod's requests in flight: the live workers' sum
            ),
            certificate_expiry=Gauge(
                "foo_operator_certificate_expiry_timestamp_seconds",
                "Unix time at which the serving certificate expires.",
                registry=registry,
                # The earliest any live worker serves: one that has not reloaded yet still counts.
                multiprocess_mode="livemin",
            ),
        )
