"""The admission and conversion app: routes, bounds and metrics. No protocol logic here.

`/metrics` is not served here: anything that reaches the admission port could read it. It has
a listener of its own (kube.metricsserver).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from aiohttp import web

from fooapi import DEFAULT_IMAGE
from kube import admission
from kube.admission import AdmissionRequest, Outcome
from kube.foo_admission import mutate_foo, validate_foo
from kube.http import StatusError, gc_paused, json_response, read_json
from kube.serving import Readiness, serving_app
from kube.status import failure

from . import conversion
from .metrics import WebhookMetrics

log = logging.getLogger("webhook")

MiB = 1024 * 1024


@dataclass(frozen=True)
class Settings:
    default_image: str = DEFAULT_IMAGE
    # An AdmissionReview carries object + oldObject, each up to the apiserver's 3 MiB limit.
    admission_body_limit: int = 8 * MiB
    # A list or watch-cache read at a non-storage version arrives as ONE review of every object.
    conversion_body_limit: int = 256 * MiB
    # Shorter than the configurations' timeoutSeconds (5), so we answer before the apiserver gives up.
    admission_timeout: float = 4.0
    conversion_timeout: float = 25.0  # the apiserver waits 30 s for a conversion
    # Bounds, so overload queues (slows down) instead of holding hundreds of huge bodies at once.
    max_admissions_in_flight: int = 256
    max_conversions_in_flight: int = 4


SETTINGS = web.AppKey("settings", Settings)
METRICS = web.AppKey("metrics", WebhookMetrics)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _bounded(handler: Handler, limit: int, timeout: float) -> Handler:
    """At most ``limit`` requests inside ``handler`` (others wait their turn), each for ``timeout`` s."""
    semaphore = asyncio.Semaphore(limit)

    async def bounded(request: web.Request) -> web.StreamResponse:
        try:
            async with asyncio.timeout(timeout):
                async with semaphore:
                    return await handler(request)
        except TimeoutError:
            raise StatusError(failure(504, f"request not answered within {timeout:g}s (server overloaded "
                                           "or the client sends its body too slowly)")) from None

    return bounded


def _timed(name: str, handler: Handler, metrics: WebhookMetrics) -> Handler:
    """controller-runtime's webhook metrics around one endpoint.

    The labelled children are looked up once, not per request: ``labels()`` was 4% of the
    server's time at saturation (bench.profile).
    """
    in_flight = metrics.in_flight.labels(name)
    latency = metrics.latency.labels(name)
    by_code: dict[int, Any] = {}

    async def timed(request: web.Request) -> web.StreamResponse:
        in_flight.inc()
        started = time.perf_counter()
        code = 500
        try:
            response = await handler(request)
            code = response.status
            return response
        except StatusError as err:
            code = err.status.get("code", 500)
            raise
        finally:
            in_flight.dec()
            latency.observe(time.perf_counter() - started)
            counter = by_code.get(code)
            if counter is None:
                counter = by_code[code] = metrics.requests.labels(name, str(code))
            counter.inc()

    return timed


Rule = Callable[[AdmissionRequest, Settings], Outcome]


def admission_handler(rule: Rule) -> Handler:
    """Decode an AdmissionReview, ask the rule, encode its outcome. Malformed calls get 400."""

    async def handle(request: web.Request) -> web.StreamResponse:
        body = await read_json(request, request.app[SETTINGS].admission_body_limit)
        try:
            review_request = admission.decode(body)
        except ValueError as err:
            raise StatusError(failure(400, str(err))) from None
        outcome = rule(review_request, request.app[SETTINGS])
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "admission decision",
                extra={
                    "uid": review_request.uid, "path": request.path, "operation": review_request.operation,
                    "object": f"{review_request.namespace}/{review_request.name}",
                    "allowed": outcome.allowed, "code": outcome.code, "patch_ops": len(outcome.patch),
                    "dry_run": review_request.dry_run,
                },
            )
        return json_response(admission.encode(review_request.uid, outcome))

    return handle


async def convert(request: web.Request) -> web.StreamResponse:
    body = await read_json(request, request.app[SETTINGS].conversion_body_limit)
    try:
        with gc_paused():
            answer = conversion.review(body)
    except ValueError as err:
        raise StatusError(failure(400, str(err))) from None
    if log.isEnabledFor(logging.DEBUG):
        result = answer["response"]["result"]
        log.debug("conversion", extra={"uid": answer["response"]["uid"], "result": result["status"],
                                       "objects": len(answer["response"]["convertedObjects"])})
    return json_response(answer)


def build_app(settings: Settings | None = None, *, readiness: Readiness | None = None,
              webhook_metrics: WebhookMetrics | None = None) -> web.Application:
    settings = settings or Settings()
    # The app-wide limit is the largest one; each endpoint enforces its own while reading.
    app = serving_app(readiness or Readiness(serving=True),
                      client_max_size=max(settings.admission_body_limit, settings.conversion_body_limit))
    app[SETTINGS] = settings
    app[METRICS] = webhook_metrics or WebhookMetrics.create()
    mutate = admission_handler(lambda review, settings: mutate_foo(review, image=settings.default_image))
    validate = admission_handler(lambda review, settings: validate_foo(review))
    admissions = partial(_bounded, limit=settings.max_admissions_in_flight, timeout=settings.admission_timeout)
    app.router.add_post("/mutate-foo", _timed("/mutate-foo", admissions(mutate), app[METRICS]))
    app.router.add_post("/validate-foo", _timed("/validate-foo", admissions(validate), app[METRICS]))
    app.router.add_post("/convert", _timed("/convert", _bounded(
        convert, settings.max_conversions_in_flight, settings.conversion_timeout), app[METRICS]))
    return app
