"""The admission and conversion app: endpoints, their bounds and metrics, on serving.reviews.

`/metrics` is not served here: anything that reaches the admission port could read it. It has
a listener of its own (serving.metricsserver).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import partial
from typing import Any

import orjson

from apimachinery import admission
from apimachinery.admission import REVIEW_BODY_LIMIT, Rule
from apimachinery.bodies import BodyDeadlines, StatusError
from apimachinery.status import failure
from fooapi import DEFAULT_IMAGE
from fooapi.admission import mutate_foo, validate_foo
from serving.budget import ByteBudget, MiB, PodMemory, budget_for_memory_limit
from serving.connections import ConnectionLimits
from serving.readiness import Readiness
from serving.reviews.endpoint import BodyHandler, Bounds, Endpoint, EndpointMetrics
from serving.reviews.protocol import Request
from serving.reviews.server import ADMISSION_PORT, ReviewApp

from . import conversion
from .manifests import TIMEOUT_SECONDS
from .metrics import WebhookMetrics

log = logging.getLogger(__name__)


def admission_deadline(timeout_seconds: int) -> float:
    """How long a review may take here when the apiserver waits ``timeout_seconds`` (1-30).

    A second less — time for the answer to travel and for the apiserver to read it — but never
    less than 80% of a short timeout, so a 1 s webhook still gets most of its second.
    """
    return max(timeout_seconds - 1.0, timeout_seconds * 0.8)


# A list or watch-cache read at a non-storage version arrives as ONE review of every object;
# in practice the in-flight budget is the tighter bound (the chart README says how many Foos
# one review may carry at each memory limit).
CONVERSION_BODY_LIMIT_MIB = 256


@dataclass(frozen=True)
class Settings:
    default_image: str = DEFAULT_IMAGE
    admission_body_limit: int = REVIEW_BODY_LIMIT
    conversion_body_limit: int = CONVERSION_BODY_LIMIT_MIB * MiB
    # Shorter than the configurations' timeoutSeconds, so we answer before the apiserver gives up.
    admission_timeout: float = admission_deadline(TIMEOUT_SECONDS)
    conversion_timeout: float = 25.0  # the apiserver waits 30 s for a conversion
    # Bounds, so overload queues (slows down) instead of holding hundreds of huge bodies at once.
    max_admissions_in_flight: int = 256
    max_conversions_in_flight: int = 4
    # Bytes of request bodies, raw and parsed, the process holds at once (serving.budget).
    in_flight_budget: int = budget_for_memory_limit(256)
    # The container's memory limit (MiB): large bodies also wait for the pod's own memory to have
    # room under it (serving.budget.PodMemory) where this process's cgroup is that container. None: no check.
    memory_limit_mib: int | None = None
    # kube-apiserver writes a body in one go; these only stop clients that trickle theirs.
    body_idle_timeout: float = 2.0
    admission_body_timeout: float = 3.0
    conversion_body_timeout: float = 15.0
    # Heads, idle time and the connection cap of the admission port (serving.connections).
    connections: ConnectionLimits = ADMISSION_PORT


def admission_handler(rule: Rule) -> BodyHandler:
    """Decode an AdmissionReview, ask the rule, encode its outcome. Malformed calls get 400."""

    def handle(request: Request, body: Any) -> bytes:
        try:
            review_request = admission.decode(body)
        except ValueError as err:
            raise StatusError(failure(400, str(err))) from None
        outcome = rule(review_request)
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "admission decision",
                extra={
                    "uid": review_request.uid,
                    "path": request.path,
                    "operation": review_request.operation,
                    "object": f"{review_request.namespace}/{review_request.name}",
                    "allowed": outcome.allowed,
                    "code": outcome.code,
                    "patch_ops": len(outcome.patch),
                    "dry_run": review_request.dry_run,
                },
            )
        return orjson.dumps(admission.encode(review_request.uid, outcome))

    return handle


def convert(request: Request, body: Any) -> bytes:
    try:
        answer = conversion.review(body)  # large reviews: the collector is paused by serving.reviews.endpoint
    except ValueError as err:
        raise StatusError(failure(400, str(err))) from None
    if log.isEnabledFor(logging.DEBUG):
        result = answer["response"]["result"]
        log.debug(
            "conversion",
            extra={
                "uid": answer["response"]["uid"],
                "result": result["status"],
                "objects": len(answer["response"]["convertedObjects"]),
            },
        )
    return orjson.dumps(answer)


@dataclass(frozen=True)
class Webhook:
    """The admission port's app with what it is built from: its settings, metrics and byte budget."""

    reviews: ReviewApp
    settings: Settings
    metrics: WebhookMetrics
    budget: ByteBudget

    @property
    def readiness(self) -> Readiness:
        return self.reviews.readiness


def _endpoint_metrics(metrics: WebhookMetrics, path: str) -> EndpointMetrics:
    return EndpointMetrics(
        in_flight=metrics.in_flight.labels(path),
        latency=metrics.latency.labels(path),
        requests=lambda code: metrics.requests.labels(path, str(code)),
    )


def build_app(
    settings: Settings | None = None,
    *,
    readiness: Readiness | None = None,
    webhook_metrics: WebhookMetrics | None = None,
) -> Webhook:
    settings = settings or Settings()
    metrics = webhook_metrics or WebhookMetrics.create()
    pod = PodMemory.of_this_process(settings.memory_limit_mib) if settings.memory_limit_mib is not None else None
    budget = ByteBudget(settings.in_flight_budget, pod=pod)
    mutate = admission_handler(partial(mutate_foo, image=settings.default_image))
    validate = admission_handler(validate_foo)
    admissions = Bounds(
        settings.admission_body_limit,
        BodyDeadlines(idle=settings.body_idle_timeout, total=settings.admission_body_timeout),
        settings.max_admissions_in_flight,
        settings.admission_timeout,
    )
    conversions = Bounds(
        settings.conversion_body_limit,
        BodyDeadlines(idle=settings.body_idle_timeout, total=settings.conversion_body_timeout),
        settings.max_conversions_in_flight,
        settings.conversion_timeout,
    )
    endpoints = [
        Endpoint(path, handler, bounds, budget, _endpoint_metrics(metrics, path))
        for path, handler, bounds in (
            ("/mutate-foo", mutate, admissions),
            ("/validate-foo", validate, admissions),
            ("/convert", convert, conversions),
        )
    ]
    reviews = ReviewApp(readiness or Readiness(serving=True), endpoints, limits=settings.connections, budget=budget)
    return Webhook(reviews, settings, metrics, budget)
