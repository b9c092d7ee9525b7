"""What a connection to an aiohttp server may hold before it is a request: bounded heads, capped counts.

aiohttp bounds each header line (8190 bytes) and their number (128), not the head as a whole nor
the time it takes to arrive, and it accepts every connection. Here, on the insights listener:

* a head (request line and headers) is at most ``head_limit`` bytes (431) and must arrive within
  ``head_timeout`` of its first byte (408); either way the connection closes.
* Connections are told apart by their TLS client certificate. One that presented a certificate
  the listener verified (kube-apiserver's front-proxy client) is *verified*; one that did not
  (the kubelet's probes; anyone else) is *anonymous*. Anonymous ones get a small head limit, a
  short idle timeout, and a count of their own: past it the oldest anonymous connection of the
  address that holds the most is closed, so a client that opens many can never lock out a probe
  (which asks and is answered within a millisecond of its handshake). A verified one past
  their cap makes room by closing an idle verified connection, else one serving a long-running
  request (a watch, which its client resumes from its last resourceVersion;
  ``ConnectionGuard._to_shed`` says which first),
  and only when every one is in the middle of a short request is the new one closed at once.
  kube-apiserver reaches the server on verified connections for its users and for its own
  availability check alike: a cap that refused every newcomer let users' watches lock out that
  check, and one failed check makes the aggregator answer 503 for every read until the next one
  passes.

So what heads hold is bounded by constants times capped counts (docs/architecture.md, "Resource
model (insights)"). The numbers are the admission port's (serving.reviews) where they mean
the same thing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from http import HTTPStatus
from ssl import SSLContext
from typing import Any

import orjson
from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from apimachinery.bodies import JSON
from apimachinery.status import Status, failure

from .tlsupgrade import (
    FIRST_REQUEST_GRACE,
    HANDSHAKES_COMPUTING,
    KEEPALIVE_SECONDS,
    Acceptor,
    Handshake,
    HandshakeGate,
    listening_socket,
    of_busiest_sources,
    to_drop,
)

log = logging.getLogger(__name__)

KiB = 1024
# How long a refused connection has to take its answer (431, 408) before it is cut.
REFUSAL_LINGER = 1.0


@dataclass(frozen=True)
class ConnectionLimits:
    """Per-process bounds of the connections an aiohttp listener holds."""

    # The aggregator forwards the user's identity in headers (X-Remote-Group per group, X-Remote-Extra-*):
    # more room than the admission port's 16 KiB, which only kube-apiserver's own requests reach.
    head_limit: int = 64 * KiB
    head_timeout: float = 10.0
    idle_timeout: float = KEEPALIVE_SECONDS
    # The kubelet's probe is ~150 bytes of head, asked and answered at once.
    anonymous_head_limit: int = 8 * KiB
    anonymous_head_timeout: float = 5.0
    anonymous_idle_timeout: float = 5.0
    # kube-apiserver's aggregator opens one connection per request in flight (a watch holds one; at most
    # 100 of them): 256 x (a 64 KiB head, 128 KiB of body read ahead) is at most 48 MiB.
    max_verified: int = 256
    max_anonymous: int = 64
    # Handshakes under way, counted from the accept (serving.tlsupgrade), most of them waiting for
    # their turn to compute (HANDSHAKES_COMPUTING): a socket each, no TLS state. Past it the
    # address with the most makes room. Room for a flood from one address to queue (the kernel's
    # queue of 1024 did so before) with kube-apiserver's connections among it, not dropped.
    max_handshakes: int = 256
    # asyncio's default is 60 s: a handshake holds its TLS buffers until it completes or times out.
    handshake_timeout: float = 10.0
    handshakes_computing: int = HANDSHAKES_COMPUTING


class ConnectionGuard:
    """The connections of one listener, counted: verified ones up to a cap (idle ones, then watches,
    make room for a new one), anonymous ones evicted oldest first."""

    def __init__(self, limits: ConnectionLimits | None = None) -> None:
        self.limits = limits or ConnectionLimits()
        self.verified: dict[GuardedRequestHandler, None] = {}  # in order of arrival
        self.anonymous: dict[GuardedRequestHandler, None] = {}  # in order of arrival
        self.handshakes: dict[Handshake, None] = {}  # in order of accept
        self.gate = HandshakeGate(self.limits.handshakes_computing)
        self.refused = 0  # verified connections closed at the cap: every one was busy
        self.shed = 0  # verified connections closed for a newer one: idle, or holding a watch
        self.evicted = 0  # anonymous connections closed for a newer one
        self.dropped = 0  # handshakes dropped for a newer one
        self._full = False

    def admit(self, handler: GuardedRequestHandler) -> bool:
        """Count ``handler``'s connection; False if it must be closed at once."""
        if handler.verified:
            if len(self.verified) >= self.limits.max_verified:
                if not self._full:
                    log.warning(
                        "connection cap reached: new connections close idle ones and watches, "
                        "or are closed when none is",
                        extra={"cap": len(self.verified)},
                    )
                    self._full = True
                shed = self._to_shed()
                if shed is None:
                    self.refused += 1
                    return False
                del self.verified[shed]
                self.shed += 1
                shed.cut()
            else:
                self._full = False
            self.verified[handler] = None
            return True
        while len(self.anonymous) >= self.limits.max_anonymous:
            # The oldest of whoever holds the most: a flood makes room among its own.
            oldest = of_busiest_sources(self.anonymous, lambda held: held.source)[0]
            del self.anonymous[oldest]
            self.evicted += 1
            oldest.cut()
        self.anonymous[handler] = None
        return True

    def _to_shed(self) -> GuardedRequestHandler | None:
        """The verified connection a new one replaces, the oldest of the first kind there is:
        never asked anything though it has had its chance; idle after answers (a client's pool: it
        retries a GET, though not a POST it wrote as the close crossed it); serving a watch (its
        client resumes it); never asked anything yet, within its first-request grace (as new as
        the newcomer: kube-apiserver's own check writes its request as soon as it is connected)."""
        now = asyncio.get_running_loop().time()
        kinds: list[GuardedRequestHandler | None] = [None, None, None, None]
        for handler in self.verified:  # oldest first
            if handler.idle() and handler.requests == 0:
                kind = 0 if now - handler.admitted_at >= FIRST_REQUEST_GRACE else 3
            elif handler.idle():
                kind = 1
            elif handler.long_running:
                kind = 2
            else:
                continue  # in the middle of a request
            if kind == 0:
                return handler
            if kinds[kind] is None:
                kinds[kind] = handler
        return next((handler for handler in kinds if handler is not None), None)

    def release(self, handler: GuardedRequestHandler) -> None:
        self.verified.pop(handler, None)
        self.anonymous.pop(handler, None)

    def accepted(self, sock: socket.socket, server: web.Server, context: SSLContext) -> None:
        """A connection just accepted: counted, its handshake begun; past the cap one under way
        makes room, one of the address with the most (serving.tlsupgrade.to_drop)."""
        while len(self.handshakes) >= self.limits.max_handshakes:
            dropped = to_drop(self.handshakes, lambda handshake: handshake)
            del self.handshakes[dropped]
            self.dropped += 1
            dropped.cancel()

        def over(ok: bool) -> None:
            self.handshakes.pop(handshake, None)

        handshake = Handshake(
            sock, lambda: self.handler(server), context, self.limits.handshake_timeout, over, self.gate
        )
        self.handshakes[handshake] = None

    def close(self) -> None:
        """Drop the handshakes under way (the listener is closing)."""
        for handshake in list(self.handshakes):
            handshake.cancel()
        self.handshakes.clear()

    def handler(self, server: web.Server) -> GuardedRequestHandler:
        """The protocol of one new connection (the listener's protocol factory)."""
        # ``server._kwargs``: what the runner was given (access log, timeouts), as Server() passes them.
        return GuardedRequestHandler(server, self, loop=asyncio.get_running_loop(), **server._kwargs)


class GuardedRequestHandler(RequestHandler):
    """aiohttp's connection protocol, with its head bounded in bytes and in time from its first byte."""

    def __init__(self, manager: web.Server, guard: ConnectionGuard, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self.guard = guard
        self.verified = False
        self.head_limit = guard.limits.anonymous_head_limit
        self.head_timeout = guard.limits.anonymous_head_timeout
        self._head_bytes = 0
        self._head_tail = b""  # the last bytes fed, to find a head's end split across two reads
        self._head_timer: asyncio.TimerHandle | None = None
        self._body: Any = None  # the payload (StreamReader) of the last request; None before the first
        self.long_running = False  # serving a watch (``long_running``): it may be shed at the cap
        self.admitted_at = 0.0  # loop time its handshake ended
        self.source = ""  # the address it came from

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # With TLS, called once the handshake is over: the peer's certificate is known.
        self.verified = bool(transport.get_extra_info("peercert"))
        peer = transport.get_extra_info("peername")
        self.source = str(peer[0]) if isinstance(peer, tuple) else ""
        self.admitted_at = self._loop.time()
        limits = self.guard.limits
        if self.verified:
            self.head_limit, self.head_timeout = limits.head_limit, limits.head_timeout
            self._keepalive_timeout = limits.idle_timeout
        else:
            self._keepalive_timeout = limits.anonymous_idle_timeout
        super().connection_made(transport)
        if not self.guard.admit(self):
            self.cut()

    def connection_lost(self, exc: BaseException | None) -> None:
        self.guard.release(self)
        self._stop_head_timer()
        super().connection_lost(exc)

    def _in_head(self) -> bool:
        return self._body is None or self._body.is_eof()

    @property
    def requests(self) -> int:
        """Requests whose head was received on this connection."""
        return self._request_count

    def idle(self) -> bool:
        """Between requests: none in progress or queued, and no byte of the next one received."""
        return not self._request_in_progress and not self._messages and self._head_bytes == 0

    def data_received(self, data: bytes) -> None:
        if not data or self._force_close or self._close or not self._in_head():
            super().data_received(data)
            return
        if self._head_timer is None:
            self._head_timer = self._loop.call_later(self.head_timeout, self._head_expired)
            if self._keepalive_handle is not None:  # the head's own deadline holds from here
                self._keepalive_handle.cancel()
                self._keepalive_handle = None
        room = self.head_limit - self._head_bytes
        if len(data) > room:
            # Past the limit unless the head ends within it (the rest is its body or the next request).
            window = self._head_tail + data[: room + 4]
            if b"\r\n\r\n" not in window and b"\n\n" not in window:
                # The part that fits goes to aiohttp's parser first: a line over its 8,190-byte
                # limit is its 400 however the bytes were split into reads, not a 431 only when
                # more than the room arrived in one piece.
                count = self._request_count
                super().data_received(data[:room])
                if self._request_count != count:
                    self._head_bytes, self._head_tail = 0, b""
                    return  # aiohttp refused the head; its answer closes the connection
                self._refuse(
                    failure(
                        431,
                        f"request head is larger than {self.head_limit} bytes",
                        reason="RequestHeaderFieldsTooLarge",
                    ),
                    "head too large",
                )
                return
        self._head_bytes += len(data)
        self._head_tail = data[-3:]
        count = self._request_count
        super().data_received(data)
        if self._request_count != count:  # a head is complete (or refused by aiohttp's parser)
            self._stop_head_timer()
            self._head_bytes, self._head_tail = 0, b""
            if self._messages:
                self._body = self._messages[-1][1]

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_expired(self) -> None:
        self._head_timer = None
        if self.transport is not None and self._in_head():
            self._refuse(
                failure(408, f"request head not received within {self.head_timeout:g}s", reason="Timeout"),
                "head too slow",
            )

    def _refuse(self, status: Status, why: str) -> None:
        """Answer ``status`` unless a request is being answered (its answer comes first), then close."""
        # Debug, not info: a flood of bad heads must not become a flood of log lines.
        log.debug(why, extra={"remote": _remote(self.transport), "verified": self.verified})
        transport = self.transport
        if transport is not None and not self._request_in_progress and not self._messages:
            body = orjson.dumps(status)
            code = int(status.get("code", 400))
            transport.write(
                f"HTTP/1.1 {code} {HTTPStatus(code).phrase}\r\nContent-Type: {JSON}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )
        self._stop_head_timer()
        if transport is not None:
            transport.pause_reading()  # what still arrives is never parsed: not decrypted meanwhile
        self.cut(linger=REFUSAL_LINGER)

    def cut(self, linger: float = 0.0) -> None:
        """Close without waiting for the client: a TLS close waits for the peer's close_notify (up to
        30 s), reading and decrypting whatever it still sends. ``linger`` lets an answer go out first."""
        transport = self.transport
        self.force_close()
        if transport is None:
            return
        if linger:
            self._loop.call_later(linger, transport.abort)
        else:
            transport.abort()


@contextlib.contextmanager
def long_running(request: web.BaseRequest) -> Iterator[None]:
    """Mark the connection of ``request`` as serving a long-running request (a watch) while it is:
    at the verified connection cap, it is closed for a newer connection rather than the newcomer
    being refused (a watch's client resumes it; a refused check of kube-apiserver's is a 503 for
    everyone)."""
    protocol = request.protocol
    if not isinstance(protocol, GuardedRequestHandler):
        yield
        return
    protocol.long_running = True
    try:
        yield
    finally:
        protocol.long_running = False


def _remote(transport: asyncio.BaseTransport | None) -> str:
    peer = transport.get_extra_info("peername") if transport is not None else None
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)


class GuardedSite(web.TCPSite):
    """aiohttp's TCPSite, whose connections are counted from their accept (serving.tlsupgrade),
    handed to GuardedRequestHandlers, and whose handshakes time out sooner."""

    def __init__(self, runner: web.BaseRunner, host: str, port: int, guard: ConnectionGuard, **kwargs: Any) -> None:
        super().__init__(runner, host, port, **kwargs)
        self.guard = guard
        self.acceptor: Acceptor | None = None

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with its runner, as TCPSite.start does
        server = self._runner.server
        assert server is not None
        ssl: SSLContext | None = self._ssl_context
        if ssl is None:
            self._server = await asyncio.get_running_loop().create_server(
                lambda: self.guard.handler(server),
                self._host,
                self._port,
                backlog=self._backlog,
                reuse_address=self._reuse_address,
                reuse_port=self._reuse_port,
            )
            self._bound_port = self._server.sockets[0].getsockname()[1] if self._server.sockets else self._port
            return
        sock = listening_socket(self._host or "", self._port, backlog=self._backlog, reuse_port=bool(self._reuse_port))
        self.acceptor = Acceptor(sock, lambda conn: self.guard.accepted(conn, server, ssl))
        self._bound_port = self.acceptor.port

    async def stop(self) -> None:
        if self.acceptor is not None:
            await self.acceptor.close()
            self.guard.close()
        await super().stop()
