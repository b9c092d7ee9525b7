"""The HTTP edge shared by every endpoint: bounded JSON bodies in, JSON (and Status) out."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from kube.budget import Reservation
from kube.status import Status, failure

JSON = "application/json"


class StatusError(Exception):
    """Raised inside a handler to answer with this Status; the edge turns it into a response."""

    def __init__(self, status: Status) -> None:
        super().__init__(status.get("message", ""))
        self.status = status


def json_response(
    body: Any, status: int = 200, headers: dict[str, str] | None = None, content_type: str = JSON
) -> web.Response:
    return web.Response(
        body=orjson.dumps(body),
        status=status,
        content_type=None,
        headers={"Content-Type": content_type, **(headers or {})},
    )


def status_response(status: Status) -> web.Response:
    return json_response(status, status=status.get("code", 500))


@dataclass(frozen=True)
class BodyDeadlines:
    """How long a client may take to send its body: between two reads, and in all.

    A client that trickles its body (a byte a second) is answered 408 once either passes, and,
    read before any concurrency slot is taken, it never holds one.
    """

    idle: float = 2.0
    total: float = 10.0


# Chunked bodies (no Content-Length; kube-apiserver always sends one) grow their reservation in
# steps as they arrive, at least this much at a time.
_GROWTH_STEP = 64 * 1024


def _request_timeout(message: str) -> StatusError:
    # apimachinery's reason for a request the server gave up waiting for; 408 says it was the client.
    return StatusError(failure(408, message, reason="Timeout"))


def body_too_large(limit: int) -> StatusError:
    """The 413 for a body past ``limit`` bytes (as read: after any Content-Encoding is undone)."""
    return StatusError(failure(413, f"request body is larger than the limit of {limit} bytes"))


async def read_body(
    request: web.Request, limit: int, *, deadlines: BodyDeadlines | None = None, reservation: Reservation | None = None
) -> bytes:
    """The request body, or a Status: 413 once it passes ``limit`` bytes (checked while reading),
    408 if the client stops sending for ``deadlines.idle`` or takes longer than ``deadlines.total``.

    With a ``reservation``, a body without Content-Length grows it as it arrives (twice its size:
    the chunks and their join) and gets a 429 when the budget has no room; a body with one was
    reserved by the caller before reading.
    """
    too_large = body_too_large(limit)
    if request.content_length is not None and request.content_length > limit:
        raise too_large
    chunks: list[bytes] = []
    size = 0
    loop = asyncio.get_running_loop()
    end = loop.time() + deadlines.total if deadlines else None
    try:
        async with asyncio.timeout(None) as deadline:
            while True:
                if deadlines is not None and end is not None:
                    deadline.reschedule(min(loop.time() + deadlines.idle, end))
                chunk = await request.content.readany()
                if not chunk:
                    break
                size += len(chunk)
                if size > limit:
                    raise too_large
                if reservation is not None and request.content_length is None and 2 * size > reservation.held:
                    if not reservation.try_resize(max(4 * size, reservation.held + _GROWTH_STEP)):
                        raise StatusError(failure(429, "too many large requests in flight; retry later"))
                chunks.append(chunk)
    except TimeoutError:
        assert deadlines is not None and end is not None
        if loop.time() >= end:
            raise _request_timeout(f"request body not received within {deadlines.total:g}s") from None
        raise _request_timeout(f"no request body bytes received for {deadlines.idle:g}s") from None
    return b"".join(chunks)


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for a burst of allocation.

    Parsing a ConversionReview of 10,000 Foos allocates ~500,000 containers; the collector would
    walk them again and again (measured: 320 ms to parse with it, 90 ms without). JSON trees have
    no cycles, so reference counting frees them all; the collector runs again afterwards.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


_PAUSE_GC_FROM = 64 * 1024


def parse_json(body: bytes) -> Any:
    """``body`` parsed as JSON, or a 400 Status that says what is wrong.

    orjson refuses nesting deeper than 1024 (a JSONDecodeError, so a 400 here): depth cannot
    exhaust the stack.
    """
    if not body:
        raise StatusError(failure(400, "request body is empty: expected a JSON object"))
    try:
        if len(body) < _PAUSE_GC_FROM:
            return orjson.loads(body)  # too few containers to be worth the pause's own cost
        with gc_paused():
            return orjson.loads(body)
    except orjson.JSONDecodeError as err:
        raise StatusError(failure(400, f"request body is not valid JSON: {err}")) from None


def check_json_content_type(request: web.Request) -> None:
    """A 415 Status unless the body is declared as JSON (or not declared at all)."""
    content_type = request.content_type
    if content_type not in (JSON, "application/octet-stream", "") and not content_type.endswith("+json"):
        raise StatusError(failure(415, f"unsupported Content-Type {content_type!r}: send {JSON}"))


async def read_json(request: web.Request, limit: int, *, deadlines: BodyDeadlines | None = None) -> Any:
    """The request body parsed as JSON, or a 400/408/413/415 Status that says what is wrong."""
    check_json_content_type(request)
    return parse_json(await read_body(request, limit, deadlines=deadlines))
