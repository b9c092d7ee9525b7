"""TLS handshakes shared out by address (serving.tlsupgrade): a flood waits behind itself.

On insights' listener, with a real flood from a second address: test_hostile_insights.py.

Before: uvloop's ``sock_accept`` took one connection per turn of the loop, so under a flood a
new connection waited in the kernel's queue behind all of it (kube-apiserver's availability
check took 3 s of its 5); and past 64 handshakes under way the oldest was dropped whoever sent
it, so the check's five connections, opened at once, were reset together and the aggregator
answered 503 for the whole APIService (the attack mix on the real node, twice in CI).
"""

from __future__ import annotations

import asyncio
import socket
import struct
from typing import Any, cast

import uvloop

from serving.tlsupgrade import Acceptor, Handshake, HandshakeGate, _peer_left, listening_socket, to_evict

# ---- accepting ---------------------------------------------------------------------------------


def test_every_connection_waiting_in_the_kernels_queue_is_accepted_in_one_turn_of_uvloops_loop() -> None:
    waiting = 50

    async def turns_to_accept_them() -> int:
        sock = listening_socket("127.0.0.1", 0, backlog=1024, reuse_port=False)
        clients = [socket.create_connection(("127.0.0.1", sock.getsockname()[1])) for _ in range(waiting)]
        accepted: list[socket.socket] = []
        acceptor = Acceptor(sock, accepted.append)
        turns = 0
        while len(accepted) < waiting and turns < 1000:
            await asyncio.sleep(0)
            turns += 1
        await acceptor.close()
        for conn in [*accepted, *clients]:
            conn.close()
        return turns

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        assert runner.run(turns_to_accept_them()) <= 2


# ---- which handshake makes room --------------------------------------------------------------


def _under_way(source: str, *, heard: bool = True, started: bool = True) -> Handshake:
    """What ``to_evict`` reads of a handshake under way."""
    return cast(Handshake, type("UnderWay", (), {"source": source, "heard": heard, "started": started})())


def test_past_the_cap_the_handshake_evicted_is_one_of_the_address_with_the_most() -> None:
    ours = _under_way("10.88.0.1")  # the oldest, and its ClientHello heard: before, the one dropped
    flood = [_under_way("10.88.0.2") for _ in range(63)]
    assert to_evict([ours, *flood]) is flood[0]


def test_of_that_address_one_that_has_cost_nothing_yet_goes_first() -> None:
    computing = _under_way("10.88.0.2")
    waiting = _under_way("10.88.0.2", started=False)  # heard, waiting for a place: no SSL object yet
    silent = _under_way("10.88.0.2", heard=False, started=False)
    assert to_evict([computing, waiting, silent]) is silent
    assert to_evict([computing, waiting]) is waiting
    assert to_evict([computing, _under_way("10.88.0.2")]) is computing


def test_of_those_waiting_for_their_turn_the_newest_is_turned_away() -> None:
    # A full queue turns away its last: those before it keep their place (and kube-apiserver's
    # connections theirs, when the flood comes from its own address).
    computing = _under_way("10.88.0.2")
    first, last = _under_way("10.88.0.2", started=False), _under_way("10.88.0.2", started=False)
    assert to_evict([computing, first, last]) is last


# ---- the gate ------------------------------------------------------------------------------------


class _Computing:
    """What the gate needs of a handshake: its address, and being dropped for another's turn."""

    def __init__(self, gate: HandshakeGate, source: str, *, gone: bool = False) -> None:
        self.gate, self.source, self.aborted, self.gone = gate, source, False, gone

    def abort(self) -> None:
        self.aborted = True
        self.gate.leave(cast(Handshake, self))

    def left(self) -> bool:
        return self.gone


def _handshakes(gate: HandshakeGate, *sources: str) -> list[Any]:
    return [_Computing(gate, source) for source in sources]


async def _enter(gate: HandshakeGate, handshake: Any) -> asyncio.Task[None]:
    task = asyncio.create_task(gate.enter(handshake))
    await asyncio.sleep(0)
    return task


async def test_a_free_place_goes_to_the_waiting_address_that_computes_fewest() -> None:
    gate = HandshakeGate(2)
    a1, b1, a2, b2, c1 = _handshakes(gate, "a", "b", "a", "b", "c")
    await gate.enter(a1)
    await gate.enter(b1)
    waiting = [await _enter(gate, h) for h in (a2, b2, c1)]  # a2 has waited longest
    gate.leave(b1)
    await asyncio.sleep(0)
    # a computes one, b and c none; of those, c has not had a turn yet
    assert [task.done() for task in waiting] == [False, False, True]
    gate.leave(c1)
    await asyncio.sleep(0)
    assert [task.done() for task in waiting] == [False, True, True]
    assert not any(h.aborted for h in (a1, b1, a2, b2, c1))  # no address led by two


async def test_an_address_that_computes_two_fewer_than_the_busiest_takes_a_place_from_it_at_once() -> None:
    # Before a place was taken: handshakes that stall after their ClientHello held every place
    # for their whole timeout (10 s), and every other address's waited behind them.
    gate = HandshakeGate(2)
    a1, a2, a3, b1 = _handshakes(gate, "a", "a", "a", "b")
    await gate.enter(a1)
    await gate.enter(a2)
    a3_turn = await _enter(gate, a3)
    assert not a1.aborted  # one address's own burst only waits its turn
    b1_turn = await _enter(gate, b1)
    assert a1.aborted and b1_turn.done() and not a3_turn.done()
    assert list(gate.computing) == [a2, b1]


async def test_a_handshake_still_computing_after_its_turn_gives_its_place_up_when_others_wait() -> None:
    # Eight addresses holding one stalled handshake each (no address leading by two) held every
    # place for the handshake timeout, and everyone else's waited.
    gate = HandshakeGate(2, turn=0.05)
    a1, b1, c1 = _handshakes(gate, "a", "b", "c")
    await gate.enter(a1)
    await gate.enter(b1)
    c1_turn = await _enter(gate, c1)
    assert not a1.aborted
    await asyncio.wait_for(c1_turn, 1)
    assert a1.aborted and not b1.aborted  # the oldest first
    assert list(gate.computing) == [b1, c1]


async def test_a_handshake_dropped_while_it_waits_takes_no_place() -> None:
    gate = HandshakeGate(1)
    a1, a2, a3 = _handshakes(gate, "a", "a", "a")
    await gate.enter(a1)
    dropped, next_one = await _enter(gate, a2), await _enter(gate, a3)
    dropped.cancel()
    gate.leave(a1)  # before the dropped one's task has run to see its cancellation
    await asyncio.sleep(0)
    assert next_one.done() and list(gate.computing) == [a3]
    gate.leave(a3)
    assert not gate.computing


async def test_a_place_given_up_after_its_turn_goes_to_an_address_that_has_not_had_one() -> None:
    # Eight attacker addresses, each computing one stalled handshake and keeping more stalled ones
    # waiting (older than ours), took every place back as its turn ended: a tie of zero went to
    # the oldest waiting, their own; kube-apiserver's five waited until they timed out (5 s).
    gate = HandshakeGate(2, turn=0.05)
    a1, b1, a2, b2, a3, b3 = _handshakes(gate, "a", "b", "a", "b", "a", "b")
    await gate.enter(a1)
    await gate.enter(b1)
    stock = [await _enter(gate, h) for h in (a2, b2, a3, b3)]
    ours = await _enter(gate, _Computing(gate, "kube-apiserver"))
    while not a1.aborted:  # the first turn is over
        await asyncio.sleep(0.01)
    await asyncio.sleep(0)
    assert ours.done()  # not after every stalled one waiting before it has had its turn too
    for turn in stock:
        turn.cancel()


async def test_a_handshake_whose_client_left_while_it_waited_takes_no_turn() -> None:
    # A check that timed out left five connections queued here until their own timeout (10 s);
    # each took one of its address's turns in the next check, ahead of that check's own: with
    # twelve attacker addresses the first answer came 0.5, 2.6, 3.6, 4.6 s after, then none.
    gate = HandshakeGate(1)
    (attacker,) = _handshakes(gate, "a")
    await gate.enter(attacker)
    abandoned = _Computing(gate, "kube-apiserver", gone=True)
    waiting = await _enter(gate, abandoned)
    ours = await _enter(gate, _Computing(gate, "kube-apiserver"))
    gate.leave(attacker)
    await asyncio.sleep(0)
    assert abandoned.aborted and ours.done()
    waiting.cancel()  # what dropping it does to a real one (Handshake.cancel)


async def test_a_connection_its_client_closed_or_reset_is_seen_as_left_before_its_bytes_are_read() -> None:
    listener = listening_socket("127.0.0.1", 0, backlog=8, reuse_port=False)
    port = listener.getsockname()[1]
    clients, served = [], []
    for _ in range(3):
        client = socket.create_connection(("127.0.0.1", port))
        client.sendall(b"\x16\x03\x01")  # a ClientHello begun: bytes wait unread
        clients.append(client)
        served.append(await asyncio.get_running_loop().sock_accept(listener))
    clients[0].close()
    clients[1].setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    clients[1].close()
    for _ in range(100):  # the FIN and the RST cross loopback at once; a few turns at most
        if _peer_left(served[0][0]) and _peer_left(served[1][0]):
            break
        await asyncio.sleep(0.01)
    assert [_peer_left(sock) for sock, _ in served] == [True, True, False]
    for sock in [listener, clients[2], *(sock for sock, _ in served)]:
        sock.close()
