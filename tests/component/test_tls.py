"""The real server over TLS with certificates from `certs`, verified against the generated CA."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path

import aiohttp
import orjson
import pytest
import uvloop

from attacks.foos import admission_review
from attacks.objects import foo_v1
from hack.plane.cluster import free_port
from tests.component.certificates import serving_certificates
from webhook.app import Settings
from webhook.server import ServerOptions, serve

# The server starts in this process (certificates, TLS context, listener) and reloads its pair every
# 0.1 s: a second on a quiet machine. Only a server that never serves takes this.
READY_WITHIN = 60.0


async def _wait_ready(url: str, context: ssl.SSLContext) -> None:
    """Until /readyz answers 200 over TLS verified with ``context`` (its CA's pair being served)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + READY_WITHIN
    async with aiohttp.ClientSession() as session:
        while loop.time() < deadline:
            try:
                async with session.get(url + "/readyz", ssl=context) as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientConnectorError:
                pass
            await asyncio.sleep(0.05)
    raise AssertionError(f"webhook not ready within {READY_WITHIN:.0f}s")


@pytest.fixture
def cert_dir(tmp_path: Path) -> Path:
    return serving_certificates(tmp_path)


@pytest.fixture
async def server_url(cert_dir: Path) -> AsyncIterator[str]:
    """The real server (serve()) on a free port, ready, reloading certificates every 0.1 s."""
    port = free_port()
    stop = asyncio.Event()
    options = ServerOptions(cert_dir=cert_dir, bind_address="127.0.0.1", port=port, cert_reload_interval=0.1)
    server = asyncio.create_task(serve(options, Settings(), stop))
    try:
        await _wait_ready(f"https://127.0.0.1:{port}", ssl.create_default_context(cafile=str(cert_dir / "ca.crt")))
        yield f"https://127.0.0.1:{port}"
    finally:
        stop.set()
        await asyncio.wait_for(server, 10)


async def test_webhook_serves_https_verified_against_the_generated_ca(cert_dir: Path, server_url: str) -> None:
    context = ssl.create_default_context(cafile=str(cert_dir / "ca.crt"))
    by_name = server_url.replace("127.0.0.1", "localhost")
    await _wait_ready(by_name, context)
    async with aiohttp.ClientSession() as session:
        async with session.post(
            f"{by_name}/validate-foo", json=admission_review(foo_v1(replicas=11)), ssl=context
        ) as response:
            review = await response.json()
    assert review["response"]["status"]["reason"] == "Invalid"


async def test_a_client_that_does_not_trust_the_ca_is_refused(server_url: str) -> None:
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await session.get(f"{server_url}/healthz", ssl=ssl.create_default_context())


async def test_new_certificates_are_served_without_a_restart(cert_dir: Path, server_url: str) -> None:
    serving_certificates(cert_dir, "--force")
    new_context = ssl.create_default_context(cafile=str(cert_dir / "ca.crt"))
    await _wait_ready(server_url, new_context)  # refused until the new pair is served


# ---- an answer leaves at once: no 40 ms wait for a delayed ACK (issue #17) ------------------------
#
# Over TCP, a reply written in two pieces with Nagle's algorithm on waits for the client to ACK the
# first; clients delay that ACK (Linux: up to 40 ms), so such a server stalls ~40-50 ms on a kept-alive
# connection. Our server must never do that, on either event loop it runs on.

LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop,
    "uvloop": uvloop.new_event_loop,
}


@contextmanager
def server_on(loop_factory: Callable[[], asyncio.AbstractEventLoop], cert_dir: Path) -> Iterator[int]:
    """The real server (serve()) on its own thread and event loop; yields its port once it listens."""
    port = free_port()
    started: Future[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = Future()

    async def run() -> None:
        stop = asyncio.Event()
        started.set_result((asyncio.get_running_loop(), stop))
        await serve(ServerOptions(cert_dir=cert_dir, bind_address="127.0.0.1", port=port), Settings(), stop)

    thread = threading.Thread(target=lambda: asyncio.Runner(loop_factory=loop_factory).run(run()))
    thread.start()
    loop, stop = started.result(timeout=10)
    try:
        for _ in range(200):
            assert thread.is_alive(), "the server stopped before it listened"
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        yield port
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)


def _accepted_socket_nodelay(port: int, client: socket.socket) -> int:
    """TCP_NODELAY of this process's socket that the server accepted for ``client``."""
    for fd in os.listdir("/proc/self/fd"):
        try:
            sock = socket.socket(fileno=os.dup(int(fd)))
        except OSError:
            continue
        with sock:
            try:
                mine = sock.family == socket.AF_INET and sock.getsockname() == ("127.0.0.1", port)
                if mine and sock.getpeername() == client.getsockname():
                    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
            except OSError:
                continue
    raise AssertionError("the server's end of the connection was not found")


def _review_request(body: bytes) -> bytes:
    head = (
        f"POST /validate-foo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    )
    return head.encode() + b"\r\n" + body


def _records_of_one_answer(client: ssl.SSLObject, raw: socket.socket, incoming: ssl.MemoryBIO) -> int:
    """Read TLS records off ``raw`` until one whole HTTP answer decrypts; how many records it took."""
    records = 0
    pending = b""
    answer = b""
    while True:
        try:
            while chunk := client.read(65536):  # one record's plaintext a call: take all fed so far
                answer += chunk
        except ssl.SSLWantReadError:
            pass
        head, _, body = answer.partition(b"\r\n\r\n")
        lengths = [
            int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
        ]
        if lengths and len(body) >= lengths[0]:
            assert not pending, "more bytes after the answer"
            return records
        received = raw.recv(65536)
        assert received, "the server closed the connection before answering"
        pending += received
        while len(pending) >= 5 and len(pending) >= 5 + int.from_bytes(pending[3:5], "big"):
            size = 5 + int.from_bytes(pending[3:5], "big")
            incoming.write(pending[:size])
            pending = pending[size:]
            records += 1


@pytest.mark.parametrize("loop", LOOPS)
def test_an_answer_is_one_tls_record_on_a_no_delay_socket(cert_dir: Path, loop: str) -> None:
    context = ssl.create_default_context(cafile=str(cert_dir / "ca.crt"))
    context.maximum_version = ssl.TLSVersion.TLSv1_2  # no session tickets arriving after the handshake
    request = _review_request(orjson.dumps(admission_review(foo_v1())))
    with server_on(LOOPS[loop], cert_dir) as port, socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        client = context.wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
        while True:
            try:
                client.do_handshake()
                break
            except ssl.SSLWantReadError:
                raw.sendall(outgoing.read())
                incoming.write(raw.recv(65536))
        raw.sendall(outgoing.read())

        assert _accepted_socket_nodelay(port, raw) == 1
        for _ in range(3):  # kept alive: every answer, not only the first
            client.write(request)
            raw.sendall(outgoing.read())
            records = _records_of_one_answer(client, raw, incoming)
            assert records == 1, f"an answer in {records} TLS records: a delayed ACK can hold back the last"
