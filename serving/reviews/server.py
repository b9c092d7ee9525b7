"""The admission port: its limits (``ADMISSION_PORT``), routes (``ReviewApp``) and listener (``ReviewServer``)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterable
from ssl import SSLContext
from typing import Any

from apimachinery.status import NOT_ALLOWED, NOT_FOUND, failure
from serving.budget import ByteBudget
from serving.connections import ConnectionLimits, Connections, KiB, drain
from serving.readiness import Readiness
from serving.tlsupgrade import HandshakePool, listening_socket

from .endpoint import Endpoint
from .protocol import Connection, Request, read_buffer

_TEXT = "text/plain; charset=utf-8"
_PROBES = ("/healthz", "/readyz")

ADMISSION_PORT = ConnectionLimits(
    # Go's net/http allows 1 MiB of request head, aiohttp 8190 bytes per line, Node.js 16 KiB.
    # kube-apiserver sends ~300 bytes; 16 KiB bounds what a connection can make us hold before a
    # request is even routed (llhttp keeps a header's partial bytes), times the connection cap.
    head_bytes=16 * KiB,
    # From the first byte of a request to the end of its head (the apiserver writes it in one go).
    head_seconds=5.0,
    # kube-apiserver keeps at most 25 idle connections per webhook host (client-go's
    # MaxIdleConnsPerHost) and opens one per review in flight beyond them; the kubelet's probes
    # open a new one each. Each costs at most a constant (every buffer below full;
    # docs/architecture.md, "Resource model (admission port)"), so 64 fit in what a process
    # reserves for itself (serving.budget); a pod of N workers holds 64 N. Handshakes under way
    # are as many again, in a pool of their own: a flood of bare connects makes room only among
    # its own (a real client's handshake takes a millisecond) and never evicts a pooled connection.
    max_connections=64,
    max_handshakes=64,
    # Left to autotuning, a client that does not read lets the send buffer grow to tcp_wmem's
    # 4 MiB — a whole answer out of our hands and our budget, yet in the pod's memory (the cgroup
    # counts socket buffers) — and one whose body waits for the budget fills the receive buffer.
    # 64 KiB each way still keeps a fast local link busy (bench/README, "Figures moved from docstrings").
    socket_buffer_bytes=32 * KiB,
)


class ReviewApp:
    """What the port serves: POST endpoints by path, `/healthz` and `/readyz`, a Status for the rest."""

    def __init__(
        self,
        readiness: Readiness,
        endpoints: Iterable[Endpoint],
        *,
        limits: ConnectionLimits = ADMISSION_PORT,
        budget: ByteBudget | None = None,
    ) -> None:
        self.readiness = readiness
        self.endpoints = {endpoint.path: endpoint for endpoint in endpoints}
        self.limits = limits
        # Where a connection charges body bytes it holds before their request is paid for.
        self.budget = budget
        self.read_buffer = read_buffer()

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
        self.connections: Connections[Connection] = Connections(app.limits)
        self.server: asyncio.Server | None = None  # plain HTTP
        self.handshakes: HandshakePool | None = None  # TLS: accepted here, counted from the accept

    @property
    def port(self) -> int:
        if self.handshakes is not None:
            return self.handshakes.acceptor.port
        assert self.server is not None
        return int(self.server.sockets[0].getsockname()[1])

    async def prepare(self) -> None:
        """Nothing to do before listening: the review app needs no start-up."""

    async def start(
        self, host: str, port: int, *, ssl: SSLContext | None = None, reuse_port: bool = False, backlog: int = 1024
    ) -> None:
        if ssl is not None:
            # Accepted here, not by create_server(ssl=): a connection is counted before its
            # handshake, which runs only at its turn (serving.tlsupgrade).
            listening = listening_socket(host, port, backlog=backlog, reuse_port=reuse_port)
            self.handshakes = HandshakePool(self.app.limits, ssl, self._connection, listening)
            return
        self.server = await asyncio.get_running_loop().create_server(
            self._connection,
            host,
            port,
            backlog=backlog,
            reuse_address=True,
            reuse_port=reuse_port or None,
        )

    def _connection(self) -> Connection:
        return Connection(self.app, self.connections)

    async def stop(self, timeout: float) -> None:
        """Stop listening; let answers in progress finish within ``timeout``; then abort what is left."""
        if self.server is not None:
            self.server.close()
        if self.handshakes is not None:
            await self.handshakes.close()
        await drain(self.connections, timeout=timeout)
        if self.server is not None:
            await self.server.wait_closed()
