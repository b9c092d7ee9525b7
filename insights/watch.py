"""Serving a watch: replay from a resourceVersion, then live changes, one JSON event per line.

As kube-apiserver's watch cache does it: objects entering or leaving the watcher's filter become
ADDED or DELETED, a version outside the history answers an ERROR event with 410 Expired (the
client relists), BOOKMARKs carry the current version, and the stream ends after its timeout.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

import orjson
from aiohttp import web

from apimachinery.bodies import JSON
from apimachinery.objects import Object
from apimachinery.status import failure

from .resources import FOO_HEALTHS, GROUP_VERSION
from .view import Change, Expired, HealthView, Subscription

log = logging.getLogger(__name__)

# How an object goes on the wire: (health, is the first object of the stream) → JSON object.
Render = Callable[[Object, bool], Object]
Matches = Callable[[Object], bool]


@dataclass(frozen=True)
class WatchOptions:
    since: str | None  # None: start with every current object as ADDED
    initial_events_end: bool  # sendInitialEvents: mark the end of them with a BOOKMARK
    bookmarks: bool
    timeout: float
    bookmark_interval: float = 60.0
    idle_check: float = 2.0  # how often an idle watch checks whether its client is still there
    # as=PartialObjectMetadata: bookmarks are of that kind too, as every object of the stream is
    # (client-go's metadata informers decode each as one and give a watch up on any other kind).
    metadata_only: bool = False


def event_for(change: Change, matches: Matches) -> tuple[str, Object] | None:
    """The watch event a change means to a watcher with this filter (objects moving in/out of it too)."""
    new_matches = matches(change.new)
    if change.type == "ADDED":
        return ("ADDED", change.new) if new_matches else None
    old_matches = change.old is not None and matches(change.old)
    if change.type == "DELETED":
        return ("DELETED", change.new) if old_matches else None
    if old_matches and new_matches:
        return "MODIFIED", change.new
    if new_matches:
        return "ADDED", change.new
    if old_matches:
        return "DELETED", change.new
    return None


def bookmark(rv: str, initial_events_end: bool = False, *, metadata_only: bool = False) -> Object:
    metadata: Object = {"resourceVersion": rv}
    if initial_events_end:
        metadata["annotations"] = {"k8s.io/initial-events-end": "true"}
    if metadata_only:
        return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": metadata}
    return {"kind": FOO_HEALTHS.kind, "apiVersion": GROUP_VERSION, "metadata": metadata}


class _Stream:
    def __init__(self, response: web.StreamResponse, render: Render) -> None:
        self.response, self.render = response, render
        self.first = True

    async def send(self, type_: str, obj: Object) -> None:
        if type_ in ("ADDED", "MODIFIED", "DELETED"):
            obj = self.render(obj, self.first)
            self.first = False
        await self.response.write(orjson.dumps({"type": type_, "object": obj}) + b"\n")


async def serve_watch(
    request: web.Request, view: HealthView, matches: Matches, render: Render, options: WatchOptions
) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": JSON, "Cache-Control": "no-cache, private"})
    response.enable_chunked_encoding()
    await response.prepare(request)
    stream = _Stream(response, render)
    subscription: Subscription | None = None
    try:
        try:
            replay, subscription = view.subscribe(options.since)
        except Expired as err:
            await stream.send("ERROR", dict(failure(410, str(err), reason="Expired")))
            return response
        for change in replay:
            event = event_for(change, matches)
            if event is not None:
                await stream.send(*event)
        if options.initial_events_end and options.bookmarks:
            end = bookmark(view.resource_version, initial_events_end=True, metadata_only=options.metadata_only)
            await stream.send("BOOKMARK", end)
        await _live(request, view, subscription, stream, matches, options)
    except ConnectionError:
        pass  # the client went away
    finally:
        if subscription is not None:
            view.unsubscribe(subscription)
    try:
        await response.write_eof()
    except ConnectionError:
        pass
    return response


async def _live(
    request: web.Request,
    view: HealthView,
    subscription: Subscription,
    stream: _Stream,
    matches: Matches,
    options: WatchOptions,
) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + options.timeout
    next_bookmark = loop.time() + options.bookmark_interval
    while (now := loop.time()) < deadline:
        wait = min(deadline - now, options.idle_check)
        if options.bookmarks:
            wait = min(wait, max(next_bookmark - now, 0.0))
        try:
            change = await asyncio.wait_for(subscription.queue.get(), wait)
        except TimeoutError:
            if request.transport is None or request.transport.is_closing():
                return
            if options.bookmarks and loop.time() >= next_bookmark:
                await stream.send("BOOKMARK", bookmark(view.resource_version, metadata_only=options.metadata_only))
                next_bookmark = loop.time() + options.bookmark_interval
            continue
        if change is None:  # closed: shutdown, or this watcher fell too far behind
            if subscription.overflowed:
                log.warning("watch closed: client too slow", extra={"remote": request.remote})
            return
        event = event_for(change, matches)
        if event is not None:
            await stream.send(*event)
