"""The aiohttp side of the JSON body edge (apimachinery.bodies): bounded JSON bodies in, JSON and Status out.

Used by the insights server (its API and serving.appserving) and the metrics guard. The webhook's
own HTTP/1.1 server (serving.reviews) reads bodies and answers Statuses with apimachinery.bodies alone,
without aiohttp.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from aiohttp import web

from apimachinery.bodies import (
    JSON,
    BodyDeadlines,
    StatusError,
    body_too_large,
    is_json_content_type,
    request_timeout,
    unsupported_content_type,
)
from apimachinery.status import Status, failure
from serving.budget import Reservation


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


# Chunked bodies (no Content-Length; kube-apiserver always sends one) grow their reservation in
# steps as they arrive, at least this much at a time.
GROWTH_STEP = 64 * 1024


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
                    if not reservation.try_resize(max(4 * size, reservation.held + GROWTH_STEP)):
                        raise StatusError(failure(429, "too many large requests in flight; retry later"))
                chunks.append(chunk)
    except TimeoutError:
        assert deadlines is not None and end is not None
        if loop.time() >= end:
            raise request_timeout(f"request body not received within {deadlines.total:g}s") from None
        raise request_timeout(f"no request body bytes received for {deadlines.idle:g}s") from None
    return b"".join(chunks)


def check_json_content_type(request: web.Request) -> None:
    """A 415 Status unless the body is declared as JSON (or not declared at all)."""
    if not is_json_content_type(request.content_type):
        raise unsupported_content_type(request.content_type)
