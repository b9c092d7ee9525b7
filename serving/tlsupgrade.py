"""A TLS listener that counts a connection when it is accepted and shakes hands only once admitted.

``loop.create_server(ssl=...)`` makes an SSL object and its two memory buffers for every
connection it accepts, and hands the connection to the server's protocol only once the
handshake is over: a client that opens thousands of bare TCP connections, or sends a
ClientHello slowly, made the process hold that state for the whole handshake timeout,
uncounted by any cap (issue 25, the attack mix's finding 6). So both HTTPS servers accept on
their own (``Acceptor``), count the connection in their ``HandshakePool`` at once, and only then
start its handshake (``Handshake``: ``loop.connect_accepted_socket``, asyncio's and uvloop's),
which calls the protocol's ``connection_made`` once the handshake is over, as before; the
protocol then counts it under its port's connection cap (serving.connections).

Not ``loop.start_tls`` over a plain TCP transport: uvloop starts reading a new transport after
its protocol's ``connection_made`` returns, so a ClientHello reached the plain protocol before
``start_tls`` could take the transport over (tried: the client got an HTTP 400 in clear).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections import Counter
from collections.abc import Callable, Iterable
from ssl import SSLContext

from .connections import ConnectionLimits

log = logging.getLogger(__name__)

# Out of file descriptors (or socket buffers): accepting again at once would spin.
_ACCEPT_BACKOFF = 0.1
# Accepted at most in one go before the loop runs anything else (asyncio's own server: its backlog).
_ACCEPT_BATCH = 64
# A handshake computing longer than this while others wait for a place gives its place up: a
# client's own takes a round trip and milliseconds of CPU (0.4 s at most under the attack mix),
# so only one that stalled after its ClientHello grows this old.
HANDSHAKE_TURN = 1.0
_RESOURCE_ERRORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
# Linux's TCP states (tcp_info.tcpi_state) of a connection its peer has reset, or closed.
_TCP_CLOSE, _TCP_CLOSE_WAIT = 7, 8


def listening_socket(host: str, port: int, *, backlog: int, reuse_port: bool) -> socket.socket:
    """A bound, listening, non-blocking TCP socket, as ``loop.create_server`` would make it."""
    family, _, _, _, address = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[
        0
    ]
    sock = socket.create_server(address, family=family, backlog=backlog, reuse_port=reuse_port)
    sock.setblocking(False)
    return sock


class Acceptor:
    """Accepts on ``sock`` and gives each new connection's socket to ``accepted``.

    Each time the socket is readable, every waiting connection up to ``_ACCEPT_BATCH``, as
    asyncio's own server accepts up to its backlog at once; what it costs is a socket, since
    handshakes wait for their turn at a ``HandshakeGate``. Not ``loop.sock_accept`` in a loop:
    uvloop's returns through the event loop, one connection per turn, so under a flood every
    new connection (kube-apiserver's availability check among them) waited seconds in the
    kernel's queue behind the attacker's (bench/README.md, "Handshakes by address").
    """

    def __init__(self, sock: socket.socket, accepted: Callable[[socket.socket], None]) -> None:
        self.sock = sock
        self.accepted = accepted
        self.loop = asyncio.get_running_loop()
        self._fd = sock.fileno()
        self._resume: asyncio.TimerHandle | None = None
        self._reading = False
        self._watch()

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    def _watch(self) -> None:
        self._resume = None
        self.loop.add_reader(self._fd, self._ready)
        self._reading = True

    def _ready(self) -> None:
        for _ in range(_ACCEPT_BATCH):
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return  # the queue is empty
            except ConnectionAbortedError:
                continue  # the client left before its turn
            except OSError as err:
                if err.errno not in _RESOURCE_ERRORS:
                    raise
                log.warning("cannot accept a connection", extra={"error": err.strerror})
                self.loop.remove_reader(self._fd)
                self._reading = False
                self._resume = self.loop.call_later(_ACCEPT_BACKOFF, self._watch)
                return
            conn.setblocking(False)
            # What create_server does for each connection: an answer leaves without waiting for an ACK.
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.accepted(conn)

    async def close(self) -> None:
        """Stop accepting and close the listening socket (connections already accepted stay)."""
        if self._resume is not None:
            self._resume.cancel()
            self._resume = None
        if self._reading:  # before the close: see Handshake._stop_reading
            self.loop.remove_reader(self._fd)
            self._reading = False
        self.sock.close()


def _has_bytes(sock: socket.socket) -> bool:
    """Whether bytes wait to be read on ``sock`` (or its peer has closed it), without reading them."""
    try:
        sock.recv(1, socket.MSG_PEEK)  # b"": closed, which the handshake finds out at once too
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        pass  # reset: likewise
    return True


def _peer_left(sock: socket.socket) -> bool:
    """Whether the peer of ``sock`` has closed or reset it, bytes still unread or not."""
    try:
        return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0] in (_TCP_CLOSE, _TCP_CLOSE_WAIT)
    except OSError:
        return True


def peer_host(sock: socket.socket) -> str:
    """The address a connection came from ("" if its peer has already gone)."""
    try:
        return str(sock.getpeername()[0])
    except OSError:
        return ""


class HandshakeGate:
    """At most ``limit`` TLS handshakes of one listener computing at once, shared out by address.

    A handshake is the costliest thing a caller can make the server do before it is known, and
    it runs on the event loop: with every accepted connection shaking hands at once, a flood of
    them made each turn of the loop long for everyone; with one accepted per turn, a new
    connection waited in the kernel's queue behind the whole flood (kube-apiserver's
    availability check took 3 s, and on a busy machine more than its 5). Here the queue is ours:
    a free place goes to the waiting handshake whose address computes the fewest (of those, the
    address whose latest turn is the longest ago, then the one waiting longest; one whose client
    has left takes none), and one arriving for an address that computes fewer than the busiest
    by two or more takes a place from it at once (the busiest's oldest is evicted), and one still
    computing after ``turn`` while others wait is evicted, so handshakes that stall after their
    ClientHello cannot hold the places of others for their whole timeout. One address's own
    burst (kube-apiserver's connections) only waits its turns.
    bench/README.md, "Handshakes by address", has the figures.
    """

    def __init__(self, limit: int, turn: float = HANDSHAKE_TURN) -> None:
        self.limit = limit
        self.turn = turn
        self.computing: dict[Handshake, float] = {}  # oldest first: when each one's turn began
        self._waiting: dict[asyncio.Future[None], Handshake] = {}  # in order of arrival
        self._timer: asyncio.TimerHandle | None = None  # when the oldest's turn is over
        # When each address's latest turn began, kept while it computes or waits (at most the
        # handshakes under way): a place goes to the address whose turn is the longest ago.
        self._last_turn: dict[str, float] = {}

    def _counts(self) -> Counter[str]:
        return Counter(handshake.source for handshake in self.computing)

    async def enter(self, handshake: Handshake) -> None:
        loop = asyncio.get_running_loop()
        if len(self.computing) < self.limit and not self._waiting:
            self.computing[handshake] = self._last_turn[handshake.source] = loop.time()
            return
        turn: asyncio.Future[None] = loop.create_future()
        self._waiting[turn] = handshake
        counts = self._counts()
        if counts:
            busiest, most = counts.most_common(1)[0]
            if busiest != handshake.source and most >= counts[handshake.source] + 2:
                next(h for h in self.computing if h.source == busiest).abort()
        self._arm()
        try:
            await turn
        except asyncio.CancelledError:
            if self._waiting.pop(turn, None) is None and not turn.cancelled():
                self.leave(handshake)  # given its place as it was cancelled: pass it on
            else:
                self._forget(handshake.source)
            raise

    def leave(self, handshake: Handshake) -> None:
        """``handshake`` computes no more (done, failed or aborted): its place goes on."""
        if handshake not in self.computing:
            return
        del self.computing[handshake]
        while self._waiting and len(self.computing) < self.limit:
            counts = self._counts()
            # Of the addresses computing the fewest, the one whose latest turn is the longest ago
            # (then the one waiting longest): not the oldest waiting alone, or an address holding
            # one stalled handshake and more waiting, older than ours, took back each place its
            # stalled one gave up, and eight such addresses kept every other waiting past 5 s.
            turn = min(
                self._waiting,
                key=lambda waiting: (
                    counts[self._waiting[waiting].source],
                    self._last_turn.get(self._waiting[waiting].source, float("-inf")),
                ),
            )
            waiting = self._waiting.pop(turn)
            if turn.cancelled():  # its task was cancelled, and has not run since to say so
                self._forget(waiting.source)
                continue
            if waiting.left():
                # Its client gave up while it waited (kube-apiserver's check does after 5 s): no
                # turn for it, or those of a check that failed took its address's next turns.
                waiting.abort()
                self._forget(waiting.source)
                continue
            self.computing[waiting] = self._last_turn[waiting.source] = asyncio.get_running_loop().time()
            turn.set_result(None)
        self._forget(handshake.source)
        self._arm()

    def _forget(self, source: str) -> None:
        """``source``'s latest turn, once it neither computes nor waits (held per address under way)."""
        if source in self._last_turn and all(h.source != source for h in (*self.computing, *self._waiting.values())):
            del self._last_turn[source]

    def _arm(self) -> None:
        """While some wait, look again when the oldest computing one's turn is over."""
        if self._timer is not None or not self._waiting or not self.computing:
            return
        began = next(iter(self.computing.values()))
        self._timer = asyncio.get_running_loop().call_at(began + self.turn, self._turns_over)

    def _turns_over(self) -> None:
        """Those computing past their turn while others wait are evicted: stalled, most likely
        (eight addresses holding one stalled handshake each would otherwise hold every place)."""
        self._timer = None
        now = asyncio.get_running_loop().time()
        for handshake, began in list(self.computing.items()):
            if not self._waiting or now - began < self.turn:
                break
            handshake.abort()
        self._arm()


class Handshake:
    """The TLS handshake of one accepted connection, run as a task; ``abort`` closes the connection.

    The SSL object and its buffers are made only once the client has sent something (its
    ClientHello): until then the connection is a socket and a reader, and ``heard`` is False.
    Then it waits for its place at ``gate``; ``started`` once the handshake computes.
    ``over(handshake)`` is told when the handshake is no longer under way (once or more: it
    forgets it): completed (the protocol ``factory`` made is connected), failed, timed out or aborted.
    """

    def __init__(
        self,
        sock: socket.socket,
        factory: Callable[[], asyncio.BaseProtocol],
        context: SSLContext,
        timeout: float,
        over: Callable[[Handshake], None],
        gate: HandshakeGate,
    ) -> None:
        self.sock: socket.socket | None = sock  # until the handshake's transport owns it
        self.source = peer_host(sock)
        self.over = over
        self.gate = gate
        # The client has sent its first bytes; already, often, when it is accepted in a batch.
        self.heard = _has_bytes(sock)
        self.started = False  # its place at the gate taken: the SSL object exists
        self._reading: int | None = None  # the descriptor watched until then
        self.task = asyncio.get_running_loop().create_task(self._run(factory, context, timeout))

    async def _run(self, factory: Callable[[], asyncio.BaseProtocol], context: SSLContext, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        began = loop.time()
        try:
            if not self.heard:
                await self._readable(timeout)
        except TimeoutError:
            self._give_up("nothing received")
            return
        self.heard = True
        try:
            async with asyncio.timeout(max(timeout - (loop.time() - began), 0.1)):
                await self.gate.enter(self)
        except TimeoutError:
            self._give_up("no place to shake hands")
            return
        self.started = True
        sock, self.sock = self.sock, None
        assert sock is not None
        try:
            await loop.connect_accepted_socket(
                factory, sock, ssl=context, ssl_handshake_timeout=max(timeout - (loop.time() - began), 0.1)
            )
        except (TimeoutError, OSError, RuntimeError) as err:  # SSLError, ConnectionError: OSErrors
            # Debug, not info: a flood of bare connects must not become a flood of log lines.
            log.debug("TLS handshake did not complete", extra={"error": repr(err)})
        finally:
            self.gate.leave(self)
        self.over(self)

    def _give_up(self, why: str) -> None:
        """Close the connection before its handshake began (timed out), and say so."""
        # Debug, not info: a flood of bare connects must not become a flood of log lines.
        log.debug("TLS handshake did not complete", extra={"error": why})
        self._close_socket()
        self.over(self)

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

    def left(self) -> bool:
        """Whether its client has already closed or reset the connection (before its handshake)."""
        return self.sock is not None and _peer_left(self.sock)

    def abort(self) -> None:
        """Close the connection now, whatever the handshake's stage: its place at the gate goes on."""
        self._stop_reading()
        if not self.task.done():
            self.task.cancel()  # a handshake begun: its transport closes the connection
        self._close_socket()
        self.gate.leave(self)
        self.over(self)

    def _close_socket(self) -> None:
        if self.sock is not None:  # the handshake not begun: nothing else will close it
            self.sock.close()
            self.sock = None


class HandshakePool:
    """The TLS handshakes of one listener under way, counted from the accept, before any TLS state.

    At most ``limits.max_handshakes``: past it the newcomer evicts one (``to_evict``), so a flood
    of bare connects makes room only among its own handshakes and never closes a connection a
    client pooled. Each has ``limits.handshake_seconds`` to complete, and computes only at its
    turn at the ``gate`` (``limits.handshakes_computing`` at once, shared out by address).
    ``factory`` makes the protocol a completed handshake connects; ``listening``, the socket
    accepted on (``Acceptor``).
    """

    def __init__(
        self,
        limits: ConnectionLimits,
        context: SSLContext,
        factory: Callable[[], asyncio.BaseProtocol],
        listening: socket.socket,
    ) -> None:
        self.limits = limits
        self.context = context
        self.factory = factory
        self.under_way: dict[Handshake, None] = {}  # in order of accept
        self.gate = HandshakeGate(limits.handshakes_computing)
        self.acceptor = Acceptor(listening, self.accepted)

    def accepted(self, sock: socket.socket) -> None:
        """A connection just accepted: counted, its handshake begun (one evicted past the cap)."""
        set_socket_buffers(sock, self.limits.socket_buffer_bytes)
        while len(self.under_way) >= self.limits.max_handshakes:
            victim = to_evict(self.under_way)
            del self.under_way[victim]
            victim.abort()
        handshake = Handshake(sock, self.factory, self.context, self.limits.handshake_seconds, self._over, self.gate)
        self.under_way[handshake] = None

    def _over(self, handshake: Handshake) -> None:
        self.under_way.pop(handshake, None)

    async def close(self) -> None:
        """Stop accepting, and abort every handshake under way."""
        await self.acceptor.close()
        for handshake in list(self.under_way):
            handshake.abort()
        self.under_way.clear()


def set_socket_buffers(sock: socket.socket | None, size: int, *options: int) -> None:
    """Fix ``sock``'s kernel buffers at ``size`` (0: leave them to the kernel), each way unless
    ``options`` names one (``socket.SO_SNDBUF``)."""
    if sock is None or not size:
        return
    try:
        for option in options or (socket.SO_SNDBUF, socket.SO_RCVBUF):
            sock.setsockopt(socket.SOL_SOCKET, option, size)
    except OSError:
        pass


def to_evict(handshakes: Iterable[Handshake]) -> Handshake:
    """Which of ``handshakes`` (oldest first) makes room for a new one: one from the source
    address with the most under way: the oldest from which nothing was heard, else the newest
    waiting for its turn at the gate (no SSL object yet; a full queue turns away its last, and
    those before keep their place), else the oldest computing (stalled, most likely).

    By source, because one client's flood must make room among its own: kube-apiserver's
    availability check opens five connections at once, and under a pod's flood of hundreds of
    connections a second each of them became the oldest in turn and was reset, and the
    aggregator answered 503 for the whole APIService (bench/README.md, "Handshakes by address").
    Nothing heard first, so bare connects make room among themselves before any client that
    has sent its ClientHello (a kubelet probe) is evicted."""
    listed = list(handshakes)
    counts = Counter(handshake.source for handshake in listed)
    most = max(counts.values())
    theirs = [handshake for handshake in listed if counts[handshake.source] == most]
    for handshake in theirs:
        if not handshake.heard:
            return handshake
    for handshake in reversed(theirs):
        if not handshake.started:
            return handshake
    return theirs[0]
