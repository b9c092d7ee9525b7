"""What every attack of the mix shares: whom it aims at, what it tallies, raw HTTP/1.1 over TLS.

An attack is a coroutine that repeats one hostile request shape until ``stop`` is set; it counts
what it was answered (status codes, resets) in its ``Tally`` and never raises. The raw helpers
write bytes no HTTP client library would (trailers, half-sent heads, bodies never read).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

MiB = 1024 * 1024


@dataclass(frozen=True)
class Target:
    """A server's TLS address, with a context that trusts it and one that also presents a client
    certificate (insights' front-proxy: what the aggregator presents; None for the webhook)."""

    host: str
    port: int
    context: ssl.SSLContext
    client_context: ssl.SSLContext | None = None
    # Front-proxy headers sent with the client certificate: who the request claims to be.
    user_headers: tuple[tuple[str, str], ...] = ()
    # Where the kubelet's probes go (plain HTTP, --health-probe-bind-address); None: the serving port.
    probe_port: int | None = None
    # The address connections come from, as an attacking pod's come from its own and not from
    # kube-apiserver's; None: the kernel's choice.
    source: str | None = None

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"

    def head_lines(self) -> bytes:
        return b"".join(f"{name}: {value}\r\n".encode() for name, value in self.user_headers)


@dataclass
class Tally:
    """What one attack's requests were answered: ``"<status>"``, ``"reset"``, ``"timeout"``, ...;
    ``notes`` for what a status line does not say (two answers to one request, bytes of an answer)."""

    answers: Counter[str] = field(default_factory=Counter)
    notes: Counter[str] = field(default_factory=Counter)

    def server_errors(self) -> int:
        return sum(n for answer, n in self.answers.items() if answer.startswith("5"))


Attack = Callable[[Target, Tally, asyncio.Event], Coroutine[Any, Any, None]]


def begun_handshake(context: ssl.SSLContext) -> tuple[ssl.SSLObject, ssl.MemoryBIO, ssl.MemoryBIO]:
    """A client's TLS state driven by hand, its handshake begun: the ClientHello waits in the
    outgoing buffer (the third), the server's answer goes into the incoming one (the second)."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname="localhost")
    try:
        tls.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return tls, incoming, outgoing


async def open_tcp(target: Target, timeout: float = 10.0, receive_buffer: int | None = None) -> socket.socket:
    """A bare TCP connection (one that will never say anything, or the start of a TLS one)."""
    return await tcp_connection(
        target.host, target.port, source=target.source, timeout=timeout, receive_buffer=receive_buffer
    )


async def tcp_connection(
    host: str, port: int, *, source: str | None = None, timeout: float = 10.0, receive_buffer: int | None = None
) -> socket.socket:
    """A non-blocking TCP connection to ``host:port``, from ``source`` if given (an address of
    this machine: an attacker's own)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    if receive_buffer is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    try:
        if source is not None:
            sock.bind((source, 0))
        async with asyncio.timeout(timeout):
            await asyncio.get_running_loop().sock_connect(sock, (host, port))
    except BaseException:
        sock.close()
        raise
    return sock


async def open_tls(
    target: Target, *, client_cert: bool = False, receive_buffer: int | None = None, timeout: float = 10.0
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A TLS connection; ``receive_buffer`` shrinks the kernel's buffer (a client that does not read
    then holds the server's answer in the server, not in our socket)."""
    context = target.client_context if client_cert and target.client_context else target.context
    sock = await open_tcp(target, timeout, receive_buffer)
    # From here the transport owns the socket and closes it on failure: closing it here too would
    # close whatever new socket got its number in between.
    async with asyncio.timeout(timeout):
        return await asyncio.open_connection(sock=sock, ssl=context, server_hostname=target.host)


async def connect(
    target: Target, tally: Tally, stop: asyncio.Event | None = None, **options: Any
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    """``open_tls``, or None with the failure tallied (and a pause before the caller tries again)."""
    try:
        return await open_tls(target, **options)
    except (OSError, ssl.SSLError, TimeoutError) as err:
        tally.answers[f"connect {type(err).__name__}"] += 1
        if stop is not None:
            await hold(stop, 1)
        else:
            await asyncio.sleep(0.2)
        return None


def status_of(line: bytes) -> str:
    parts = line.split(b" ", 2)
    return parts[1].decode(errors="replace") if len(parts) > 1 and line.startswith(b"HTTP/") else "closed"


async def read_answer(reader: asyncio.StreamReader, timeout: float) -> tuple[str, int]:
    """(status, bytes) of everything the server writes until it closes, or goes quiet: ``timeout``
    before the first byte, a second after it (a server may keep the connection open)."""
    first = b""
    size = 0
    with contextlib.suppress(TimeoutError, OSError, ssl.SSLError, asyncio.IncompleteReadError):
        while True:
            async with asyncio.timeout(timeout if not first else 1.0):
                chunk = await reader.read(65536)
            if not chunk:
                break
            first = first or chunk
            size += len(chunk)
    return status_of(first.split(b"\r\n", 1)[0]), size


async def close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(OSError, ssl.SSLError, TimeoutError):
        async with asyncio.timeout(2):
            await writer.wait_closed()


async def exchange(
    target: Target,
    request: bytes,
    tally: Tally,
    *,
    client_cert: bool = False,
    quiet: float = 10.0,
) -> tuple[str, int]:
    """Send ``request`` on a new connection, read until the server closes or goes quiet; tally it."""
    if (connection := await connect(target, tally, client_cert=client_cert)) is None:
        return "connect", 0
    reader, writer = connection
    try:
        writer.write(request)
        await writer.drain()
        status, size = await read_answer(reader, quiet)
    except (OSError, ssl.SSLError) as err:
        status, size = f"reset {type(err).__name__}", 0
    finally:
        await close(writer)
    tally.answers[status] += 1
    return status, size


def post(path: str, body: bytes, target: Target, *, extra: str = "", content_length: int | None = None) -> bytes:
    """A POST request's bytes (head and ``body``); ``content_length`` declares another length."""
    length = len(body) if content_length is None else content_length
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {target.host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n{extra}"
    ).encode()
    return head + target.head_lines() + b"Connection: close\r\n\r\n" + body


async def repeat(stop: asyncio.Event, once: Callable[[], Awaitable[object]], pause: float = 0.0) -> None:
    """``once()`` again and again until ``stop``; what one round raises is the server's doing only
    when it is an OSError, so anything else goes up (a harness bug must not look like a result)."""
    while not stop.is_set():
        await once()
        if pause:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(pause):
                    await stop.wait()


async def hold(stop: asyncio.Event, seconds: float) -> None:
    """Wait ``seconds`` or until ``stop``, whichever is first."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await stop.wait()


async def many(count: int, attack: Callable[[int], Awaitable[None]]) -> None:
    """``count`` copies of ``attack`` at once (each gets its index)."""
    await asyncio.gather(*(attack(i) for i in range(count)))
