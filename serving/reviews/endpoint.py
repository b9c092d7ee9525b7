"""An endpoint: one POST path, a handler of its parsed JSON body, and every bound of it.

Its bounds (``Bounds``): body limit (413, Content-Length checked before reading), body deadlines
(408), the byte budget (serving.budget: 413 when a body never fits, 429 when it waits too long),
concurrency slots, the answer deadline (504) and the write deadline (a large answer is charged
until its last piece is handed over; a client that does not read it is cut off).

Two paths. The fast one (``Endpoint.answer``) takes a body that arrived whole with its head,
fits the budget at once, finds a free slot and makes an answer that fits the send buffer: read,
charged, parsed, decided and written without one await or timer, as kube-apiserver's reviews
arrive. Anything else goes the slow way (``Endpoint.serve``) as a task, with every deadline in
force; what the fast path had done already travels with it as one ``Handoff``.
"""

from __future__ import annotations

import asyncio
import enum
import gc
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol

from apimachinery.bodies import (
    JSON,
    BodyDeadlines,
    StatusError,
    body_too_large,
    is_json_content_type,
    parse_json,
    request_timeout,
    unsupported_content_type,
)
from apimachinery.status import Status, failure
from serving.budget import PAUSE_GC_FROM, ByteBudget, MiB, NeverFits, Reservation, parse_charge

from .protocol import Connection, Request, status_body

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Bounds:
    """What one endpoint may cost: body size and read deadlines, concurrency, time to answer."""

    body_limit: int
    deadlines: BodyDeadlines
    slots: int
    timeout: float


class Counter(Protocol):
    def inc(self, amount: float = 1) -> None: ...


class Gauge(Counter, Protocol):
    def dec(self, amount: float = 1) -> None: ...


class Histogram(Protocol):
    def observe(self, amount: float) -> None: ...


@dataclass(frozen=True)
class EndpointMetrics:
    """An endpoint's instruments, looked up once: ``labels()`` per review is a dict lookup and a
    lock, a measurable share of a review's CPU (bench/README, "Figures moved from docstrings")."""

    in_flight: Gauge
    latency: Histogram
    requests: Callable[[int], Counter]  # by HTTP code


# A handler of a body already read, paid for and parsed: the JSON of its 200 answer, or a
# StatusError. Synchronous: the CPU work of one review never waits, so it runs on the fast path
# without a deadline of its own.
BodyHandler = Callable[[Request, Any], bytes]


@dataclass(slots=True)
class Handoff:
    """What the fast path did before handing a request to the slow one: the body it read and
    what it charged for it, and, when only the write is left, the answer and the parsed tree."""

    body: bytes
    held: Reservation
    answer: bytes | None = None
    tree: list[Any] | None = None


class _Phase(enum.Enum):
    """Where the slow path is when its one deadline passes: what the timeout means there."""

    BUDGET = "budget"  # waiting for room in the byte budget: 429, retry later
    READ = "read"  # reading the body: 408
    WORK = "work"  # waiting for a slot, or deciding: 504
    WRITE = "write"  # writing the answer: too late for a Status, the connection is dropped


class Endpoint:
    """One POST path with all its bounds and its metrics, in one hop."""

    def __init__(
        self, path: str, handler: BodyHandler, bounds: Bounds, budget: ByteBudget, metrics: EndpointMetrics
    ) -> None:
        self.path = path
        self.handler = handler
        self.bounds = bounds
        self.budget = budget
        self.slots = asyncio.Semaphore(bounds.slots)
        self.in_flight = metrics.in_flight
        self.latency = metrics.latency
        self.requests = metrics.requests
        self._by_code: dict[int, Counter] = {}

    def _count(self, code: int, started: float) -> None:
        self.in_flight.dec()
        self.latency.observe(time.perf_counter() - started)
        counter = self._by_code.get(code)
        if counter is None:
            counter = self._by_code[code] = self.requests(code)
        counter.inc()

    def answer(self, conn: Connection, request: Request) -> Coroutine[Any, Any, None] | None:
        """Answer at once if the body is whole, fits the budget at once, a slot is free and the
        answer is small, without one await or timer (their cost is a share of a review worth
        saving: bench/README, "Figures moved from docstrings"). Otherwise the coroutine that finishes it with every deadline in
        force (``serve``), to run as a task."""
        started = time.perf_counter()
        if not is_json_content_type(request.content_type):
            self.in_flight.inc()
            code, answer = status_body(unsupported_content_type(request.content_type).status)
            conn.write(code, JSON, answer)
            self._count(code, started)
            return None
        if not request.complete or self.slots.locked():
            return self.serve(conn, request, started)
        self.in_flight.inc()
        held: Reservation | None = Reservation(self.budget)
        tree: list[Any] | None = None
        try:
            try:
                body = _whole_body(request, self.bounds.body_limit)
                assert held is not None
                charge, opens = parse_charge(body)
                if not held.try_resize(charge):
                    held.force(len(body))  # held while it waits for room: charged
                    waiting = self.serve(conn, request, started, Handoff(body, held))
                    held = None
                    return waiting
                answer, tree = _answer(self.handler, request, body, opens)
                if not conn.fits_send_buffer(len(answer)):
                    # A large answer: written under the deadline, still paid for (released there).
                    prepared = self.serve(conn, request, started, Handoff(body, held, answer, tree))
                    held = tree = None
                    return prepared
                conn.write(200, JSON, answer)
                code = 200
            except StatusError as err:
                code, answer = status_body(err.status)
                conn.write(code, JSON, answer)
            except Exception:
                code = _internal_error(conn, request)
        finally:
            _resume(tree)
            if held is not None:
                held.release()
        self._count(code, started)
        return None

    async def serve(self, conn: Connection, request: Request, started: float, handoff: Handoff | None = None) -> None:
        """``answer``'s way with every deadline: the body read (unless handed off), paid for,
        parsed and answered (unless the handoff carries the answer) and written."""
        if handoff is None:
            self.in_flight.inc()  # else counted by ``answer`` already
        code = 500
        try:
            code = await self._serve(conn, request, handoff)
        except StatusError as err:
            code, status = status_body(err.status)
            conn.write(code, JSON, status)
        except asyncio.CancelledError:
            code = 0  # the client left: nothing was answered
            raise
        except ConnectionError:
            code = 0  # the client left between two awaits: one line, not an internal error
            log.info("client closed the connection before its answer", extra={"path": request.path})
        except Exception:
            code = _internal_error(conn, request)
        finally:
            if code:
                self._count(code, started)
            else:
                self.in_flight.dec()

    async def _serve(self, conn: Connection, request: Request, handoff: Handoff | None) -> int:
        """Read the body under deadlines and the byte budget, then take a slot for the CPU work.

        In that order, so a client that sends its body slowly holds neither a slot (408 when its
        deadline passes) nor more budget than the bytes it declared; the parse waits until the
        estimated size of its tree fits (serving.budget), and a body that never could is refused
        unparsed. The answer is written before the bytes are given back, under the same deadline.
        """
        bounds = self.bounds
        phase = _Phase.BUDGET
        if handoff is not None:
            request.paid = True  # its bytes are in the handoff's reservation: not a connection to close for room
            reservation, body, answer, tree = handoff.held, handoff.body, handoff.answer, handoff.tree
        else:
            reservation, body, answer, tree = Reservation(self.budget), None, None, None
        try:
            async with asyncio.timeout(bounds.timeout):
                if answer is None:
                    if body is None:
                        declared = request.content_length or 0  # the head has one (else 411)
                        if declared > bounds.body_limit:
                            raise body_too_large(bounds.body_limit)
                        # Raw bytes twice while reading: the chunks and their join.
                        await reservation.resize(2 * declared)
                        conn.paid(request)
                        phase = _Phase.READ
                        body = await _read_body(conn, request, bounds)
                        phase = _Phase.BUDGET
                    else:
                        # As if read here: a body too large to hold twice is refused in those words.
                        await reservation.resize(2 * len(body))
                    charge, opens = parse_charge(body)
                    await reservation.resize(charge)
                    phase = _Phase.WORK
                    async with self.slots:
                        answer, tree = _answer(self.handler, request, body, opens)
                # Written while still paid for and under the deadline: a client that does not
                # read its answer must not keep megabytes in the send buffer for free. The
                # answer is charged too (made already, so charged room or not).
                phase = _Phase.WRITE
                reservation.force(reservation.held + len(answer) + conn.send_buffer_charge(len(answer)))
                # The collector must not stay paused while a client takes its time to read (or
                # never reads) the answer: every cycle made meanwhile, by any connection, would
                # pile up uncounted. The tree is freed and the collector resumed as soon as the
                # first piece is out, which is all the apiserver waits for.
                asyncio.get_running_loop().call_soon(_resume, tree)
                tree = None
                await conn.write_in_pieces(200, JSON, answer)
                return 200
        except NeverFits as err:
            raise StatusError(failure(413, _never_fits_message(err, request))) from None
        except TimeoutError:
            if phase is _Phase.WRITE:
                conn.abort()  # too late for a Status: drop the connection, and the unread answer with it
                return 200
            raise StatusError(_timed_out(phase, bounds)) from None
        finally:
            _resume(tree)
            reservation.release()


def _timed_out(phase: _Phase, bounds: Bounds) -> Status:
    """What the answer deadline passing in ``phase`` is answered with."""
    if phase is _Phase.READ:
        return request_timeout(f"request body not received within {bounds.timeout:g}s").status
    if phase is _Phase.BUDGET:
        return failure(429, "too many large requests in flight; retry later", details={"retryAfterSeconds": 1})
    return failure(504, f"request not answered within {bounds.timeout:g}s (server overloaded)")


def _internal_error(conn: Connection, request: Request) -> int:
    log.exception("internal error serving %s %s", request.method, request.path)
    request.keep_alive = False
    conn.write_status(failure(500, "internal error; see the server's log"))
    return 500


async def _read_body(conn: Connection, request: Request, bounds: Bounds) -> bytes:
    """The request body (its Content-Length is paid for); 408 when it stops coming or takes too long."""
    deadlines = bounds.deadlines
    if request.expect:
        conn.write_continue()
    chunks: list[bytes] = []
    loop = asyncio.get_running_loop()
    end = loop.time() + deadlines.total
    try:
        async with asyncio.timeout(None) as deadline:
            while True:
                if request.buffered:
                    chunks.append(request.take())
                    conn.resume_reading()
                if request.complete:
                    break
                deadline.reschedule(min(loop.time() + deadlines.idle, end))
                await conn.body_arrived(request)
    except TimeoutError:
        if loop.time() >= end:
            raise request_timeout(f"request body not received within {deadlines.total:g}s") from None
        raise request_timeout(f"no request body bytes received for {deadlines.idle:g}s") from None
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _whole_body(request: Request, limit: int) -> bytes:
    """A whole body that arrived with its head, checked against ``limit``."""
    if request.received > limit:
        raise body_too_large(limit)
    return request.take()


def _answer(handler: BodyHandler, request: Request, body: bytes, opens: int) -> tuple[bytes, list[Any] | None]:
    """Parse ``body`` and let ``handler`` answer it; for a large body, with the collector paused.

    Paused across parse, work and encoding, and until the caller has written the answer and
    freed the parsed tree (``_resume``): a large review makes a container per object and per
    field, and a collector resumed while they live walks them all again and again (bench/README,
    "Figures moved from docstrings"); freed first, they leave it nothing to count. Freeing them
    takes a while, which the apiserver no longer waits for: the tree is returned, held, and freed
    after the write.
    """
    if len(body) < PAUSE_GC_FROM or not gc.isenabled():
        return handler(request, parse_json(body, opens=opens)), None
    gc.disable()
    try:
        tree = parse_json(body, opens=opens)
        return handler(request, tree), [tree]
    except BaseException:
        gc.enable()
        raise


def _resume(held: list[Any] | None) -> None:
    """Free what ``_answer`` held, then let the collector run again."""
    if held is not None:
        held.clear()
        gc.enable()


def _never_fits_message(err: NeverFits, request: Request) -> str:
    if request.content_length and err.wanted == 2 * request.content_length:
        return (
            f"request body of {request.content_length} bytes is larger than this server can hold at once "
            f"({err.largest // 2} bytes; the in-flight budget follows --memory-limit-mib)"
        )
    return (
        f"request body would take about {err.wanted // MiB} MiB to parse, more than this server can hold "
        f"at once ({err.largest // MiB} MiB): too many objects, arrays or values for its size"
    )
