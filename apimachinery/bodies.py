"""JSON request bodies and Status errors, whichever HTTP server reads them (aiohttp or serving.reviews).

Nothing here imports an HTTP library: the admission port's own server (serving.reviews) must
not pay for aiohttp's import to serve.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from apimachinery.nesting import MAX_DEPTH, nests_too_deep, too_deep
from apimachinery.status import Status, failure

JSON = "application/json"


class StatusError(Exception):
    """Raised inside a handler to answer with this Status; the edge turns it into a response."""

    def __init__(self, status: Status) -> None:
        super().__init__(status.get("message", ""))
        self.status = status


@dataclass(frozen=True)
class BodyDeadlines:
    """How long a client may take to send its body: between two reads, and in all.

    A client that trickles its body (a byte a second) is answered 408 once either passes, and,
    read before any concurrency slot is taken, it never holds one.
    """

    idle: float = 2.0
    total: float = 10.0


def request_timeout(message: str) -> StatusError:
    # apimachinery's reason for a request the server gave up waiting for; 408 says it was the client.
    return StatusError(failure(408, message, reason="Timeout"))


def body_too_large(limit: int) -> StatusError:
    """The 413 for a body past ``limit`` bytes (as read: after any Content-Encoding is undone)."""
    return StatusError(failure(413, f"request body is larger than the limit of {limit} bytes"))


def is_json_content_type(content_type: str) -> bool:
    """True for a body declared as JSON (or not declared at all): the only kind the servers read."""
    return content_type in (JSON, "application/octet-stream", "") or content_type.endswith("+json")


def unsupported_content_type(content_type: str) -> StatusError:
    return StatusError(failure(415, f"unsupported Content-Type {content_type!r}: send {JSON}"))


def parse_json(body: bytes, *, opens: int | None = None) -> Any:
    """``body`` parsed as JSON, or a 400 Status that says what is wrong.

    Nesting past apimachinery.nesting's limit is refused as soon as the body is parsed: what is
    parsed is then copied, rendered and written again, and each of those recurses (orjson writes
    only 254 levels). ``opens``: how many arrays and objects the body opens, if counted already
    (serving.budget); no more than the limit (every real admission review) needs no measuring.
    """
    if not body:
        raise StatusError(failure(400, "request body is empty: expected a JSON object"))
    if opens is None:
        opens = body.count(b"{") + body.count(b"[")
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as err:
        # orjson refuses past 1,024 levels: say it is the nesting, as for 129.
        if opens > MAX_DEPTH and too_deep(body, opens=opens):
            raise _nested_too_deep() from None
        raise StatusError(failure(400, f"request body is not valid JSON: {err}")) from None
    if opens > MAX_DEPTH and nests_too_deep(value):
        raise _nested_too_deep()
    return value


def _nested_too_deep() -> StatusError:
    return StatusError(failure(400, f"request body nests arrays and objects deeper than {MAX_DEPTH} levels"))
