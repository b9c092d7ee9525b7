"""Answering a FooHealth list: which state, which page, and writing it out a chunk at a time.

The state comes from the view (``resolve``): the current one, or the one at a resourceVersion
for resourceVersionMatch=Exact and for every page after the first, so all pages of a list are
one snapshot. A version newer than the view waits up to TOO_LARGE_WAIT, as kube-apiserver's
watch cache does, then answers its 504; one no longer held answers its 410.

A list is never built whole: the page is a list of references to the view's objects, and it is
encoded CHUNK bytes at a time by one worker thread (``write``) while earlier chunks are sent,
so eight Tables of 1,000 large FooHealths hold eight chunks, not eight copies of everything.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import orjson
from aiohttp import web

from apimachinery.bodies import StatusError
from apimachinery.objects import Object
from apimachinery.status import failure

from .listoptions import LATEST, Continue, ListOptions
from .view import HealthView

# kube-apiserver's watch cache: blockTimeout, and the retry it suggests (resourceVersionTooHighRetrySeconds).
TOO_LARGE_WAIT = 3.0
TOO_LARGE_RETRY_SECONDS = 1
# One write to the transport; also the most one list holds encoded and not yet sent (plus one object).
CHUNK = 64 * 1024

EXPIRED = "The resourceVersion for the provided list is too old."
CONTINUE_EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new list "
    "without the continue parameter, or use the continue token in this response to retrieve the remainder of the "
    "results. Continuing with the provided token results in an inconsistent list - objects that were created, "
    "modified, or deleted between the time the first chunk was returned and now may show up in the list."
)

# Lists are encoded off the event loop, one at a time: a chunk of orjson and table cells is
# short, and the loop answers others between chunks.
_ENCODER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lists")

Matches = Callable[[Object], bool]
Render = Callable[[Object], Object]


def too_large(asked: int, current: int) -> StatusError:
    """storage.NewTooLargeResourceVersionError: 504 Timeout, caused by ResourceVersionTooLarge."""
    return StatusError(
        failure(
            504,
            f"Timeout: Too large resource version: {asked}, current: {current}",
            details={
                "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                "retryAfterSeconds": TOO_LARGE_RETRY_SECONDS,
            },
        )
    )


async def reached(view: HealthView, resource_version: int, wait: float = TOO_LARGE_WAIT) -> None:
    """Return once the view is at ``resource_version`` or newer; the 504 after ``wait`` seconds."""
    if resource_version > view.version and not await view.wait_for(resource_version, wait):
        raise too_large(resource_version, view.version)


async def resolve(
    view: HealthView, options: ListOptions, wait: float = TOO_LARGE_WAIT
) -> tuple[Mapping[str, Object], int]:
    """The FooHealths by key a list answers from, and their version.

    Returns without awaiting after its last check, so the caller takes its page of the state
    before anything can change it.
    """
    read = options.read
    await reached(view, read.resource_version, wait)
    if not read.exact:
        return view.current, view.version
    state = view.snapshot(read.resource_version)
    if state is None:
        if options.continue_from is not None:
            raise continue_expired(options.continue_from)
        raise StatusError(failure(410, EXPIRED))
    return state, read.resource_version


def continue_expired(token: Continue) -> StatusError:
    """The 410 of a token whose snapshot is gone, with a token for the rest at the latest version."""
    status = failure(410, CONTINUE_EXPIRED)
    status["metadata"] = {"continue": Continue(LATEST, token.start).encode()}
    return StatusError(status)


@dataclass(frozen=True)
class Page:
    items: list[Object]
    metadata: Object  # the list's ListMeta: resourceVersion, continue, remainingItemCount


def page(
    state: Mapping[str, Object],
    version: int,
    options: ListOptions,
    *,
    namespace: str = "",
    matches: Matches | None = None,
) -> Page:
    """The page of ``state`` the options ask for, in key order (namespace, then name).

    As kube-apiserver: the token says where the next page starts (the last key sent + NUL) and
    carries the list's version; ``remainingItemCount`` only when no selector filters the list.
    """
    start = options.continue_from.start if options.continue_from else ""
    prefix = f"{namespace}/" if namespace else ""
    keys = sorted(k for k in state if k >= start and k.startswith(prefix))
    items: list[Object] = []
    limit = options.limit
    last = -1
    for position, key in enumerate(keys):
        obj = state[key]
        if matches is not None and not matches(obj):
            continue
        if limit and len(items) == limit:
            last = position
            break
        items.append(obj)
    metadata: Object = {"resourceVersion": str(version)}
    if last >= 0:
        metadata["continue"] = Continue(version, _key(items[-1]) + "\x00").encode()
        if matches is None:
            metadata["remainingItemCount"] = len(keys) - last
    return Page(items, metadata)


def _key(obj: Object) -> str:
    meta = obj["metadata"]
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def encode(items: Sequence[Object], start: int, render: Render, size: int = CHUNK) -> tuple[bytes, int]:
    """Items from ``start`` on, rendered and comma-joined until ``size`` bytes; and where it stopped."""
    parts: list[bytes] = []
    total, end = 0, start
    while end < len(items) and total < size:
        part = orjson.dumps(render(items[end]))
        parts.append(part)
        total += len(part) + 1
        end += 1
    return b",".join(parts), end


def _opening(head: Object, key: str) -> bytes:
    return orjson.dumps(head)[:-1] + b',"' + key.encode() + b'":['


async def document(head: Object, key: str, items: Sequence[Object], render: Render, limit: int) -> bytes | None:
    """The whole answer as one JSON document, or None once it passes ``limit`` bytes (for YAML)."""
    loop = asyncio.get_running_loop()
    body, end = await loop.run_in_executor(_ENCODER, encode, items, 0, render, limit + 1)
    document = _opening(head, key) + body + b"]}"
    return document if end == len(items) and len(document) <= limit else None


async def write(
    request: web.Request, head: Object, key: str, items: Sequence[Object], render: Render, content_type: str
) -> web.StreamResponse:
    """Send ``head`` with ``items`` under ``key``, encoded and written a chunk at a time."""
    response = web.StreamResponse(headers={"Content-Type": content_type})
    loop = asyncio.get_running_loop()
    try:
        await response.prepare(request)
        if request.method == "HEAD":  # the head alone: aiohttp would send whatever is written
            await response.write_eof()
            return response
        await response.write(_opening(head, key))
        position = 0
        while position < len(items):
            chunk, end = await loop.run_in_executor(_ENCODER, encode, items, position, render)
            await response.write(chunk if position == 0 else b"," + chunk)
            position = end
        await response.write(b"]}")
        await response.write_eof()
    except ConnectionError:
        pass  # the client went away mid-list: nothing to answer, nothing held
    return response
