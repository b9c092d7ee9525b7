"""The connection: HTTP/1.1 over httptools (llhttp) as one asyncio Protocol and one explicit state.

It serves what kube-apiserver and the kubelet send, a POST with a Content-Length and a GET, and
refuses the rest with one Status, then closes: Content-Encoding 415, Transfer-Encoding (or a POST
without a length) 411, Upgrade and CONNECT 400; nothing is inflated, no chunk is read.
Content-Length with Transfer-Encoding is a 400 (request smuggling), as is anything llhttp cannot
parse. Its port's ``ConnectionLimits`` bound the rest (serving.connections.Held): a head's bytes
(431) and its time from its first byte (408; slowloris on headers), the wait for a first request,
idle time, and the cap. Pipelined requests are answered in order, one at a time, reading paused
meanwhile, and not while the client leaves what was written unread. HTTP/1.0 and ``Connection:
close`` close after the answer; ``Expect: 100-continue`` is answered when the body is about to be read.

A connection is in one ``State`` at a time (see its transitions there); its reading side is at
one ``Reading`` place. Two flags mirror the transport's flow control, ``reading_paused`` and
``writing_paused`` (asyncio calls ``pause_writing``/``resume_writing``), as in any asyncio
Protocol; ``served`` says whether idle time is keep-alive (after an answer) or the wait for a
first request. What is said about one request (its body's progress, whether it is the last the
connection answers) is on its ``Request``.
"""

from __future__ import annotations

import asyncio
import enum
import socket
import time
from collections.abc import Coroutine
from email.utils import formatdate
from http import HTTPStatus
from typing import Any, Protocol, cast

import httptools
import orjson

from apimachinery.bodies import JSON
from apimachinery.status import Status, failure
from serving.budget import ByteBudget, Reservation
from serving.connections import LINGER_SECONDS, ConnectionLimits, Connections, Held, head_too_large
from serving.readiness import Readiness
from serving.tlsupgrade import set_socket_buffers

# What the transport (and over TLS each of its two layers) holds before writing pauses: also
# the largest answer written at once; larger ones are charged and written a piece at a time.
_WRITE_HIGH = 16 * 1024
# A large answer is written in pieces, each once the transport has room: over TLS the whole
# answer would otherwise be encrypted into the socket transport's buffer at once, and drain()
# (which sees only the TLS layer's buffer) would return while megabytes wait for the client.
_WRITE_PIECE = 16 * 1024
# A large answer is written with the send buffer widened to this: through 32 KiB, a 10,000-Foo
# ConversionReview's 15 MB answer took ~450 wake-ups of the loop and the kernel, 15% of the
# review's CPU (bench/README, "Admission back ahead of Go"). The kernel may hold twice the
# setting, which the endpoint charges with the answer (``send_buffer_charge``); the buffer is
# narrowed again before the answer's last bytes, so once the write returns (and the charge is
# given back) the kernel holds no more than every connection may.
_WIDE_SEND_BUFFER = 256 * 1024
_WIDEN_FROM = 1024 * 1024
# A body's bytes the connection holds before its handler takes them; past it, reading pauses.
_BUFFER_HIGH = 256 * 1024
# Requests read ahead of their answers. Reading pauses once one waits behind the one in service,
# but llhttp parses every request in the bytes of one read: a client that pipelines tiny GETs and
# never reads the answers made one connection hold 1,937 of them and the process 300 MiB in 15 s.
# Past this many the stream is refused (after the answers before it). Real clients do not
# pipeline: Go's net/http and client-go send one request per connection at a time.
MAX_PIPELINED = 16
# What one read hands llhttp: the connection reads into one buffer its server shares
# (``read_buffer``, one per event loop), which llhttp has copied what it keeps from before the
# next read. A protocol that takes ``data_received(bytes)`` instead made uvloop's TLS layer
# allocate 256 KiB per read (``SSLObject.read(256 KiB)``, shrunk afterwards): above glibc's mmap
# threshold (serving.limits), an mmap, a page fault, an mremap and an munmap per review
# (bench/README, "Admission back ahead of Go"). 64 KiB: what the kernel's receive buffer hands
# over at once (the admission port's ``socket_buffer_bytes``), so a read still adds at most that
# to what a connection holds unpaid.
READ_SIZE = 64 * 1024
# Answers from this size on are written without joining them to their head.
_JOIN_BELOW = 64 * 1024


def read_buffer() -> memoryview:
    """The buffer every connection of one server (one event loop) reads into."""
    return memoryview(bytearray(READ_SIZE))


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
        # False: the connection closes once this request is answered (the client asked for it, the
        # client is gone, an internal error, the server is stopping, or its body was not read).
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

    @property
    def being_answered(self) -> bool:
        """Read whole and paid for: its answer is under way, not a connection to close for room."""
        return self.paid and self.complete


# ---- answer heads ----------------------------------------------------------------------------


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


# ---- what a connection serves ----------------------------------------------------------------


class Router(Protocol):
    """What the connection asks of the app it serves (serving.reviews.server.ReviewApp, serving.probes)."""

    readiness: Readiness
    limits: ConnectionLimits
    # Where a connection charges body bytes it holds before their request is paid for; None: nowhere.
    budget: ByteBudget | None
    read_buffer: memoryview

    def answer(self, conn: Connection, request: Request) -> Coroutine[Any, Any, None] | None:
        """Answer ``request`` at once (None), or the coroutine that will."""


class State(enum.Enum):
    """Where a connection is in its life.

    WAITING   -> ANSWERING  a request's head is read (the first of the queue is answered)
    ANSWERING -> WAITING    it is answered (then, if it was the last, on to CLOSING)
    WAITING   -> CLOSING    closed on purpose (last answer out, refusal written, idle, stopping)
    any       -> CLOSED     the transport is gone (``connection_lost``), or it was refused at
                            ``connection_made`` (past the cap with none to evict)

    Over TLS a connection exists from when its handshake starts computing, counted among the
    handshakes under way (serving.tlsupgrade.HandshakePool), and is WAITING once it is over.
    """

    WAITING = "waiting"  # counted under the cap; no answer under way (its first request, or the next)
    ANSWERING = "answering"  # the first request of the queue is being answered
    CLOSING = "closing"  # what was written goes out; what still arrives is read and dropped
    CLOSED = "closed"  # nothing more happens


# The members as plain names: ``State.WAITING`` is looked up through the enum's metaclass, several
# times a module name's cost, and the fast path asks a few times per review (bench/README).
WAITING, ANSWERING, CLOSING, CLOSED = State
_ENDED = (CLOSING, CLOSED)


class Reading(enum.Enum):
    """Where the reading side is in the byte stream."""

    BETWEEN = "between"  # before a request's first byte
    HEAD = "head"  # inside a request head: bounded in size and time
    BODY = "body"  # the head is queued; its body is arriving
    REFUSED = "refused"  # the stream cannot be parsed further: what arrives is dropped


BETWEEN, HEAD, BODY, REFUSED = Reading


class _Refused(Exception):
    """The request cannot be parsed further: answer this Status and close."""

    def __init__(self, status: Status) -> None:
        self.status = status


_NO_UPGRADES = failure(400, "protocol upgrades and CONNECT are not served here")


class Connection(Held, asyncio.BufferedProtocol):
    """One client connection: parses requests, answers them one at a time, in order."""

    def __init__(self, app: Router, connections: Connections[Connection]) -> None:
        super().__init__(app.limits, connections)
        self.app = app
        self.head_limit = app.limits.head_bytes
        self.buffer = app.read_buffer
        self.state = WAITING
        self.reading = BETWEEN
        self.readiness = app.readiness
        self.parser = httptools.HttpRequestParser(self)
        self.queue: list[Request] = []  # parsed heads, answered in order; the first is being answered
        self.parsing: Request | None = None
        self.head_size = 0  # bytes of the head being parsed, as llhttp hands them over
        self.task: asyncio.Task[None] | None = None
        self.refusal: Status | None = None  # REFUSED: answered once the requests before it are
        self.reading_paused = False
        self.writing_paused = False
        self.drained: asyncio.Future[None] | None = None
        self.write_limit = 64 * 1024
        # Body bytes read for requests not paid for yet (serving.budget): charged, and reading
        # stops until their request pays, so at most one read's worth each time.
        self.unpaid = Reservation(app.budget) if app.budget is not None else None

    # -- asyncio.Protocol ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport, though uvloop's do not subclass asyncio.Transport (no isinstance).
        stream = cast(asyncio.Transport, transport)
        if not self.admitted(stream):
            self.state = CLOSED
            return
        set_socket_buffers(stream.get_extra_info("socket"), self.limits.socket_buffer_bytes)
        stream.set_write_buffer_limits(high=_WRITE_HIGH)
        _, self.write_limit = stream.get_write_buffer_limits()

    def evict(self) -> None:
        """Evicted for a newcomer: aborted, and forgotten now (the transport says so only later)."""
        self.abort()
        self.connection_lost(None)

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self.state = CLOSED
        if self.task is not None:
            self.task.cancel()
        if self.drained is not None and not self.drained.done():
            self.drained.set_result(None)
        if self.unpaid is not None:
            self.unpaid.release()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.buffer

    def buffer_updated(self, nbytes: int) -> None:
        # Every transport fills the buffer and calls this before it reads for anyone else, and
        # llhttp keeps copies only (the head's bytes, each body piece), so one buffer serves all.
        self.data_received(self.buffer[:nbytes])

    def data_received(self, data: bytes | memoryview) -> None:
        if self.state in _ENDED or self.reading is REFUSED:
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
        if self.reading is HEAD:
            # A head still arriving: bounded in size (llhttp holds a header's partial bytes) and in time.
            if not self.head_fits(len(data)):
                self._refuse(head_too_large(self.head_limit))
                return
        if self.state is WAITING:
            self._answer_queue()
        if len(self.queue) > 1 and not self.reading_paused:
            # A pipelined request waits its turn, or for the client to read what was written
            # (answers wait meanwhile): nothing more is read until the queue is down to one.
            self._pause_reading()
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
        if not self.queue:
            return None  # nothing asked: closes
        if self.transport is not None and self.transport.get_extra_info("sslcontext") is not None:
            # TLS cannot stay half-open: asyncio closes the connection anyway, and logs a warning
            # for each True returned (91 lines from one attack mix).
            return None
        self.queue[-1].keep_alive = False
        return True  # answer every request asked, then close after the last

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False
        if self.drained is not None and not self.drained.done():
            self.drained.set_result(None)
        if self.state is WAITING and self.queue:
            self._answer_queue()  # answers wait while the client does not read (below)

    # -- httptools callbacks -------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self.parsing = Request()
        self.reading = HEAD
        self.head_size = self.head_fed = 0
        self.head_started = self.loop.time()

    def on_url(self, url: bytes) -> None:
        assert self.parsing is not None
        self.head_size += len(url)
        if self.head_size > self.head_limit:
            raise _Refused(head_too_large(self.head_limit))
        self.parsing.path += url.decode("latin-1")

    def on_header(self, name: bytes, value: bytes) -> None:
        request = self.parsing
        assert request is not None
        self.head_size += len(name) + len(value) + 4
        if self.head_size > self.head_limit:
            raise _Refused(head_too_large(self.head_limit))
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
        # And-ed: the server may have made it the last already (``finish`` while its head arrived).
        request.keep_alive = request.keep_alive and parser.should_keep_alive() and parser.get_http_version() == "1.1"
        if len(self.queue) >= MAX_PIPELINED:
            raise _Refused(failure(429, f"more than {MAX_PIPELINED} pipelined requests wait for their answers"))
        query = request.path.find("?")
        if query >= 0:
            request.path = request.path[:query]
        self.reading = BODY
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
        self.reading = BETWEEN
        self._wake(request)

    # -- answering -----------------------------------------------------------------------------

    def _answer_queue(self) -> None:
        """Answer queued requests in order, each at once where it can be; else start its task."""
        # Not while the client leaves what was written unread: pipelined answers would pile up.
        while self.queue and self.state is WAITING and not self.writing_paused:
            request = self.queue[0]
            self.state = ANSWERING
            later = self.app.answer(self, request)
            if later is not None:
                self.task = self.loop.create_task(self._finish(later))
                return
            self._answered()
        if self.reading is REFUSED and self.state is WAITING and not self.queue:
            assert self.refusal is not None
            self.write_status(self.refusal)  # no request left: written with `Connection: close`
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
        if self.state is ANSWERING:
            self.state = WAITING
        self.last_active = self.loop.time()
        if not self.served:  # from now on idle is keep-alive, which may be the shorter wait
            self.served = True
            self._arm(self.last_active + self.limits.idle_seconds)
        if self.unpaid is not None and self.unpaid.held:
            self._charge_unpaid()
        if not request.complete:
            # A body left unread cannot be skipped safely: the connection ends with this answer.
            self._close(linger=True)
            return
        if not request.keep_alive:
            self._close()
            return
        if self.reading_paused and len(self.queue) <= 1:
            self.resume_reading()

    def _last_answer(self) -> None:
        """Close once the next answer is out: every request read so far ends the connection."""
        for request in self.queue:
            request.keep_alive = False
        if self.parsing is not None:
            self.parsing.keep_alive = False

    def write(
        self, code: int, content_type: str, body: bytes, *, head_only: bool = False, length: int | None = None
    ) -> None:
        """Write one answer: the precomputed head, its length, and `Connection: close` when it is the last."""
        transport = self.transport
        if transport is None:
            return
        request = self.queue[0] if self.queue else None
        if request is not None and (self.readiness.draining or not request.complete):
            request.keep_alive = False  # stopping, or its body is not read: this answer is the last
        prefix = _JSON_200 if code == 200 and content_type == JSON else _prefix(code, content_type)
        length_text = str(len(body) if length is None else length).encode()
        if request is None or not request.keep_alive or self.state in _ENDED:
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

    def write_status(self, status: Status) -> None:
        code, body = status_body(status)
        self.write(code, JSON, body)

    @staticmethod
    def send_buffer_charge(size: int) -> int:
        """What the kernel may hold, beyond what every connection may, while an answer of ``size``
        bytes is written (``write_in_pieces``): the caller charges it with the answer."""
        return 2 * _WIDE_SEND_BUFFER if size >= _WIDEN_FROM else 0

    async def write_in_pieces(self, code: int, content_type: str, body: bytes) -> None:
        """Write a large answer a piece at a time, each once the transport has room again, so
        what waits for the client stays within the transport's limits (callers bound the wait
        and charge ``send_buffer_charge``)."""
        self.write(code, content_type, b"", head_only=True, length=len(body))
        pieces = memoryview(body)  # slices of it, not copies: the TLS layer encrypts each at once
        widened = self.send_buffer_charge(len(body))
        narrow_at = len(body) - widened if widened else 0  # the last bytes go through the narrow buffer
        if narrow_at:
            self._send_buffer(_WIDE_SEND_BUFFER)
        try:
            for start in range(0, len(body), _WRITE_PIECE):
                if narrow_at and start >= narrow_at:
                    narrow_at = 0
                    self._send_buffer(self.limits.socket_buffer_bytes)
                await self.drain()
                if self.transport is None:
                    raise ConnectionResetError("the client closed the connection")
                self.transport.write(pieces[start : start + _WRITE_PIECE])
        finally:
            if narrow_at:
                self._send_buffer(self.limits.socket_buffer_bytes)
        await self.drain()

    def _send_buffer(self, size: int) -> None:
        if self.transport is not None:
            set_socket_buffers(self.transport.get_extra_info("socket"), size, socket.SO_SNDBUF)

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

    def _refuse(self, status: Status) -> None:
        """The stream cannot be read further: answer the requests read whole before it, then
        ``status``, then close."""
        self.parsing = None
        self.reading = REFUSED
        self.refusal = status
        if self.queue and not self.queue[-1].complete and len(self.queue) > 1:
            self.queue.pop()  # begun after the one in service; never to be read to its end
        if self.state is WAITING:
            self._answer_queue()
        if len(self.queue) > 1:
            self._pause_reading()  # what still arrives would only be dropped: not read meanwhile

    def _close(self, *, linger: bool = False) -> None:
        """Close once what was written is out; ``linger``: the client may still be sending.

        Closing a socket with unread bytes sends a reset, which can destroy the answer before
        the client reads it; so, as Go's net/http does, the sending half is closed first and
        what still arrives is read and dropped for a moment (``data_received`` ignores it).
        """
        transport = self.transport
        if transport is None:
            self.state = CLOSED
            return
        self.state = CLOSING
        if not linger:
            transport.close()
            return
        if transport.can_write_eof():
            transport.write_eof()
        if self.reading_paused:
            self.reading_paused = False
            transport.resume_reading()
        self.loop.call_later(LINGER_SECONDS, transport.close)

    def _pause_reading(self) -> None:
        if self.transport is not None and not self.reading_paused:
            self.reading_paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.reading_paused and self.transport is not None and len(self.queue) <= 1:
            self.reading_paused = False
            self.transport.resume_reading()

    # -- what its port's policy reads (serving.connections.Held) --------------------------------

    def in_head(self) -> bool:
        return self.reading is HEAD and self.state is not ANSWERING

    def busy(self) -> bool:
        return self.state is ANSWERING or bool(self.queue and not self.writing_paused)

    def asking(self) -> bool:
        return bool(self.queue) or self.reading is not BETWEEN

    def being_answered(self) -> bool:
        return self.state is ANSWERING and bool(self.queue) and self.queue[0].being_answered

    def finish(self) -> None:
        """The server is stopping: an idle connection closes now, a busy one after its answer."""
        if self.queue:
            self._last_answer()
        else:
            self._close()


def _refuse_once(request: Request, status: Status) -> None:
    """Refuse ``request`` once its head is read (its first reason wins): what kube-apiserver and
    the kubelet send (POST with a Content-Length, GET) never has these headers."""
    if request.refused is None:
        request.refused = status
