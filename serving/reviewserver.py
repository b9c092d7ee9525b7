"""The admission port's own HTTP/1.1 server: an asyncio Protocol over httptools (llhttp).

Why hand-written (issue 17): a review through aiohttp cost ~200-220 µs of server CPU against
Go controller-runtime's ~160-190 µs, and a bare aiohttp server alone 119 µs; what aiohttp adds
per request (middleware hop, response-prepare signal, ``web.Response``, its request object) was
most of the gap, and importing aiohttp is ~200 ms of a webhook's start. This server does for
the three POST endpoints only what a review needs: the response heads are precomputed, a body
that arrived with its head is answered inside ``data_received`` without an await or a timer,
and every bound aiohttp gave us is kept here, plus the ones a hand-written server owes:

- it serves what kube-apiserver and the kubelet send, a POST with a Content-Length, a GET, and
  refuses the rest with one Status, then closes: Content-Encoding 415, Transfer-Encoding (or a
  POST without a length) 411, Upgrade and CONNECT 400; nothing is inflated, no chunk is read;
- the request head (line + headers) is at most HEAD_LIMIT bytes (431) and must arrive within
  ``head_timeout`` of its first byte (408; slowloris on headers), a new connection's first
  request within ``first_request``;
- Content-Length with Transfer-Encoding is a 400 (request smuggling), as is anything llhttp
  cannot parse; the connection closes after either;
- pipelined requests are answered in order, one at a time, reading paused meanwhile, and not
  while the client leaves what was written unread;
- HTTP/1.0 and ``Connection: close`` close after the answer; ``Expect: 100-continue`` is
  answered when the body is about to be read; idle connections close after ``keepalive``;
- at most ``max_connections``: a newcomer past the cap closes the quietest connection that is
  not being answered; body bytes read before their request pays for them are charged to the
  budget at once (docs/architecture.md, "Resource model (admission port)").

An endpoint (``Endpoint``) is a path and a handler of a parsed JSON body with its Bounds:
body limit (413, Content-Length checked before reading), body deadlines (408), the byte budget
(serving.budget: 413 when a body never fits, 429 when it waits too long), concurrency slots, the
answer deadline (504) and the write deadline (a large answer is charged until its last piece is
handed over; a client that does not read it is cut off).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import socket
import time
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass
from email.utils import formatdate
from http import HTTPStatus
from ssl import SSLContext
from typing import Any, Protocol, cast

import httptools
import orjson

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
from serving.budget import ByteBudget, MiB, NeverFits, Reservation, parse_charge
from serving.readiness import Readiness
from serving.tlsupgrade import Acceptor, Handshake, listening_socket, to_drop

log = logging.getLogger(__name__)

# Go's net/http allows 1 MiB of request head, aiohttp 8190 bytes per line, Node.js 16 KiB.
# kube-apiserver sends ~300 bytes; 16 KiB bounds what a connection can make us hold before a
# request is even routed (llhttp keeps a header's partial bytes), times the connection cap.
HEAD_LIMIT = 16 * 1024
# From the first byte of a request to the end of its head (the apiserver writes it in one go).
HEAD_TIMEOUT = 5.0
# A new connection's TLS handshake, and then the start of its first request: kube-apiserver's
# client gives its own handshake 10 s (client-go's TLSHandshakeTimeout) and writes the request
# it dialed for at once. A bare TCP connect was held 60 s (asyncio's default handshake timeout).
FIRST_REQUEST_SECONDS = 10.0
# Idle after an answer. Above the apiserver's 90 s (client-go's IdleConnTimeout, from
# utilnet.SetTransportDefaults): the client, not us, retires an idle connection, so it never
# writes a POST onto one we are closing (Go does not retry a POST it wrote: a lost review).
# Past the connection cap the least recently active idle connection is closed sooner (below).
KEEPALIVE_SECONDS = 95.0
# Connections one process holds. kube-apiserver keeps at most 25 idle connections per webhook
# host (client-go's MaxIdleConnsPerHost) and opens one per review in flight beyond them; the
# kubelet's probes open a new one each. At the cap a new connection closes the one that has
# been quiet longest among those not being answered (idle, or still sending a head or a body,
# or waiting for the budget): neither probes nor the apiserver, whose requests arrive whole at
# once, are refused by connections a client merely holds open or trickles into; only when
# every one is being answered is the newcomer closed. Each costs at most a constant, ~320 KiB
# with every buffer below full, so 64 fit in what a process reserves for itself (serving.budget;
# docs/architecture.md, "Resource model (admission port)"); a pod of N workers holds 64 N.
MAX_CONNECTIONS = 64
# A connection just admitted, that has not yet had the time to send its first request, is closed
# to make room only when no other can be: a kubelet probe sends its GET one round trip after its
# handshake, and under a churn of attacking connections it was the one quiet longest by then
# (one probe of 60 lost under the attack mix on the real node). An attacker who keeps every
# place fresh must open 64 connections a second, each a full handshake.
FIRST_REQUEST_GRACE = 1.0
# What the transport (and over TLS each of its two layers) holds before writing pauses: also
# the largest answer written at once; larger ones are charged and written a piece at a time.
_WRITE_HIGH = 16 * 1024
# A large answer is written in pieces, each once the transport has room: over TLS the whole
# answer would otherwise be encrypted into the socket transport's buffer at once, and drain()
# (which sees only the TLS layer's buffer) would return while megabytes wait for the client.
_WRITE_PIECE = 16 * 1024
# The kernel's socket buffers of one connection, each way (it doubles the number). Left to
# autotuning, a client that does not read lets the send buffer grow to tcp_wmem's 4 MiB — a
# whole answer out of our hands and our budget, yet in the pod's memory (the cgroup counts
# socket buffers) — and one whose body waits for the budget fills the receive buffer. 64 KiB
# each way still moves ~125 MB/s at a 0.5 ms round trip.
_SOCKET_BUFFER = 32 * 1024
# A body's bytes the connection holds before its handler takes them; past it, reading pauses.
_BUFFER_HIGH = 256 * 1024
# Bodies from this size on are parsed and answered with the cyclic collector paused.
_PAUSE_GC_FROM = 64 * 1024
# Answers from this size on are written without joining them to their head.
_JOIN_BELOW = 64 * 1024

_TEXT = "text/plain; charset=utf-8"
# How long a connection closed before its request was read still reads (and drops) what arrives.
_LINGER_SECONDS = 1.0


@dataclass(frozen=True)
class Bounds:
    """What one endpoint may cost: body size and read deadlines, concurrency, time to answer."""

    body_limit: int
    deadlines: BodyDeadlines
    slots: int
    timeout: float


class Request:
    """One request as parsed: its head, and its body as it arrives."""

    __slots__ = (
        "method",
        "path",
        "content_type",
        "content_length",
        "refused",
        "paid",
        "expect",
        "keep_alive",
        "chunks",
        "buffered",
        "received",
        "complete",
        "waiter",
    )

    def __init__(self) -> None:
        self.method = ""
        self.path = ""
        self.content_type = ""
        self.content_length: int | None = None
        self.refused: Status | None = None  # a head outside what the port serves (the first reason)
        self.paid = False  # its body's bytes are in its own reservation (else in the connection's)
        self.expect = ""
        self.keep_alive = True
        self.chunks: list[bytes] = []
        self.buffered = 0  # bytes in ``chunks``
        self.received = 0  # body bytes so far, taken or not
        self.complete = False
        self.waiter: asyncio.Future[None] | None = None

    def take(self) -> bytes:
        """The body bytes that arrived since the last take."""
        body = self.chunks[0] if len(self.chunks) == 1 else b"".join(self.chunks)
        self.chunks = []
        self.buffered = 0
        return body


# ---- answers ---------------------------------------------------------------------------------


def _head_prefix(code: int, content_type: str) -> bytes:
    return f"HTTP/1.1 {code} {HTTPStatus(code).phrase}\r\nContent-Type: {content_type}\r\nContent-Length: ".encode()


_PREFIXES: dict[tuple[int, str], bytes] = {}


def _prefix(code: int, content_type: str) -> bytes:
    """The status line and fixed headers, built once per status and content type."""
    key = (code, content_type)
    prefix = _PREFIXES.get(key)
    if prefix is None:
        prefix = _PREFIXES[key] = _head_prefix(code, content_type)
    return prefix


_JSON_200 = _prefix(200, JSON)


class _Clock:
    """The Date header, formatted once a second."""

    second = 0
    date = b""

    @classmethod
    def header(cls) -> bytes:
        now = int(time.time())
        if now != cls.second:
            cls.second = now
            cls.date = f"\r\nDate: {formatdate(now, usegmt=True)}\r\n\r\n".encode()
        return cls.date


def status_body(status: Status) -> tuple[int, bytes]:
    return status.get("code", 500), orjson.dumps(status)


# ---- endpoints -------------------------------------------------------------------------------


class Counter(Protocol):
    def inc(self, amount: float = 1) -> None: ...


class Gauge(Counter, Protocol):
    def dec(self, amount: float = 1) -> None: ...


class Histogram(Protocol):
    def observe(self, amount: float) -> None: ...


@dataclass(frozen=True)
class EndpointMetrics:
    """An endpoint's instruments, looked up once (``labels()`` was 4% of a review, bench.profile)."""

    in_flight: Gauge
    latency: Histogram
    requests: Callable[[int], Counter]  # by HTTP code


# A handler of a body already read, paid for and parsed: the JSON of its 200 answer, or a
# StatusError. Synchronous: the CPU work of one review never waits, so it runs on the fast path
# without a deadline of its own.
BodyHandler = Callable[[Request, Any], bytes]


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
        answer is small: read, charged, parsed, decided and written without one await or timer
        (bench.profile: timers and context managers were ~10% of a review). Otherwise the
        coroutine that finishes it with every deadline in force (``serve``), to run as a task."""
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
                    waiting = self.serve(conn, request, started, body=body, counted=True, held=held)
                    held = None
                    return waiting
                answer, tree = _answer(self.handler, request, body, opens)
                if not conn.fits_send_buffer(len(answer)):
                    # A large answer: written under the deadline, still paid for (released there).
                    prepared = self.serve(
                        conn, request, started, body=body, counted=True, held=held, answer=answer, tree=tree
                    )
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

    async def serve(
        self,
        conn: Connection,
        request: Request,
        started: float,
        *,
        body: bytes | None = None,
        counted: bool = False,
        held: Reservation | None = None,
        answer: bytes | None = None,
        tree: list[Any] | None = None,
    ) -> None:
        """``answer``'s way with every deadline: the body read (unless ``body`` was), paid for,
        parsed and answered (unless ``answer`` was, with ``held`` and ``tree``) and written.
        ``held`` is what is charged already (for ``body``, or for ``answer`` and ``tree``)."""
        if not counted:
            self.in_flight.inc()
        code = 500
        try:
            code = await self._serve(conn, request, body, held, answer, tree)
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

    async def _serve(
        self,
        conn: Connection,
        request: Request,
        body: bytes | None,
        held: Reservation | None,
        answer: bytes | None,
        tree: list[Any] | None,
    ) -> int:
        """Read the body under deadlines and the byte budget, then take a slot for the CPU work.

        In that order, so a client that sends its body slowly holds neither a slot (408 when its
        deadline passes) nor more budget than the bytes it declared; the parse waits until the
        estimated size of its tree fits (serving.budget), and a body that never could is refused
        unparsed. The answer is written before the bytes are given back, under the same deadline.
        """
        bounds = self.bounds
        stage = "budget"
        if held is not None:
            request.paid = True  # its bytes are in ``held``: not a connection to close for room
        reservation = held or Reservation(self.budget)
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
                        stage = "read"
                        body = await _read_body(conn, request, bounds)
                        stage = "budget"
                    else:
                        # As if read here: a body too large to hold twice is refused in those words.
                        await reservation.resize(2 * len(body))
                    charge, opens = parse_charge(body)
                    await reservation.resize(charge)
                    stage = "work"
                    async with self.slots:
                        answer, tree = _answer(self.handler, request, body, opens)
                # Written while still paid for and under the deadline: a client that does not
                # read its answer must not keep megabytes in the send buffer for free. The
                # answer is charged too (made already, so charged room or not).
                stage = "write"
                reservation.force(reservation.held + len(answer))
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
            if stage == "write":
                conn.abort()  # too late for a Status: drop the connection, and the unread answer with it
                return 200
            if stage == "read":
                raise request_timeout(f"request body not received within {bounds.timeout:g}s") from None
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


def _internal_error(conn: Connection, request: Request) -> int:
    log.exception("internal error serving %s %s", request.method, request.path)
    conn.close_after = True
    _write_status(conn, failure(500, "internal error; see the server's log"))
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
    freed the parsed tree (``_resume``): a review of 10,000 Foos makes ~1,000,000 containers,
    and a collector resumed while they live walks them all (bench.profile: ~16% of a 10k
    review); freed first, they leave it nothing to count. Freeing them takes ~50 ms, which the
    apiserver no longer waits for: the tree is returned, held, and freed after the write.
    """
    if len(body) < _PAUSE_GC_FROM or not gc.isenabled():
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


# ---- the app: routes and probes --------------------------------------------------------------


class ReviewApp:
    """What the port serves: POST endpoints by path, `/healthz` and `/readyz`, a Status for the rest."""

    def __init__(
        self,
        readiness: Readiness,
        endpoints: Iterable[Endpoint],
        *,
        head_timeout: float = HEAD_TIMEOUT,
        keepalive: float = KEEPALIVE_SECONDS,
        first_request: float = FIRST_REQUEST_SECONDS,
        max_connections: int = MAX_CONNECTIONS,
        budget: ByteBudget | None = None,
    ) -> None:
        self.readiness = readiness
        self.endpoints = {endpoint.path: endpoint for endpoint in endpoints}
        self.head_timeout = head_timeout
        self.keepalive = keepalive
        self.first_request = first_request
        self.max_connections = max_connections
        # Where a connection charges body bytes it holds before their request is paid for.
        self.budget = budget

    def answer(self, conn: Connection, request: Request) -> Coroutine[Any, Any, None] | None:
        """Answer ``request`` at once (None), or the coroutine that will."""
        endpoint = self.endpoints.get(request.path)
        if endpoint is not None and request.method == "POST":
            return endpoint.answer(conn, request)
        if request.method in ("GET", "HEAD") and request.path in ("/healthz", "/readyz"):
            ready, why = (True, "ok") if request.path == "/healthz" else self.readiness.ready()
            conn.write(200 if ready else 503, _TEXT, why.encode(), head_only=request.method == "HEAD")
        elif endpoint is not None or request.path in ("/healthz", "/readyz"):
            _write_status(conn, failure(405, f"method {request.method} is not allowed on {request.path}"))
        else:
            _write_status(conn, failure(404, "the server could not find the requested resource"))
        return None


def _write_status(conn: Connection, status: Status) -> None:
    code, body = status_body(status)
    conn.write(code, JSON, body)


# ---- the connection --------------------------------------------------------------------------


class _Refused(Exception):
    """The request cannot be parsed further: answer this Status and close."""

    def __init__(self, status: Status) -> None:
        self.status = status


class Connection(asyncio.Protocol):
    """One client connection: parses requests, answers them one at a time, in order."""

    def __init__(self, app: ReviewApp, connections: set[Connection]) -> None:
        self.app = app
        self.handshaking = False  # over TLS: accepted, its handshake not over yet
        self.handshake: Handshake | None = None
        self.handshakes: dict[Connection, None] | None = None  # the server's handshakes under way
        self.readiness = app.readiness
        self.connections = connections
        self.loop = asyncio.get_running_loop()
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.queue: list[Request] = []  # parsed heads, answered in order; the first is being answered
        self.parsing: Request | None = None
        self.in_head = False
        self.head_size = 0  # bytes of the head being parsed, as llhttp hands them over
        self.head_fed = 0  # bytes fed while a head was incomplete (llhttp buffers partial headers)
        self.head_started = 0.0
        self.busy = False
        self.task: asyncio.Task[None] | None = None
        self.close_after = False  # close once the answer being written is out
        self.refusal: Status | None = None  # what to answer once the requests before it are answered
        self.closing = False
        self.reading_paused = False
        self.writing_paused = False
        self.drained: asyncio.Future[None] | None = None
        self.last_active = 0.0
        self.timer: asyncio.TimerHandle | None = None
        self.timer_at = 0.0
        self.write_limit = 64 * 1024
        self.served = False  # an answer was written: idle from now on is keep-alive
        # Body bytes read for requests not paid for yet (serving.budget): charged, and reading
        # stops until their request pays, so at most one read's worth each time.
        self.unpaid = Reservation(app.budget) if app.budget is not None else None

    # -- asyncio.Protocol ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport, though uvloop's do not subclass asyncio.Transport (no isinstance).
        stream = cast(asyncio.Transport, transport)
        if self.handshaking:  # over TLS: its handshake is over, it is a connection from now on
            self._end_handshake()
        if self.closing or not self._admitted():
            stream.abort()  # every connection is busy with a paid request: this one waits its turn
            return
        _small_socket_buffers(stream.get_extra_info("socket"))
        self.transport = stream
        self.last_active = self.loop.time()
        self._arm(self.last_active + self.app.first_request)
        stream.set_write_buffer_limits(high=_WRITE_HIGH)
        _, self.write_limit = stream.get_write_buffer_limits()

    def accepted(self, sock: socket.socket, context: SSLContext, handshakes: dict[Connection, None]) -> None:
        """A TLS connection just accepted: counted among the ``handshakes`` under way (at most the
        connection cap; past it one is dropped, one nothing was heard from first) before its
        handshake begins (serving.tlsupgrade)."""
        while len(handshakes) >= self.app.max_connections:
            to_drop(handshakes, lambda conn: conn.handshake).abort()
        _small_socket_buffers(sock)
        self.handshakes = handshakes
        handshakes[self] = None
        self.handshaking = True
        self.handshake = Handshake(sock, lambda: self, context, self.app.first_request, self._handshake_over)

    def _handshake_over(self, ok: bool) -> None:
        if self.handshaking:  # failed or timed out (the connection is closed)
            self._end_handshake()

    def _end_handshake(self) -> None:
        self.handshaking = False
        if self.handshakes is not None:
            self.handshakes.pop(self, None)

    def _admitted(self) -> bool:
        """Count this connection; False if every one is busy with a paid request (it waits its turn)."""
        if len(self.connections) >= self.app.max_connections and not _make_room(self.connections, self.loop.time()):
            return False
        self.connections.add(self)
        self.last_active = self.loop.time()
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self.connections.discard(self)
        self.closing = True
        self.transport = None
        if self.timer is not None:
            self.timer.cancel()
        if self.task is not None:
            self.task.cancel()
        if self.drained is not None and not self.drained.done():
            self.drained.set_result(None)
        if self.unpaid is not None:
            self.unpaid.release()

    def data_received(self, data: bytes) -> None:
        if self.closing or self.refusal is not None:
            return  # lingering, or past what could be parsed: dropped
        self.last_active = self.loop.time()
        try:
            self.parser.feed_data(data)
        except _Refused as refused:
            self._refuse(refused.status)
            return
        except httptools.HttpParserCallbackError as err:
            cause = err.__context__
            self._refuse(cause.status if isinstance(cause, _Refused) else failure(400, "malformed HTTP request"))
            return
        except httptools.HttpParserUpgrade:
            self._refuse(failure(400, "protocol upgrades are not served here"))
            return
        except httptools.HttpParserError as err:
            self._refuse(failure(400, f"malformed HTTP request: {err}"))
            return
        if self.in_head:
            # A head still arriving: bounded in size (llhttp holds a header's partial bytes) and in time.
            self.head_fed += len(data)
            if self.head_fed > HEAD_LIMIT:
                self._refuse(_head_too_large())
                return
            self._arm(self.head_started + self.app.head_timeout)
        if not self.busy:
            self._answer_queue()
        elif len(self.queue) > 1 and not self.reading_paused:
            self._pause_reading()  # a pipelined request waits its turn; so does the next one
        if self.queue and self.unpaid is not None:
            self._charge_unpaid()

    def _charge_unpaid(self) -> None:
        """Charge the body bytes held for requests not paid for yet; stop reading while there are any."""
        unpaid = self.unpaid
        assert unpaid is not None
        held = sum(request.buffered for request in self.queue if not request.paid)
        if held != unpaid.held:
            unpaid.force(held)
        if held and not self.reading_paused:
            self._pause_reading()

    def paid(self, request: Request) -> None:
        """``request``'s reservation now covers its body: the connection's charge for it goes."""
        request.paid = True
        if self.unpaid is not None:
            self._charge_unpaid()
        self.resume_reading()

    def eof_received(self) -> bool | None:
        if not self.busy and not self.queue:
            return None  # closes
        if self.transport is not None and self.transport.get_extra_info("sslcontext") is not None:
            # TLS cannot stay half-open: asyncio closes the connection anyway, and logs a warning
            # for each True returned (91 lines from one attack mix).
            return None
        self.close_after = True
        return True  # answer what was asked, then close

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False
        if self.drained is not None and not self.drained.done():
            self.drained.set_result(None)
        if not self.busy and self.queue:
            self._answer_queue()  # answers wait while the client does not read (below)

    # -- httptools callbacks -------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self.parsing = Request()
        self.in_head = True
        self.head_size = self.head_fed = 0
        self.head_started = self.loop.time()

    def on_url(self, url: bytes) -> None:
        assert self.parsing is not None
        self.head_size += len(url)
        if self.head_size > HEAD_LIMIT:
            raise _Refused(_head_too_large())
        self.parsing.path += url.decode("latin-1")

    def on_header(self, name: bytes, value: bytes) -> None:
        request = self.parsing
        assert request is not None
        self.head_size += len(name) + len(value) + 4
        if self.head_size > HEAD_LIMIT:
            raise _Refused(_head_too_large())
        lower = name.lower()
        if lower == b"content-type":
            request.content_type = value.split(b";", 1)[0].strip().lower().decode("latin-1")
        elif lower == b"content-length":
            try:
                request.content_length = int(value)
            except ValueError:
                raise _Refused(failure(400, "malformed Content-Length")) from None
        elif lower == b"transfer-encoding":
            _refuse_once(request, failure(411, "Transfer-Encoding is not served here: send a Content-Length"))
        elif lower == b"content-encoding":
            _refuse_once(
                request,
                failure(415, f"Content-Encoding {value.decode('latin-1')!r} is not served here: send the body as is"),
            )
        elif lower == b"upgrade":
            _refuse_once(request, _NO_UPGRADES)
        elif lower == b"expect":
            if value.strip().lower() != b"100-continue":
                raise _Refused(failure(417, f"unsupported Expect {value.decode('latin-1')!r}"))
            request.expect = "100-continue"

    def on_headers_complete(self) -> None:
        request = self.parsing
        assert request is not None
        parser = self.parser
        request.method = parser.get_method().decode("latin-1")
        if request.method == "CONNECT":
            raise _Refused(_NO_UPGRADES)
        if request.refused is not None:
            raise _Refused(request.refused)
        if request.method == "POST" and request.content_length is None:
            raise _Refused(failure(411, "a POST must carry a Content-Length"))
        request.keep_alive = parser.should_keep_alive() and parser.get_http_version() == "1.1"
        query = request.path.find("?")
        if query >= 0:
            request.path = request.path[:query]
        self.in_head = False
        self.queue.append(request)

    def on_body(self, body: bytes) -> None:
        request = self.parsing
        assert request is not None
        request.chunks.append(body)
        request.buffered += len(body)
        request.received += len(body)
        if request.buffered > _BUFFER_HIGH and not self.reading_paused:
            self._pause_reading()  # the handler has not taken it yet
        self._wake(request)

    def on_message_complete(self) -> None:
        request = self.parsing
        assert request is not None
        request.complete = True
        self.parsing = None
        self._wake(request)

    # -- answering -----------------------------------------------------------------------------

    def _answer_queue(self) -> None:
        """Answer queued requests in order, each at once where it can be; else start its task."""
        # Not while the client leaves what was written unread: pipelined answers would pile up.
        while self.queue and not self.busy and not self.closing and not self.writing_paused:
            request = self.queue[0]
            self.busy = True
            later = self.app.answer(self, request)
            if later is not None:
                self.task = self.loop.create_task(self._finish(later))
                return
            self._answered()
        if self.refusal is not None and not self.busy and not self.queue and not self.closing:
            _write_status(self, self.refusal)  # no request left: written with `Connection: close`
            self._close(linger=True)

    async def _finish(self, answering: Coroutine[Any, Any, None]) -> None:
        try:
            await answering
        except asyncio.CancelledError:
            return  # the connection is gone
        self.task = None
        self._answered()
        self._answer_queue()

    def _answered(self) -> None:
        request = self.queue.pop(0)
        self.busy = False
        self.last_active = self.loop.time()
        if not self.served:  # from now on idle is keep-alive, which may be the shorter wait
            self.served = True
            self._arm(self.last_active + self.app.keepalive)
        if self.unpaid is not None and self.unpaid.held:
            self._charge_unpaid()
        if not request.complete:
            # A body left unread cannot be skipped safely: the connection ends with this answer.
            self._close(linger=True)
            return
        if self.close_after:
            self._close()
            return
        if self.reading_paused and len(self.queue) <= 1:
            self.resume_reading()

    def write(
        self, code: int, content_type: str, body: bytes, *, head_only: bool = False, length: int | None = None
    ) -> None:
        """Write one answer: the precomputed head, its length, and `Connection: close` when it is the last."""
        transport = self.transport
        if transport is None:
            return
        request = self.queue[0] if self.queue else None
        if self.readiness.draining or self.closing or request is None or not request.keep_alive:
            self.close_after = True
        elif not request.complete:
            self.close_after = True  # its body is not read: this answer is the connection's last
        prefix = _JSON_200 if code == 200 and content_type == JSON else _prefix(code, content_type)
        length_text = str(len(body) if length is None else length).encode()
        if self.close_after:
            head = b"".join((prefix, length_text, b"\r\nConnection: close", _Clock.header()))
        else:
            head = b"".join((prefix, length_text, _Clock.header()))
        if head_only:
            transport.write(head)
        elif len(body) < _JOIN_BELOW:
            transport.write(head + body)
        else:
            transport.write(head)
            transport.write(body)

    async def write_in_pieces(self, code: int, content_type: str, body: bytes) -> None:
        """Write a large answer a piece at a time, each once the transport has room again, so
        what waits for the client stays within the transport's limits (callers bound the wait)."""
        self.write(code, content_type, b"", head_only=True, length=len(body))
        for start in range(0, len(body), _WRITE_PIECE):
            await self.drain()
            if self.transport is None:
                raise ConnectionResetError("the client closed the connection")
            self.transport.write(body[start : start + _WRITE_PIECE])
        await self.drain()

    def write_continue(self) -> None:
        if self.transport is not None:
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def fits_send_buffer(self, size: int) -> bool:
        """True if writing ``size`` more bytes cannot wait for the client to read."""
        transport = self.transport
        return transport is not None and transport.get_write_buffer_size() + size + 1024 < self.write_limit

    async def drain(self) -> None:
        """Until the client has read enough of what was written (callers bound it with a deadline)."""
        if not self.writing_paused or self.transport is None:
            return
        self.drained = self.loop.create_future()
        try:
            await self.drained
        finally:
            self.drained = None

    async def body_arrived(self, request: Request) -> None:
        """Until more of ``request``'s body arrives (or it is whole)."""
        if self.transport is None:
            raise ConnectionResetError("the client closed the connection")
        request.waiter = self.loop.create_future()
        try:
            await request.waiter
        finally:
            request.waiter = None
        if self.transport is None:
            raise ConnectionResetError("the client closed the connection")

    def _wake(self, request: Request) -> None:
        if request.waiter is not None and not request.waiter.done():
            request.waiter.set_result(None)

    def abort(self) -> None:
        if self.handshaking and self.handshake is not None:
            self._end_handshake()
            self.closing = True
            self.handshake.cancel()
        if self.transport is not None:
            self.transport.abort()

    def _refuse(self, status: Status) -> None:
        """The stream cannot be read further: answer the requests read whole before it, then
        ``status``, then close."""
        self.parsing = None
        self.in_head = False
        self.refusal = status
        if self.queue and not self.queue[-1].complete and len(self.queue) > 1:
            self.queue.pop()  # begun after the one in service; never to be read to its end
        if not self.busy:
            self._answer_queue()

    def _close(self, *, linger: bool = False) -> None:
        """Close once what was written is out; ``linger``: the client may still be sending.

        Closing a socket with unread bytes sends a reset, which can destroy the answer before
        the client reads it; so, as Go's net/http does, the sending half is closed first and
        what still arrives is read and dropped for a moment (``data_received`` ignores it).
        """
        self.closing = True
        transport = self.transport
        if transport is None:
            return
        if not linger:
            transport.close()
            return
        if transport.can_write_eof():
            transport.write_eof()
        if self.reading_paused:
            self.reading_paused = False
            transport.resume_reading()
        self.loop.call_later(_LINGER_SECONDS, transport.close)

    def _pause_reading(self) -> None:
        if self.transport is not None and not self.reading_paused:
            self.reading_paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.reading_paused and self.transport is not None and len(self.queue) <= 1:
            self.reading_paused = False
            self.transport.resume_reading()

    # -- the one timer: keep-alive and head deadlines ------------------------------------------

    def _arm(self, when: float) -> None:
        if self.timer is not None:
            if self.timer_at <= when:
                return  # it fires first and looks again
            self.timer.cancel()
        self.timer_at = when
        self.timer = self.loop.call_at(when, self._check_time)

    def _check_time(self) -> None:
        """Close an idle connection past the keep-alive, refuse a head past its deadline; else look later."""
        self.timer = None
        if self.transport is None:
            return
        now = self.loop.time()
        if self.in_head and not self.busy:
            due = self.head_started + self.app.head_timeout
            if now >= due:
                self._refuse(
                    failure(408, f"request head not received within {self.app.head_timeout:g}s", reason="Timeout")
                )
                return
            self._arm(due)
            return
        if self.busy or self.queue:
            self._arm(now + self.app.keepalive)  # a request in service has deadlines of its own
            return
        due = self.last_active + (self.app.keepalive if self.served else self.app.first_request)
        if now >= due:
            if self.transport.get_write_buffer_size():
                self.abort()  # an answer left unread all this time: not waited for any longer
            else:
                self._close()
            return
        self._arm(due)

    def shut(self) -> None:
        """The server is closing: an idle connection closes now, a busy one after its answer."""
        self.close_after = True
        if not self.busy and not self.queue:
            self._close()


_NO_UPGRADES = failure(400, "protocol upgrades and CONNECT are not served here")


def _refuse_once(request: Request, status: Status) -> None:
    """Refuse ``request`` once its head is read (its first reason wins): what kube-apiserver and
    the kubelet send (POST with a Content-Length, GET) never has these headers."""
    if request.refused is None:
        request.refused = status


def _small_socket_buffers(sock: socket.socket | None) -> None:
    if sock is None:
        return
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _SOCKET_BUFFER)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _SOCKET_BUFFER)
    except OSError:
        pass


def _make_room(connections: set[Connection], now: float) -> bool:
    """Close one connection not being answered, the quietest of the first kind there is: one
    that has had its chance and was never answered (idle, trickling, waiting for the budget),
    then one still within its first-request grace, then one kept alive after answers (a client's
    pool: kube-apiserver does not retry a POST written onto a connection the server closed).
    False if every one is being answered."""
    quietest: list[Connection | None] = [None, None, None]
    for conn in connections:
        if conn.busy and conn.queue and conn.queue[0].paid and conn.queue[0].complete:
            continue  # its request is read and paid for: being answered
        if conn.served:
            kind = 2
        elif not conn.queue and not conn.in_head and now - conn.last_active < FIRST_REQUEST_GRACE:
            kind = 1
        else:
            kind = 0
        if (current := quietest[kind]) is None or conn.last_active < current.last_active:
            quietest[kind] = conn
    victim = next((conn for conn in quietest if conn is not None), None)
    if victim is None:
        return False
    victim.abort()
    victim.connection_lost(None)  # out of the set now: the transport reports it only later
    return True


def _head_too_large() -> Status:
    return failure(431, f"request head is larger than {HEAD_LIMIT} bytes", reason="RequestHeaderFieldsTooLarge")


# ---- the listener ----------------------------------------------------------------------------


class ReviewServer:
    """``app`` on a port (TLS when given a context): the listener serving.lifecycle's lifecycle drives."""

    def __init__(self, app: ReviewApp) -> None:
        self.app = app
        self.readiness = app.readiness
        self.connections: set[Connection] = set()
        self.server: asyncio.Server | None = None  # plain HTTP
        self.acceptor: Acceptor | None = None  # TLS
        # TLS connections accepted whose handshake is under way, oldest first: as many as the
        # cap, in a pool of their own, so that a flood of bare connects makes room only among its
        # own (a real client's handshake takes a millisecond) and never closes a pooled connection.
        self.handshakes: dict[Connection, None] = {}

    @property
    def port(self) -> int:
        if self.acceptor is not None:
            return self.acceptor.port
        assert self.server is not None
        return int(self.server.sockets[0].getsockname()[1])

    async def prepare(self) -> None:
        """Nothing to do before listening: the review app needs no start-up."""

    async def start(
        self, host: str, port: int, *, ssl: SSLContext | None = None, reuse_port: bool = False, backlog: int = 1024
    ) -> None:
        if ssl is not None:
            # Accepted here, not by create_server(ssl=): a connection is counted before its
            # handshake, which runs only if it is admitted (serving.tlsupgrade).
            sock = listening_socket(host, port, backlog=backlog, reuse_port=reuse_port)
            self.acceptor = Acceptor(
                sock, lambda conn: Connection(self.app, self.connections).accepted(conn, ssl, self.handshakes)
            )
            return
        self.server = await asyncio.get_running_loop().create_server(
            lambda: Connection(self.app, self.connections),
            host,
            port,
            backlog=backlog,
            reuse_address=True,
            reuse_port=reuse_port or None,
        )

    async def stop(self, timeout: float) -> None:
        """Stop listening; let answers in progress finish within ``timeout``; then cut what is left."""
        if self.server is not None:
            self.server.close()
        if self.acceptor is not None:
            await self.acceptor.close()
        for conn in list(self.handshakes):
            conn.abort()
        for conn in list(self.connections):
            conn.shut()
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while self.connections and loop.time() < end:
            await asyncio.sleep(0.05)
        for conn in list(self.connections):
            conn.abort()
        if self.server is not None:
            await self.server.wait_closed()
