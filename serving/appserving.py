"""The aiohttp side of serving.lifecycle: the insights API's edge, its connections' guard, its listener.

aiohttp bounds each header line (8190 bytes) and their number (128), not a head as a whole nor
the time it takes to arrive, and it keeps every connection it is given. So each connection's
protocol is ours (``Guard``), in front of the one aiohttp's ``web.Server`` makes (its public
protocol factory): it follows the bytes' HTTP framing with llhttp, and holds the connection to
its port's policy (serving.connections), knowing of aiohttp only its public API. Connections
that presented a client certificate the listener verified (kube-apiserver's front-proxy client)
are bounded by ``API_PORT``, others (the kubelet's probes where no probe port is set; anyone) by
its ``anonymous`` limits. docs/architecture.md, "Resource model (insights)", has the figures.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator
from http import HTTPStatus
from ssl import SSLContext
from typing import cast

import httptools
import orjson
from aiohttp import hdrs, web

from apimachinery.bodies import JSON, StatusError
from apimachinery.status import NOT_ALLOWED, NOT_FOUND, Status, failure

from .connections import (
    KEEPALIVE_SECONDS,
    LINGER_SECONDS,
    VERIFIED,
    ConnectionLimits,
    Connections,
    Held,
    KiB,
    drain,
    head_too_large,
)
from .http import status_response
from .readiness import Readiness
from .tlsupgrade import HandshakePool, listening_socket

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

API_PORT = ConnectionLimits(
    # The aggregator forwards the user's identity in headers (X-Remote-Group per group,
    # X-Remote-Extra-*): more room than the admission port's 16 KiB.
    head_bytes=64 * KiB,
    head_seconds=10.0,
    first_request_seconds=KEEPALIVE_SECONDS,
    # kube-apiserver's aggregator opens one connection per request in flight (a watch holds one;
    # at most 100 of them): 256 x (a 64 KiB head, 128 KiB of body read ahead) is at most 48 MiB.
    max_connections=256,
    evict_order=VERIFIED,
    # Handshakes under way, most of them waiting for their turn to compute: a socket each, no TLS
    # state. Room for a flood from one address to queue (the kernel's queue of 1024 did so
    # before) with kube-apiserver's connections among it, not evicted.
    max_handshakes=256,
    anonymous=ConnectionLimits(
        # The kubelet's probe is ~150 bytes of head, asked and answered at once.
        head_bytes=8 * KiB,
        head_seconds=5.0,
        first_request_seconds=5.0,
        idle_seconds=5.0,
        max_connections=64,
    ),
)
# What a handler still running once the drain closed its connection may take before the app's
# cleanup runs (the drain gave it the whole shutdown timeout already).
_CANCEL_SECONDS = 1.0

READINESS = web.AppKey("readiness", Readiness)


class Guard(Held, asyncio.Protocol):
    """One connection: our protocol in front of aiohttp's (``inner``), holding the port's bounds."""

    def __init__(self, listener: AppListener, inner: asyncio.Protocol) -> None:
        super().__init__(listener.limits, listener.verified)
        self.listener = listener
        self.inner = inner
        self.parser = httptools.HttpRequestParser(self)  # the framing only: where each head begins and ends
        self.begun = 0  # requests whose first byte arrived
        self.in_app = 0  # requests in the app's hands (``edge``)
        self.answered = 0  # requests the app has answered
        self.heading = False  # a head is arriving
        self.refusing = False  # a head was refused: nothing more is read or handed on

    # -- asyncio.Protocol --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # With TLS, called once the handshake is over: the peer's certificate is known.
        stream = cast(asyncio.Transport, transport)
        if not stream.get_extra_info("peercert"):
            assert self.listener.limits.anonymous is not None
            self.limits, self.connections = self.listener.limits.anonymous, self.listener.anonymous
        if self.admitted(stream):
            self.inner.connection_made(stream)

    def connection_lost(self, exc: Exception | None) -> None:
        made = self.transport is not None  # else aiohttp's protocol never knew of it
        super().connection_lost(exc)
        if made:
            self.inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        transport = self.transport
        if transport is None or self.refusing or transport.is_closing():
            return
        self.last_active = self.loop.time()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade as upgrade:
            # aiohttp declines every upgrade here (no route takes one) and reads on as HTTP.
            self.parser = httptools.HttpRequestParser(self)
            with contextlib.suppress(httptools.HttpParserError):
                self.parser.feed_data(data[upgrade.args[0] :])
        except httptools.HttpParserError:
            # aiohttp's parser, llhttp too, refuses it and closes: it answers, we stop following.
            self.refusing, self.heading = True, False
            self.inner.data_received(data)
            self.loop.call_later(LINGER_SECONDS, transport.abort)
            return
        if self.heading and not self.head_fits(len(data)):
            # The part that fits goes to aiohttp first: a line past its own limit (8190 bytes)
            # is its 400 however the bytes were split into reads, and wins over our 431.
            self.inner.data_received(data[: len(data) - (self.head_fed - self.limits.head_bytes)])
            self._refuse_later(head_too_large(self.limits.head_bytes))
            return
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    # -- llhttp callbacks: the framing ---------------------------------------------------------

    def on_message_begin(self) -> None:
        self.begun += 1
        self.heading = True
        self.head_started, self.head_fed = self.loop.time(), 0

    def on_headers_complete(self) -> None:
        self.heading = False

    # -- what its port's policy reads (serving.connections.Held) --------------------------------

    def in_head(self) -> bool:
        return self.heading

    def asking(self) -> bool:
        return self.begun > self.answered

    busy = asking  # a request begun is in aiohttp's hands until its answer is written

    def being_answered(self) -> bool:
        return self.in_app > 0

    def finish(self) -> None:
        # A busy one is closed by aiohttp after its answer, which says `Connection: close` while draining.
        if not self.busy():
            self._close()

    def answer_ended(self) -> None:
        self.in_app -= 1
        self.answered += 1
        self.served = True
        self.last_active = self.loop.time()
        if self.transport is not None:
            self._arm(self.last_active + self.limits.idle_seconds)

    # -- refusals ------------------------------------------------------------------------------

    def _refuse_later(self, status: Status) -> None:
        """Hand nothing more on; once aiohttp has had its turn (it may have refused the head
        already, and then it answers and closes), answer ``status`` and close. Reading goes on
        meanwhile, what arrives dropped: paused, the client's unread bytes made aiohttp's close a
        reset that lost its 400 (a 1 MiB request line, read in pieces)."""
        self.refusing, self.heading = True, False
        self.loop.call_later(_AIOHTTP_TURN, self._refuse, status)

    def _refuse(self, status: Status) -> None:
        """Answer ``status`` unless a request is in aiohttp's hands (its answer comes first), then close."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        self.refusing, self.heading = True, False
        # Debug, not info: a flood of bad heads must not become a flood of log lines.
        log.debug(
            status.get("message", ""),
            extra={"remote": self.source, "verified": self.connections is self.listener.verified},
        )
        if self.begun == self.answered + 1:  # only the refused head is unanswered
            body = orjson.dumps(status)
            code = int(status.get("code", 400))
            transport.write(
                f"HTTP/1.1 {code} {HTTPStatus(code).phrase}\r\nContent-Type: {JSON}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )
        transport.pause_reading()
        self.loop.call_later(LINGER_SECONDS, transport.abort)  # the answer goes out first


# aiohttp answers a head its parser refused within a few turns of the loop (its request task,
# then the answer's): a 431 of ours waits this long so as never to be a second answer.
_AIOHTTP_TURN = 0.1


def _guard(request: web.BaseRequest) -> Guard | None:
    transport = request.transport
    protocol = transport.get_protocol() if transport is not None else None
    return protocol if isinstance(protocol, Guard) else None


@contextlib.contextmanager
def long_running(request: web.BaseRequest) -> Iterator[None]:
    """Mark the connection of ``request`` as serving a long-running request (a watch) while it is:
    at the verified connection cap it is evicted before a newcomer is refused (a watch's client
    resumes it; a refused check of kube-apiserver's is a 503 for everyone)."""
    guard = _guard(request)
    if guard is not None:
        guard.long_running = True
    try:
        yield
    finally:
        if guard is not None:
            guard.long_running = False


@web.middleware
async def edge(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every error leaves as a Kubernetes Status, nothing as a traceback; and the connection's
    guard knows while a request is in the app's hands: until its answer has been written, which
    is done here (a Table is megabytes: its connection is not one to evict while they leave)."""
    guard = _guard(request)
    if guard is not None:
        guard.in_app += 1
    try:
        response = await handler(request)
        await response.prepare(request)
        await response.write_eof()
        return response
    except StatusError as err:
        return status_response(err.status)
    except web.HTTPException as err:
        if err.status < 400:
            raise
        message = {404: NOT_FOUND, 405: NOT_ALLOWED}.get(err.status, err.reason)
        return status_response(failure(err.status, message))
    except ConnectionError:
        if request.transport is not None and not request.transport.is_closing():
            log.exception("internal error serving %s %s", request.method, request.path)
            return status_response(failure(500, "internal error; see the server's log"))
        # The client closed its connection mid-request (mid-body, or while it was worked on): nothing is broken.
        log.info(
            "client went away before it was answered",
            extra={"method": request.method, "path": request.path, "remote": request.remote},
        )
        return status_response(failure(400, "the client went away"))  # never written: aiohttp drops it
    except Exception:
        log.exception("internal error serving %s %s", request.method, request.path)
        return status_response(failure(500, "internal error; see the server's log"))
    finally:
        if guard is not None:
            guard.answer_ended()


async def close_while_draining(request: web.Request, response: web.StreamResponse) -> None:
    """Once shutting down, every answer says `Connection: close` in its own headers.

    Clients keep HTTP/1.1 connections alive and reuse them without looking at endpoints again,
    so the apiserver keeps sending to a replica that is no longer in the EndpointSlice until
    the connection closes. Closed by the server at the end of the drain, one in use loses its
    request: Go does not retry a POST written onto a reused connection that then hits EOF. Told
    to close by a response, the client retires the connection itself and dials a ready replica.

    An `on_response_prepare` hook, not a middleware: handlers that write their answer themselves
    (a watch streams its events) send headers before any middleware sees the response, and a
    close decided after the headers left is exactly the race above — the client pools a
    connection we then close. The header is set by hand as well: aiohttp computes its own
    Connection header before it runs this hook.
    """
    if request.app[READINESS].draining:
        response.force_close()
        response.headers[hdrs.CONNECTION] = "close"


async def healthz(request: web.Request) -> web.StreamResponse:
    return web.Response(text="ok")


async def readyz(request: web.Request) -> web.StreamResponse:
    ready, why = request.app[READINESS].ready()
    return web.Response(text=why, status=200 if ready else 503)


def serving_app(readiness: Readiness, *, client_max_size: int = 1024 * 1024) -> web.Application:
    """An app with the shared edge (drain, Status errors) and the probes; callers add routes."""
    app = web.Application(middlewares=[edge], client_max_size=client_max_size)
    app.on_response_prepare.append(close_while_draining)
    app[READINESS] = readiness
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app


class AppListener:
    """An aiohttp app as a Listener (the insights API), each connection behind a ``Guard``."""

    def __init__(self, app: web.Application, limits: ConnectionLimits = API_PORT) -> None:
        assert limits.anonymous is not None, "the API port asks for client certificates"
        self.app = app
        self.readiness = app[READINESS]
        self.limits = limits
        self.runner: web.AppRunner | None = None
        self.verified: Connections[Guard] = Connections(limits)
        self.anonymous: Connections[Guard] = Connections(limits.anonymous)
        self.handshakes: HandshakePool | None = None

    async def prepare(self) -> None:
        """The app's start-up (``on_startup``, ``cleanup_ctx``): the insights API connects there."""
        # aiohttp's own keep-alive (an hour by default) never fires first: the guard closes idle connections.
        self.runner = web.AppRunner(
            self.app,
            handle_signals=False,
            access_log=logging.getLogger("aiohttp.access"),
            shutdown_timeout=_CANCEL_SECONDS,
        )
        await self.runner.setup()

    async def start(self, host: str, port: int, *, ssl: SSLContext, reuse_port: bool, backlog: int) -> None:
        assert self.runner is not None and self.runner.server is not None, (
            "prepare() first: the TLS context is built after it"
        )
        server = self.runner.server  # aiohttp's protocol factory
        listening = listening_socket(host, port, backlog=backlog, reuse_port=reuse_port)
        self.handshakes = HandshakePool(self.limits, ssl, lambda: Guard(self, server()), listening)

    async def stop(self, timeout: float) -> None:
        """Stop accepting; end watches (``on_shutdown``); let answers finish within ``timeout``; clean up."""
        if self.handshakes is not None:
            await self.handshakes.close()
        if self.runner is None:
            return
        if self.runner.server is not None:  # its start-up completed: watches to end, answers to finish
            await self.runner.shutdown()
            await drain(self.verified, self.anonymous, timeout=timeout)
        await self.runner.cleanup()
