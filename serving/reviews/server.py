"""The admission port: its routes (``ReviewApp``) and its listener (``ReviewServer``)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterable
from ssl import SSLContext
from typing import Any

from apimachinery.status import NOT_ALLOWED, NOT_FOUND, failure
from serving.budget import ByteBudget
from serving.readiness import Readiness
from serving.tlsupgrade import HANDSHAKES_COMPUTING, KEEPALIVE_SECONDS, Acceptor, HandshakeGate, listening_socket

from .endpoint import Endpoint
from .protocol import FIRST_REQUEST_SECONDS, HEAD_TIMEOUT, MAX_CONNECTIONS, Connection, Request

_TEXT = "text/plain; charset=utf-8"
_PROBES = ("/healthz", "/readyz")


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
        if request.method in ("GET", "HEAD") and request.path in _PROBES:
            ready, why = (True, "ok") if request.path == "/healthz" else self.readiness.ready()
            conn.write(200 if ready else 503, _TEXT, why.encode(), head_only=request.method == "HEAD")
        elif endpoint is not None or request.path in _PROBES:
            conn.write_status(failure(405, NOT_ALLOWED))
        else:
            conn.write_status(failure(404, NOT_FOUND))
        return None


class ReviewServer:
    """``app`` on a port (TLS when given a context): the listener serving.lifecycle drives."""

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
        self.gate = HandshakeGate(HANDSHAKES_COMPUTING)  # their turns to compute, by address

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
                sock,
                lambda conn: Connection(self.app, self.connections).accepted(conn, ssl, self.handshakes, self.gate),
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
