"""A TLS listener that counts a connection when it is accepted and shakes hands only once admitted.

``loop.create_server(ssl=...)`` makes an SSL object and its two memory buffers for every
connection it accepts, and hands the connection to the server's protocol only once the
handshake is over: a client that opens thousands of bare TCP connections, or sends a
ClientHello slowly, made the process hold that state for the whole handshake timeout,
uncounted by any cap (issue 25, the attack mix's finding 6). So both HTTPS servers accept on
their own (``Acceptor``), count the connection under their cap at once, and only then start
its handshake (``Handshake``: ``loop.connect_accepted_socket``, asyncio's and uvloop's), which
calls the protocol's ``connection_made`` once the handshake is over, as before.

Not ``loop.start_tls`` over a plain TCP transport: uvloop starts reading a new transport after
its protocol's ``connection_made`` returns, so a ClientHello reached the plain protocol before
``start_tls`` could take the transport over (tried: the client got an HTTP 400 in clear).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections.abc import Callable, Iterable
from ssl import SSLContext
from typing import TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

# Out of file descriptors (or socket buffers): accepting again at once would spin.
_ACCEPT_BACKOFF = 0.1
# Accepted in a row before the loop runs anything else (asyncio's own server: up to its backlog).
_ACCEPT_BATCH = 16
_RESOURCE_ERRORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


def listening_socket(host: str, port: int, *, backlog: int, reuse_port: bool) -> socket.socket:
    """A bound, listening, non-blocking TCP socket, as ``loop.create_server`` would make it."""
    family, _, _, _, address = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[
        0
    ]
    sock = socket.create_server(address, family=family, backlog=backlog, reuse_port=reuse_port)
    sock.setblocking(False)
    return sock


class Acceptor:
    """Accepts on ``sock`` and gives each new connection's socket to ``accepted``, one at a time."""

    def __init__(self, sock: socket.socket, accepted: Callable[[socket.socket], None]) -> None:
        self.sock = sock
        self.accepted = accepted
        self.task = asyncio.get_running_loop().create_task(self._accept(), name="accept")

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        accepted = 0
        while True:
            accepted += 1
            if accepted % _ACCEPT_BATCH == 0:
                # sock_accept returns without yielding while connections wait: let the
                # handshakes and requests of those accepted run between batches.
                await asyncio.sleep(0)
            try:
                conn, _ = await loop.sock_accept(self.sock)
            except OSError as err:
                if err.errno not in _RESOURCE_ERRORS:
                    raise
                log.warning("cannot accept a connection", extra={"error": err.strerror})
                await asyncio.sleep(_ACCEPT_BACKOFF)
                continue
            conn.setblocking(False)
            # What create_server does for each connection: an answer leaves without waiting for an ACK.
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.accepted(conn)

    async def close(self) -> None:
        """Stop accepting and close the listening socket (connections already accepted stay)."""
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        self.sock.close()


class Handshake:
    """The TLS handshake of one accepted connection, run as a task; ``cancel`` drops the connection.

    The SSL object and its buffers are made only once the client has sent something (its
    ClientHello): until then the connection is a socket and a reader, and ``heard`` is False.
    ``over(ok)`` is called once the handshake completed (the protocol ``factory`` made is
    connected) or failed or timed out (the connection is closed); not after ``cancel``.
    """

    def __init__(
        self,
        sock: socket.socket,
        factory: Callable[[], asyncio.Protocol],
        context: SSLContext,
        timeout: float,
        over: Callable[[bool], None],
    ) -> None:
        self.sock: socket.socket | None = sock  # until the handshake's transport owns it
        self.over = over
        self.heard = False  # the client has sent its first bytes
        self._reading: int | None = None  # the descriptor watched until then
        self.task = asyncio.get_running_loop().create_task(self._run(factory, context, timeout))

    async def _run(self, factory: Callable[[], asyncio.Protocol], context: SSLContext, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        began = loop.time()
        try:
            await self._readable(timeout)
        except TimeoutError:
            log.debug("TLS handshake did not complete", extra={"error": "nothing received"})
            self._close_socket()
            self.over(False)
            return
        self.heard = True
        sock, self.sock = self.sock, None
        assert sock is not None
        try:
            await loop.connect_accepted_socket(
                factory, sock, ssl=context, ssl_handshake_timeout=max(timeout - (loop.time() - began), 0.1)
            )
        except (TimeoutError, OSError, RuntimeError) as err:  # SSLError, ConnectionError: OSErrors
            # Debug, not info: a flood of bare connects must not become a flood of log lines.
            log.debug("TLS handshake did not complete", extra={"error": repr(err)})
            self.over(False)
            return
        self.over(True)

    async def _readable(self, timeout: float) -> None:
        """Wait until the socket has bytes to read (or its peer closed it), at most ``timeout``."""
        assert self.sock is not None
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()

        def wake() -> None:
            if not ready.done():
                ready.set_result(None)

        self._reading = self.sock.fileno()
        loop.add_reader(self._reading, wake)
        try:
            async with asyncio.timeout(timeout):
                await ready
        finally:
            self._stop_reading()

    def _stop_reading(self) -> None:
        # Before the socket is closed, never after: uvloop crashes (SIGSEGV) on a reader left
        # registered for a descriptor closed and reused by the next accept.
        if self._reading is not None:
            asyncio.get_running_loop().remove_reader(self._reading)
            self._reading = None

    def cancel(self) -> None:
        self._stop_reading()
        if not self.task.done():
            self.task.cancel()  # a handshake begun: its transport closes the connection
        self._close_socket()

    def _close_socket(self) -> None:
        if self.sock is not None:  # the handshake not begun: nothing else will close it
            self.sock.close()
            self.sock = None


def to_drop(handshakes: Iterable[T], handshake_of: Callable[[T], Handshake | None]) -> T:
    """Which of ``handshakes`` (oldest first) makes room for a new one: the oldest from which
    nothing was heard, else the oldest. A flood of bare connects then makes room among its own:
    a kubelet probe that has sent its ClientHello is not dropped for them (probes were, under the
    attack mix, with one process serving the chart's pod)."""
    oldest: T | None = None
    for candidate in handshakes:
        if oldest is None:
            oldest = candidate
        handshake = handshake_of(candidate)
        if handshake is None or not handshake.heard:
            return candidate
    assert oldest is not None, "nothing to drop"
    return oldest
