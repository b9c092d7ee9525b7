"""Webhook metrics, named as controller-runtime names them so existing dashboards work."""

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
            ),
            certificate_expiry=Gauge(
                "foo_operator_certificate_expiry_timestamp_seconds",
                "Unix time at which the serving certificate expires.",
                registry=registry,
            ),
        )
