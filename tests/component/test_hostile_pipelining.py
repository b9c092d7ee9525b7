"""A client that pipelines requests and does not read the answers (the admission port's connection).

Driven in-process over a transport that keeps what is written and says when writing would wait,
so the client not reading is a state the test sets, not a race with kernel buffers.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
from typing import Any

from serving.connections import Connections
from serving.readiness import Readiness
from serving.reviews.protocol import MAX_PIPELINED, Connection
from serving.reviews.server import ADMISSION_PORT, ReviewApp

GET = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"


class _Transport(asyncio.Transport):
    """Keeps every write; ``unread`` bytes are what the client has not read."""

    def __init__(self) -> None:
        super().__init__()
        self.data = b""
        self.unread = 0
        self.reading = True
        self.aborted = self.closed = False

    def write(self, data: Any) -> None:
        self.data += bytes(data)
        self.unread += len(data)

    def get_write_buffer_size(self) -> int:
        return self.unread

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return 16 * 1024, 64 * 1024

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True

    def is_closing(self) -> bool:
        return self.closed or self.aborted


def _connection(*, keepalive: float = 95.0) -> tuple[Connection, _Transport]:
    app = ReviewApp(Readiness(serving=True), [], limits=dataclasses.replace(ADMISSION_PORT, idle_seconds=keepalive))
    conn = Connection(app, Connections(app.limits))
    transport = _Transport()
    conn.connection_made(transport)
    return conn, transport


def _codes(stream: bytes) -> list[int]:
    return [int(code) for code in re.findall(rb"HTTP/1\.1 (\d{3}) ", stream)]


async def test_a_client_that_does_not_read_cannot_make_a_connection_hold_more_than_a_few_requests() -> None:
    conn, transport = _connection()
    conn.pause_writing()  # the client reads nothing
    conn.data_received(GET * 2_000)  # one read's worth of tiny requests
    assert len(conn.queue) <= MAX_PIPELINED
    assert not transport.reading, "nothing more is read while requests wait for their answers"
    conn.resume_writing()  # the client reads at last: what was queued is answered, then 429
    assert _codes(transport.data) == [200] * MAX_PIPELINED + [429]


async def test_a_half_close_after_pipelined_requests_answers_every_one_then_closes() -> None:
    conn, transport = _connection()
    conn.pause_writing()
    conn.data_received(GET * 5)
    assert conn.eof_received() is True
    conn.resume_writing()
    assert _codes(transport.data) == [200] * 5
    last = transport.data.rsplit(b"HTTP/1.1 ", 1)[1]
    assert transport.data.count(b"Connection: close") == 1 and b"Connection: close" in last
    assert transport.closed


async def test_answers_left_unread_close_the_connection_once_the_keepalive_has_passed() -> None:
    conn, transport = _connection(keepalive=0.2)
    conn.data_received(GET)  # answered at once, never read
    conn.pause_writing()
    conn.data_received(GET * 3)  # wait behind the unread answer
    await asyncio.sleep(0.6)
    assert transport.aborted, "a client that reads nothing holds the connection only as long as an idle one"
