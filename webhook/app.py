"""The admission and conversion app: routes, bounds and metrics. No protocol logic here.

`/metrics` is not served here: anything that reaches the admission port could read it. It has
a listener of its own (kube.metricsserver).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from fooapi import DEFAULT_IMAGE
from kube import admission
from kube.admission import AdmissionRequest, Outcome
from kube.budget import ByteBudget, MiB, NeverFits, Reservation, budget_for_memory_limit, parse_cost
from kube.foo_admission import mutate_foo, validate_foo
from kube.http import (
    BodyDeadlines,
    StatusError,
    body_too_large,
    check_json_content_type,
    json_response,
    parse_json,
    read_body,
)
from kube.serving import Readiness, serving_app
from kube.status import failure

from . import conversion
from .metrics import WebhookMetrics

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Settings:
    default_image: str = DEFAULT_IMAGE
    # An AdmissionReview carries object + oldObject, each up to the apiserver's 3 MiB limit.
    admission_body_limit: int = 8 * MiB
    # A list or watch-cache read at a non-storage version arrives as ONE review of every object;
    # in practice the in-flight budget is the tighter bound (10,000 Foos, 15 MB, fit in 256Mi).
    conversion_body_limit: int = 256 * MiB
    # Shorter than the configurations' timeoutSeconds (5), so we answer before the apiserver gives up.
    admission_timeout: float = 4.0
    conversion_timeout: float = 25.0  # the apiserver waits 30 s for a conversion
    # Bounds, so overload queues (slows down) instead of holding hundreds of huge bodies at once.
    max_admissions_in_flight: int = 256
    max_conversions_in_flight: int = 4
    # Bytes of request bodies, raw and parsed, the process holds at once (kube.budget).
    in_flight_budget: int = budget_for_memory_limit(256)
    # kube-apiserver writes a body in one go; these only stop clients that trickle theirs.
    body_idle_timeout: float = 2.0
    admission_body_timeout: float = 3.0
    conversion_body_timeout: float = 15.0


def admission_deadline(timeout_seconds: int) -> float:
    """How long a review may take here when the apiserver waits ``timeout_seconds`` (1-30).

    A second less — time for the answer to travel and for the apiserver to read it — but never
    less than 80% of a short timeout, so a 1 s webhook still gets most of its second.
    """
    return max(timeout_seconds - 1.0, timeout_seconds * 0.8)


SETTINGS = web.AppKey("settings", Settings)
METRICS = web.AppKey("metrics", WebhookMetrics)
BUDGET = web.AppKey("budget", ByteBudget)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# A handler of a body already read, paid for and parsed. Synchronous: the CPU work of one review
# never waits, so it can run on the fast path below without a deadline of its own.
BodyHandler = Callable[[web.Request, Any], web.StreamResponse]


@dataclass(frozen=True)
class Bounds:
    """What one endpoint may cost: body size and read deadlines, concurrency, time to answer."""

    body_limit: int
    deadlines: BodyDeadlines
    slots: int
    timeout: float


def _arrived_body(request: web.Request, limit: int) -> bytes | None:
    """The whole body if it came with the headers (kube-apiserver writes a review in one go), else None.

    Taking it needs no wait and so no read deadline; anything else (no Content-Length, over the
    limit, still arriving) goes the way of read_body, which bounds it.
    """
    length = request.content_length
    content = request.content
    if length is None or length > limit or not content.is_eof():
        return None
    body = content.read_nowait(-1)
    if len(body) > limit:  # a Content-Encoding undone by aiohttp can make it larger than declared
        raise body_too_large(limit)
    return body


def _fits_send_buffer(request: web.Request, response: web.Response) -> bool:
    """True if writing ``response`` cannot wait for the client to read (so needs no deadline)."""
    transport = request.transport
    if transport is None or response.body is None:
        return False
    _, high = transport.get_write_buffer_limits()
    return transport.get_write_buffer_size() + len(response.body) + 1024 < high  # type: ignore[arg-type]


def _bounded(path: str, handler: BodyHandler, bounds: Bounds, budget: ByteBudget, metrics: WebhookMetrics) -> Handler:
    """One endpoint with all its bounds and controller-runtime's webhook metrics, in one hop.

    The usual review arrives whole with its headers, fits the budget at once, finds a free slot
    and a small answer: it is read, charged, parsed, decided and written without one await, so
    it pays for no timer and no context manager (bench.profile: those were ~10% of a review).
    Everything else takes ``_bounded_slowly``, every bound and deadline in force.
    """
    slots = asyncio.Semaphore(bounds.slots)
    in_flight = metrics.in_flight.labels(path)
    latency = metrics.latency.labels(path)
    # The labelled children are looked up once, not per request: ``labels()`` was 4% of the
    # server's time at saturation (bench.profile).
    by_code: dict[int, Any] = {}

    async def serve(request: web.Request) -> web.StreamResponse:
        check_json_content_type(request)
        body = _arrived_body(request, bounds.body_limit) if not slots.locked() else None
        if body is not None:
            held = Reservation(budget)
            if held.try_resize(len(body) + parse_cost(body)):
                try:
                    response, tree = _answer(handler, request, body)
                except BaseException:
                    held.release()
                    raise
                if not (isinstance(response, web.Response) and _fits_send_buffer(request, response)):
                    # A large answer: written under the deadline, still paid for (released there).
                    return await _bounded_slowly(request, handler, bounds, budget, slots, body, held, response, tree)
                try:
                    # Written while still paid for, as below; it cannot wait, so no deadline.
                    await response.prepare(request)
                    await response.write_eof()
                    return response
                finally:
                    _resume(tree)
                    held.release()
        return await _bounded_slowly(request, handler, bounds, budget, slots, body, None, None, None)

    async def timed(request: web.Request) -> web.StreamResponse:
        in_flight.inc()
        started = time.perf_counter()
        code = 500
        try:
            response = await serve(request)
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
                counter = by_code[code] = metrics.requests.labels(path, str(code))
            counter.inc()

    return timed


async def _bounded_slowly(
    request: web.Request,
    handler: BodyHandler,
    bounds: Bounds,
    budget: ByteBudget,
    slots: asyncio.Semaphore,
    body: bytes | None,
    held: Reservation | None,
    response: web.StreamResponse | None,
    tree: list[Any] | None,
) -> web.StreamResponse:
    """Read the body under deadlines and the byte budget, then take a slot for the CPU work.

    In that order, so a client that sends its body slowly holds neither a slot (408 when its
    deadline passes) nor more budget than the bytes it declared; the parse waits until the
    estimated size of its tree fits (kube.budget), and a body that never could is refused unparsed.
    The answer is written before the bytes are given back, under the same deadline. ``body`` is
    one the fast path already took; with ``held``, ``response`` and ``tree`` too, only the write is left.
    """
    stage = "budget"
    reservation = held or Reservation(budget)
    try:
        async with asyncio.timeout(bounds.timeout):
            if response is None:
                if body is None:
                    # Raw bytes twice while reading: the chunks and their join.
                    declared = request.content_length or 0
                    await reservation.resize(2 * declared if declared <= bounds.body_limit else 0)
                    stage = "read"
                    body = await read_body(
                        request, bounds.body_limit, deadlines=bounds.deadlines, reservation=reservation
                    )
                    stage = "budget"
                else:
                    # As if read here: a body too large to hold twice is refused in those words.
                    await reservation.resize(2 * len(body))
                await reservation.resize(len(body) + parse_cost(body))
                stage = "work"
                async with slots:
                    response, tree = _answer(handler, request, body)
            # Written while still paid for and under the deadline: a client that does not
            # read its answer must not keep megabytes in the send buffer for free.
            stage = "write"
            await response.prepare(request)
            await response.write_eof()
            return response
    except NeverFits as err:
        raise StatusError(failure(413, _never_fits_message(err, stage, request))) from None
    except TimeoutError:
        if stage == "write" and response is not None:
            # Too late for a Status: drop the connection, and the unread answer with it.
            if request.transport is not None:
                request.transport.abort()
            return response
        if stage == "read":
            raise StatusError(
                failure(408, f"request body not received within {bounds.timeout:g}s", reason="Timeout")
            ) from None
        if stage == "budget":
            raise StatusError(
                failure(429, "too many large requests in flight; retry later", details={"retryAfterSeconds": 1})
            ) from None
        raise StatusError(
            failure(504, f"request not answered within {bounds.timeout:g}s (server overloaded)")
        ) from None
    finally:
        _resume(tree)
        reservation.release()


# Bodies from this size on are parsed and answered with the cyclic collector paused.
_PAUSE_GC_FROM = 64 * 1024


def _answer(handler: BodyHandler, request: web.Request, body: bytes) -> tuple[web.StreamResponse, list[Any] | None]:
    """Parse ``body`` and let ``handler`` answer it; for a large body, with the collector paused.

    Paused across parse, work and encoding, and until the caller has written the answer and
    freed the parsed tree (``_resume``): a review of 10,000 Foos makes ~1,000,000 containers,
    and a collector resumed while they live walks them all (bench.profile: ~16% of a 10k
    review); freed first, they leave it nothing to count. Freeing them takes ~50 ms, which the
    apiserver no longer waits for: the tree is returned, held, and freed after the write.
    """
    if len(body) < _PAUSE_GC_FROM or not gc.isenabled():
        return handler(request, parse_json(body)), None
    gc.disable()
    try:
        tree = parse_json(body)
        return handler(request, tree), [tree]
    except BaseException:
        gc.enable()
        raise


def _resume(held: list[Any] | None) -> None:
    """Free what ``_answer`` held, then let the collector run again."""
    if held is not None:
        held.clear()
        gc.enable()


def _never_fits_message(err: NeverFits, stage: str, request: web.Request) -> str:
    if request.content_length and err.wanted == 2 * request.content_length:
        return (
            f"request body of {request.content_length} bytes is larger than this server can hold at once "
            f"({err.largest // 2} bytes; the in-flight budget follows --memory-limit-mib)"
        )
    return (
        f"request body would take about {err.wanted // MiB} MiB to parse, more than this server can hold "
        f"at once ({err.largest // MiB} MiB): too many objects, arrays or values for its size"
    )


Rule = Callable[[AdmissionRequest, Settings], Outcome]


def admission_handler(rule: Rule) -> BodyHandler:
    """Decode an AdmissionReview, ask the rule, encode its outcome. Malformed calls get 400."""

    def handle(request: web.Request, body: Any) -> web.StreamResponse:
        try:
            review_request = admission.decode(body)
        except ValueError as err:
            raise StatusError(failure(400, str(err))) from None
        outcome = rule(review_request, request.app[SETTINGS])
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
        return json_response(admission.encode(review_request.uid, outcome))

    return handle


def convert(request: web.Request, body: Any) -> web.StreamResponse:
    try:
        answer = conversion.review(body)  # large reviews: the collector is paused by _answer
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
    return json_response(answer)


def build_app(
    settings: Settings | None = None,
    *,
    readiness: Readiness | None = None,
    webhook_metrics: WebhookMetrics | None = None,
) -> web.Application:
    settings = settings or Settings()
    # The app-wide limit is the largest one; each endpoint enforces its own while reading.
    app = serving_app(
        readiness or Readiness(serving=True),
        client_max_size=max(settings.admission_body_limit, settings.conversion_body_limit),
    )
    app[SETTINGS] = settings
    app[METRICS] = webhook_metrics or WebhookMetrics.create()
    app[BUDGET] = budget = ByteBudget(settings.in_flight_budget)
    mutate = admission_handler(lambda review, settings: mutate_foo(review, image=settings.default_image))
    validate = admission_handler(lambda review, settings: validate_foo(review))
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
    for path, handler, bounds in (
        ("/mutate-foo", mutate, admissions),
        ("/validate-foo", validate, admissions),
        ("/convert", convert, conversions),
    ):
        app.router.add_post(path, _bounded(path, handler, bounds, budget, app[METRICS]))
    return app
