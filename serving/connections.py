"""One connection policy for every port: what a connection may hold, and which one makes room.

Every port a process listens on (the admission port, insights' API port, the probe port) bounds
its connections in the same words, ``ConnectionLimits``: a request head's bytes and deadline, the
wait for a first request, the idle time after an answer, and caps on connections and on TLS
handshakes under way (the handshakes are a pool of their own: serving.tlsupgrade.HandshakePool).
Past a port's cap one held connection makes room for the newcomer, chosen by one rule
(``Connections.admit``); when none may, the newcomer is closed.

One verb per act, on every port:

* **evict**: close a held connection (or a handshake under way) so that a newcomer may be held;
* **refuse**: close the newcomer, when nothing may be evicted for it;
* **abort**: close at once, without waiting for the client (a TLS close waits for the peer's
  close_notify, up to 30 s, decrypting whatever it still sends);
* **close**: close once what was written has left;
* **finish**: the server is stopping: close now if idle, else once the answers under way are written.

docs/architecture.md, "Resource model (admission port)" and "Resource model (insights)", has the
figures; issue 25 the attacks each bound answers.
"""

from __future__ import annotations

import asyncio
import enum
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from apimachinery.status import Status, failure

KiB = 1024

# TLS handshakes computing at once per listener (serving.tlsupgrade.HandshakeGate). One accepted
# per turn of the loop kept about four under way under the attack mix, with the loop's turns short
# enough for everyone else; 64 at once made each turn long and the honest callers slow (bench/README.md).
HANDSHAKES_COMPUTING = 8
# What every HTTPS port of ours (the admission port, insights') lets its connections do:
# Idle after an answer. Above the apiserver's 90 s (client-go's IdleConnTimeout, from
# utilnet.SetTransportDefaults): the client, not us, retires an idle connection, so it never
# writes a POST onto one we are closing (Go does not retry a POST it wrote: a lost review).
# Past the connection cap the least recently active idle connection is closed sooner.
KEEPALIVE_SECONDS = 95.0
# A connection just admitted, that has not yet had the time to send its first request, is closed
# to make room only when no other can be: a kubelet probe sends its GET one round trip after its
# handshake, and under a churn of attacking connections it was the one quiet longest by then.
# An attacker who keeps every place fresh must open 64 connections a second, each a handshake.
FIRST_REQUEST_GRACE = 1.0

# A new connection's TLS handshake, and then the start of its first request: kube-apiserver's
# client gives its own handshake 10 s (client-go's TLSHandshakeTimeout) and writes the request
# it dialed for at once. A bare TCP connect was held 60 s (asyncio's default handshake timeout).
FIRST_REQUEST_SECONDS = 10.0
# How long a connection closed before its request was read still reads (and drops) what arrives,
# so the client reads the Status written to it rather than a reset.
LINGER_SECONDS = 1.0


class Standing(enum.Enum):
    """What a held connection is doing, as the rule that picks one to evict reads it."""

    SILENT = "silent"  # never sent a byte, past its first-request grace
    NEW = "new"  # never sent a byte, within its first-request grace
    ASKING = "asking"  # never answered; a request under way (a head, a body, waiting for the budget)
    POOLED = "pooled"  # answered before and not being answered now: a client's pool
    LONG_RUNNING = "long-running"  # serving a watch, which its client resumes
    ANSWERING = "answering"  # its request is being answered: never evicted


# Ports open to anyone (the admission port, the probe port, insights' callers without a client
# certificate): those that hold a place without asking go first, then those still asking, then
# the newest; a client's pool last, because kube-apiserver does not retry a POST it wrote onto
# a connection the server closed (a lost review).
ANYONE = (Standing.SILENT, Standing.ASKING, Standing.NEW, Standing.POOLED, Standing.LONG_RUNNING)
# Callers the port verified by their client certificate (kube-apiserver's aggregator on
# insights): a request under way is never evicted, a pool goes before a watch (its client retries
# a GET on a connection closed under it, and resumes a watch), and the newest last: the
# aggregator's availability check writes its request as soon as it is connected, and one refused
# check makes the aggregator answer 503 for every read until the next passes.
VERIFIED = (Standing.SILENT, Standing.POOLED, Standing.LONG_RUNNING, Standing.NEW)


@dataclass(frozen=True)
class ConnectionLimits:
    """What a port lets one caller's connection hold, and how many it holds: every port has one.

    ``anonymous``: on a port that asks for a client certificate, the limits of connections that
    presented none (insights: the kubelet's probes where no probe port is set, and anyone).
    """

    # A request head (request line and headers), counted as it is read: 431 past it, then closed.
    head_bytes: int
    # From a head's first byte to its end: 408 past it (slowloris on headers), then closed.
    head_seconds: float
    # Connections held at once; past it one is evicted for the newcomer (``evict_order``).
    max_connections: int
    # From the end of the handshake to the first byte of the first request; then closed.
    first_request_seconds: float = FIRST_REQUEST_SECONDS
    # Idle after an answer; then closed.
    idle_seconds: float = KEEPALIVE_SECONDS
    # Which held connection a newcomer evicts first (``Standing``); those not named never are.
    evict_order: tuple[Standing, ...] = ANYONE
    # TLS handshakes under way, counted from the accept (serving.tlsupgrade.HandshakePool), and
    # how long one may take; of them, ``handshakes_computing`` at once have TLS state.
    max_handshakes: int = 64
    handshake_seconds: float = FIRST_REQUEST_SECONDS
    handshakes_computing: int = HANDSHAKES_COMPUTING
    # The kernel's socket buffers of one connection, each way (the kernel doubles it); 0: its own
    # autotuning (up to tcp_wmem's 4 MiB for a client that does not read).
    socket_buffer_bytes: int = 0
    anonymous: ConnectionLimits | None = None


class Held:
    """What every port's connection protocol shares (serving.reviews.protocol.Connection,
    serving.appserving.Guard): its place under the cap, its request head's bytes and deadline,
    and one timer for the head, the first request and the idle time after an answer."""

    served = False  # an answer was written: idle time from now on is keep-alive
    long_running = False  # serving a watch, which its client resumes

    def __init__(self, limits: ConnectionLimits, connections: Connections[Any]) -> None:
        self.limits = limits
        self.connections = connections
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.source = ""  # the address it came from
        self.last_active = 0.0  # loop time of its last byte received, answer written, or its admission
        self.head_started = 0.0
        self.head_fed = 0  # bytes received while the head was incomplete
        self.timer: asyncio.TimerHandle | None = None
        self.timer_at = 0.0

    def admitted(self, transport: asyncio.Transport) -> bool:
        """Count the connection just made under its port's cap; False: refused (aborted)."""
        peer = transport.get_extra_info("peername")
        self.source = str(peer[0]) if isinstance(peer, tuple) else ""
        self.last_active = self.loop.time()
        if not self.connections.admit(self, self.last_active):
            transport.abort()  # refused: every one is in the middle of a request
            return False
        self.transport = transport
        self._arm(self.last_active + self.limits.first_request_seconds)
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self.connections.release(self)
        self.transport = None
        if self.timer is not None:
            self.timer.cancel()

    # -- what each protocol says of itself: a head arriving (its deadline holds), a request under
    # way or its answer unwritten (not idle), a request begun and not answered, one being answered;
    # how it refuses a head and how it finishes when the server stops (idle now, else after its answers).

    def in_head(self) -> bool:
        raise NotImplementedError

    def busy(self) -> bool:
        raise NotImplementedError

    def asking(self) -> bool:
        raise NotImplementedError

    def being_answered(self) -> bool:
        raise NotImplementedError

    def _refuse(self, status: Status) -> None:
        raise NotImplementedError

    def _close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def finish(self) -> None:
        raise NotImplementedError

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def evict(self) -> None:
        """Evicted for a newcomer (no longer held): aborted."""
        self.abort()

    # -- the rule's reading, the head's bounds, the one timer ----------------------------------

    def standing(self, now: float) -> Standing:
        if self.long_running:
            return Standing.LONG_RUNNING
        if self.being_answered():
            return Standing.ANSWERING
        if self.served:
            return Standing.POOLED
        if self.asking():
            return Standing.ASKING
        return Standing.NEW if now - self.last_active < FIRST_REQUEST_GRACE else Standing.SILENT

    def head_fits(self, size: int) -> bool:
        """Count ``size`` more bytes of the head arriving: False past ``head_bytes`` (431)."""
        self.head_fed += size
        if self.head_fed > self.limits.head_bytes:
            return False
        self._arm(self.head_started + self.limits.head_seconds)
        return True

    def _arm(self, when: float) -> None:
        if self.timer is not None:
            if self.timer_at <= when:
                return  # it fires first and looks again
            self.timer.cancel()
        self.timer_at = when
        self.timer = self.loop.call_at(when, self._check_time)

    def _check_time(self) -> None:
        """Refuse a head past its deadline (408), close a connection idle past its time; else look later."""
        self.timer = None
        if self.transport is None:
            return
        now = self.loop.time()
        limits = self.limits
        if self.in_head():
            due = self.head_started + limits.head_seconds
            if now >= due:
                self._refuse(head_too_slow(limits.head_seconds))
                return
            self._arm(due)
            return
        if self.busy():
            self._arm(now + limits.idle_seconds)  # a request in service has deadlines of its own
            return
        # Idle, or answers waiting for a client that has not read what was written since
        # ``last_active``: closed like an idle connection once the keep-alive has passed.
        due = self.last_active + (limits.idle_seconds if self.served else limits.first_request_seconds)
        if now < due:
            self._arm(due)
        elif self.transport.get_write_buffer_size():
            self.abort()  # an answer left unread all this time: not waited for any longer
        else:
            self._close()


def head_too_large(limit: int) -> Status:
    return failure(431, f"request head is larger than {limit} bytes", reason="RequestHeaderFieldsTooLarge")


def head_too_slow(seconds: float) -> Status:
    return failure(408, f"request head not received within {seconds:g}s", reason="Timeout")


C = TypeVar("C", bound=Held)


class Connections(Generic[C]):
    """The connections one port holds under ``limits.max_connections``, in order of arrival.

    Past the cap a newcomer evicts one: of the first standing in ``limits.evict_order`` that any
    held connection has, one from the address holding the most (a flood makes room among its
    own), and of those the quietest. If no held connection may be evicted, the newcomer is refused.
    """

    def __init__(self, limits: ConnectionLimits) -> None:
        self.limits = limits
        self.held: dict[C, None] = {}
        self.evicted = 0

    def __len__(self) -> int:
        return len(self.held)

    def __iter__(self) -> Iterator[C]:
        return iter(list(self.held))

    def admit(self, conn: C, now: float) -> bool:
        """Hold ``conn``, evicting one past the cap; False (refused) if none may be."""
        if len(self.held) >= self.limits.max_connections:
            victim = self.to_evict(now)
            if victim is None:
                return False
            del self.held[victim]
            self.evicted += 1
            victim.evict()
        self.held[conn] = None
        return True

    def to_evict(self, now: float) -> C | None:
        rank = {standing: i for i, standing in enumerate(self.limits.evict_order)}
        held_by = Counter(conn.source for conn in self.held)
        best: C | None = None
        best_key = (len(rank), 0, 0.0)
        for conn in self.held:
            place = rank.get(conn.standing(now))
            if place is None:
                continue
            key = (place, -held_by[conn.source], conn.last_active)
            if key < best_key:
                best, best_key = conn, key
        return best

    def release(self, conn: C) -> None:
        self.held.pop(conn, None)


async def drain(*ports: Connections[Any], timeout: float) -> None:
    """Close every connection held: idle ones now, the others once their answers are written; abort
    what is left after ``timeout``. (The server stopped accepting first.)"""
    for conn in (conn for held in ports for conn in held):
        conn.finish()
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while any(ports) and loop.time() < end:
        await asyncio.sleep(0.05)
    for conn in (conn for held in ports for conn in held):
        conn.abort()
