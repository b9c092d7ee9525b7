"""Insights' attacks of issue #25 (findings 10-15), each as a coroutine of the mix.

Requests that need a user carry the front-proxy client certificate and X-Remote-* headers, as the
aggregator's do (``Target.client_context``); the rest come without a certificate at all, as
anyone who reaches the pod's port may.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl

import orjson

from .foos import new_foo
from .harness import Attack, MiB, Tally, Target, close, connect, exchange, many, post, repeat, status_of
from .webhook import DEEP, dense, nested_lists, with_deep

GROUP_VERSION = "insights.samplecontroller.k8s.io/v1alpha1"
NAMESPACE = "default"
FOOHEALTHS = f"/apis/{GROUP_VERSION}/namespaces/{NAMESPACE}/foohealths"
FOOREVIEWS = f"/apis/{GROUP_VERSION}/namespaces/{NAMESPACE}/fooreviews"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


def foo_review(foo: object) -> dict[str, object]:
    return {"apiVersion": GROUP_VERSION, "kind": "FooReview", "metadata": {"name": "check"}, "spec": {"object": foo}}


def get(path: str, target: Target, *, accept: str = "application/json") -> bytes:
    head = f"GET {path} HTTP/1.1\r\nHost: {target.host}\r\nAccept: {accept}\r\n".encode()
    return head + target.head_lines() + b"Connection: close\r\n\r\n"


def padded_head(headers: int, *, finished: bool) -> bytes:
    """A GET head with ``headers`` fields of 8 KiB each; unfinished: no blank line at its end."""
    field = b"X-Pad: " + b"p" * (8 * 1024 - 9) + b"\r\n"
    return b"GET /apis HTTP/1.1\r\nHost: insights\r\n" + field * headers + (b"\r\n" if finished else b"")


async def _held(target: Target, tally: Tally, stop: asyncio.Event, data: bytes, *, client_cert: bool = False) -> None:
    """Send ``data`` on a new connection and hold it until the server closes it or we stop."""
    if (connection := await connect(target, tally, stop, client_cert=client_cert)) is None:
        return
    reader, writer = connection
    tally.notes["held now"] += 1
    try:
        writer.write(data)
        with contextlib.suppress(OSError, ssl.SSLError):
            await writer.drain()
        answer = asyncio.ensure_future(reader.readline())
        stopping = asyncio.ensure_future(stop.wait())
        await asyncio.wait([answer, stopping], return_when=asyncio.FIRST_COMPLETED)
        if answer.done():
            tally.answers["closed" if answer.exception() else status_of(answer.result())] += 1
        else:
            tally.answers["still held at the end"] += 1
        for task in (answer, stopping):
            task.cancel()
    finally:
        tally.notes["held now"] -= 1
        writer.transport.abort()


async def unfinished_heads(target: Target, tally: Tally, stop: asyncio.Event, connections: int = 150) -> None:
    """Finding 10: connections without a certificate send 126 x 8 KiB header lines, never the end."""
    data = padded_head(126, finished=False)

    async def one(_: int) -> None:
        await repeat(stop, lambda: _held(target, tally, stop, data))

    await many(connections, one)


async def oversized_heads(target: Target, tally: Tally, stop: asyncio.Event) -> None:
    """Finding 11: bursts of 40 heads of 1,000 x 8 KiB header lines (refused with 400)."""
    request = padded_head(1000, finished=True)

    async def one(_: int) -> None:
        await exchange(target, request, tally, quiet=10)

    async def burst() -> None:
        await many(40, one)

    await repeat(stop, burst, pause=1.0)


async def large_reviews(target: Target, tally: Tally, stop: asyncio.Event) -> None:
    """Finding 12: 8 MiB FooReviews of dense `{},` (three at once)."""
    request = post(FOOREVIEWS, dense(foo_review(new_foo()), 8 * MiB), target)

    async def one(_: int) -> None:
        await repeat(stop, lambda: exchange(target, request, tally, client_cert=True, quiet=30))

    await many(3, one)


async def whole_tables(target: Target, tally: Tally, stop: asyncio.Event) -> None:
    """Finding 13: eight Tables at once with includeObject=Object over every FooHealth."""
    request = get(f"{FOOHEALTHS}?includeObject=Object", target, accept=TABLE)

    async def one(_: int) -> None:
        async def round_() -> None:
            _, size = await exchange(target, request, tally, client_cert=True, quiet=30)
            tally.notes["largest answer (bytes)"] = max(tally.notes["largest answer (bytes)"], size)

        await repeat(stop, round_)

    await many(8, one)


async def watches_and_idle(target: Target, tally: Tally, stop: asyncio.Event, connections: int = 1000) -> None:
    """Finding 14: watches (no cap) and half-sent requests (no deadline), half each."""
    watch = get(f"{FOOHEALTHS}?watch=1", target)
    half = f"GET {FOOHEALTHS} HTTP/1.1\r\nHost: {target.host}\r\n".encode()

    async def watcher(_: int) -> None:
        await repeat(stop, lambda: _held(target, tally, stop, watch, client_cert=True))

    async def idler(_: int) -> None:
        await repeat(stop, lambda: _held(target, tally, stop, half))

    await asyncio.gather(many(connections // 2, watcher), many(connections - connections // 2, idler))


def _nested_review(depth: int) -> bytes:
    foo = new_foo()
    foo["spec"]["replicas"] = DEEP
    return with_deep(foo_review(foo), nested_lists(depth))


async def _disconnect_mid_body(target: Target, tally: Tally) -> None:
    request = post(FOOREVIEWS, orjson.dumps(foo_review(new_foo())), target)
    if (connection := await connect(target, tally, client_cert=True)) is None:
        return
    _, writer = connection
    writer.write(request[: len(request) - 40])
    with contextlib.suppress(OSError, ssl.SSLError):
        await writer.drain()
    await asyncio.sleep(0.1)
    tally.answers["disconnected mid-body"] += 1
    await close(writer)


async def malformed(target: Target, tally: Tally, stop: asyncio.Event) -> None:
    """Finding 15: resourceVersion in non-ASCII digits, deep FooReviews, a client gone mid-body.
    A 200 whose chunked body breaks off is noted: the 500 came after the head."""
    deep = [(FOOREVIEWS, _nested_review(depth)) for depth in (260, 600, 900)]

    async def round_() -> None:
        for rv in ("%C2%B2", "%D9%A3"):  # '²' and '٣' (Arabic-Indic three)
            request = get(f"{FOOHEALTHS}?resourceVersion={rv}&resourceVersionMatch=NotOlderThan", target)
            status, _ = await exchange(target, request, tally, client_cert=True)
            tally.notes[f"resourceVersion {rv}: {status}"] += 1
            watch = get(f"{FOOHEALTHS}?watch=1&resourceVersion={rv}&timeoutSeconds=1", target)
            status, _ = await exchange(target, watch, tally, client_cert=True, quiet=3)
            tally.notes[f"watch resourceVersion {rv}: {status}"] += 1
        for path, body in deep:
            status, _ = await exchange(target, post(path, body, target), tally, client_cert=True)
            if status.startswith("5"):
                tally.notes["5xx on a deep FooReview"] += 1
        await _disconnect_mid_body(target, tally)

    await repeat(stop, round_, pause=0.5)


# Finding number -> attack.
INSIGHTS_ATTACKS: dict[int, Attack] = {
    10: unfinished_heads,
    11: oversized_heads,
    12: large_reviews,
    13: whole_tables,
    14: watches_and_idle,
    15: malformed,
}
