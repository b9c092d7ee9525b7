"""The kubelet's probes on a port of their own, answered by a thread of their own.

A probe asked on the serving port waits its turn with everything else there: for a connection
slot behind a flood of TLS handshakes, for the event loop behind eight 3 MB Tables. Under the
attack mix on a loaded two-core node, insights' /readyz took 4.7 s and the webhook's 2.4 s, the
kubelet marked insights unready and the aggregator answered 664 FooHealth reads with 503
"service unavailable" (issue #25). A probe must say whether the process works, not how busy
its port is.

So, like controller-runtime's health probe listener (``--health-probe-bind-address``, plain
HTTP, a goroutine of its own), every process can answer ``/healthz``, ``/livez`` and
``/readyz`` on a port of their own, from a thread running its own event loop: however busy
the main loop is, the interpreter hands this thread its turn within the switch interval (5 ms).

Answered from elsewhere, a probe must still see a process that stopped working: the main loop
stamps a heartbeat every second, and ``/healthz`` fails once it is older than ``stall_seconds``
(the kubelet restarts a container whose loop is stuck). ``/readyz`` is the process's own
readiness (serving.readiness), read as it is.

What a caller can make this port hold is bounded by ``PROBE_PORT``, in the words of every port
(serving.connections): at most 32 connections (past it a newcomer evicts one, as on any port
open to anyone), a first byte within 2 s and a head of at most 4 KiB within 2 s of it, and one
request each (``Connection: close``). The connection is the admission port's
(serving.reviews.protocol), so there is one HTTP parser of our own, not two: not aiohttp, because
the webhook listens without importing it, and this answers three fixed paths with a line of text.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

from apimachinery.status import NOT_ALLOWED, NOT_FOUND

from .budget import ByteBudget
from .connections import ConnectionLimits, Connections, KiB
from .metricsserver import listening_sockets
from .readiness import Readiness
from .reviews.protocol import Connection, Request, read_buffer

log = logging.getLogger(__name__)

PROBE_PORT = ConnectionLimits(
    # The kubelet's probe head is ~150 bytes (plus what httpHeaders adds); it is written at once.
    head_bytes=4 * KiB,
    head_seconds=2.0,
    first_request_seconds=2.0,
    # Probes come one at a time from one kubelet; more at once is somebody else.
    max_connections=32,
)
# The main loop stamps its heartbeat this often.
HEARTBEAT_SECONDS = 1.0
# A loop that has not run for this long answers nobody: /healthz fails (the kubelet restarts
# the container after livenessProbe.failureThreshold of those, 30 s with the chart's defaults).
STALL_SECONDS = 10.0

ReadyCheck = Callable[[], tuple[bool, str]]
_TEXT = "text/plain; charset=utf-8"


class ProbeSetupError(Exception):
    """The probe port cannot be listened on: one line for the user."""


def answer(method: str, target: str, live: tuple[bool, str], ready: ReadyCheck) -> tuple[int, str]:
    """The status and text for one request line's method and target."""
    path = target.partition("?")[0]
    if path not in ("/healthz", "/livez", "/readyz"):
        return 404, NOT_FOUND + "\n"
    if method not in ("GET", "HEAD"):
        return 405, NOT_ALLOWED + "\n"
    if path == "/readyz":
        ok, why = ready()
        return (200, "ok") if ok else (503, why)
    ok, why = live
    return (200, "ok") if ok else (500, why)


class _ProbeApp:
    """What a probe connection asks of its app (serving.reviews.protocol.Router): three paths."""

    def __init__(self, server: ProbeServer) -> None:
        self.server = server
        self.readiness = Readiness(serving=True)  # never draining: every answer closes its connection
        self.limits = server.limits
        self.budget: ByteBudget | None = None  # a probe has no body to charge
        self.read_buffer = read_buffer()  # this thread's loop's own

    def answer(self, conn: Connection, request: Request) -> Coroutine[Any, Any, None] | None:
        request.keep_alive = False  # one request per connection
        status, text = answer(request.method, request.path, self.server.liveness(), self.server.ready)
        conn.write(status, _TEXT, text.encode(), head_only=request.method == "HEAD")
        return None


class ProbeServer:
    """``/healthz``, ``/livez`` and ``/readyz`` over plain HTTP on ``host``:``port``, from a thread.

    ``bind`` (in the caller's thread: a port already taken is the caller's one-line error), then
    ``start`` from the main loop (its heartbeat begins), ``stop`` on the way out.
    """

    def __init__(
        self,
        ready: ReadyCheck,
        host: str | None,
        port: int,
        *,
        reuse_port: bool = False,
        stall_seconds: float = STALL_SECONDS,
        limits: ConnectionLimits = PROBE_PORT,
    ) -> None:
        self.ready = ready
        self.host = host
        self.port = port
        self.reuse_port = reuse_port
        self.stall_seconds = stall_seconds
        self.limits = limits
        self.beat = time.monotonic()
        self.connections: Connections[Connection] = Connections(limits)
        self._sockets: list[socket.socket] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._heartbeat: asyncio.Task[None] | None = None

    @property
    def address(self) -> str:
        return f"{self.host or ''}:{self.port}"

    def bind(self) -> None:
        """Listen now (ProbeSetupError, one line, when the address cannot be had); served once ``start`` runs."""
        try:
            self._sockets = listening_sockets(self.host, self.port, reuse_port=self.reuse_port)
        except OSError as err:
            raise ProbeSetupError(f"cannot serve the probes on {self.address}: {err.strerror or err}") from None
        self.port = int(self._sockets[0].getsockname()[1])

    def start(self) -> None:
        """Beat from the running loop and answer from a thread of its own."""
        if not self._sockets:
            self.bind()
        self.beat = time.monotonic()
        self._heartbeat = asyncio.get_running_loop().create_task(self._beat(), name="probes-heartbeat")
        ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(ready,), name="probes", daemon=True)
        self._thread.start()
        ready.wait()

    async def stop(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            await asyncio.gather(self._heartbeat, return_exceptions=True)
        loop, thread = self._loop, self._thread
        if loop is not None and thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            await asyncio.to_thread(thread.join)
        for sock in self._sockets:
            sock.close()
        self._sockets = []

    def liveness(self) -> tuple[bool, str]:
        stalled = time.monotonic() - self.beat
        if stalled > self.stall_seconds:
            return False, f"the event loop has not run for {stalled:.0f}s"
        return True, "ok"

    async def _beat(self) -> None:
        while True:
            self.beat = time.monotonic()
            await asyncio.sleep(HEARTBEAT_SECONDS)

    def _serve(self, ready: threading.Event) -> None:
        loop = self._loop = asyncio.new_event_loop()
        app = _ProbeApp(self)
        servers = [
            loop.run_until_complete(loop.create_server(lambda: Connection(app, self.connections), sock=sock))
            for sock in self._sockets
        ]
        ready.set()
        try:
            loop.run_forever()
        finally:
            for server in servers:
                server.close()
            for conn in self.connections:
                conn.abort()
            loop.run_until_complete(asyncio.sleep(0))  # the aborted connections' callbacks
            loop.close()
