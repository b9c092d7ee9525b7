"""Churn the handshake pool: connections that leave mid-handshake in every way, from 8 addresses.

Kinds (round robin): a reset after a whole ClientHello; a reset after the server's first flight;
one byte then a close; a bare connect then a reset; a whole ClientHello and then nothing (held
until the server drops it). Samples the server's descriptors throughout; afterwards compares
them with before, checks that honest requests still pass, and greps the log for tracebacks.

    .venv/bin/python -m bench.gate_attacks.churn --connections 2000 --seconds 30
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import ssl
import struct
import tempfile
import time
from pathlib import Path

from bench import servers
from bench.attacks import begun_handshake
from bench.report import LOGS_DIR

from .gate_starve import ATTACKERS, attempt, connected_from, descriptors


def client_hello() -> bytes:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    _, _, outgoing = begun_handshake(context)
    return outgoing.read()


def _reset(sock: socket.socket) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


async def one(port: int, source: str, kind: int, hello: bytes) -> None:
    loop = asyncio.get_running_loop()
    if (sock := await connected_from(port, source)) is None:
        return
    try:
        if kind == 0:
            await loop.sock_sendall(sock, hello)
            _reset(sock)
        elif kind == 1:
            await loop.sock_sendall(sock, hello)
            async with asyncio.timeout(10):
                await loop.sock_recv(sock, 1)
            _reset(sock)
        elif kind == 2:
            await loop.sock_sendall(sock, hello[:1])
            sock.close()
        elif kind == 3:
            _reset(sock)
        else:
            await loop.sock_sendall(sock, hello)
            async with asyncio.timeout(12):
                while await loop.sock_recv(sock, 4096):
                    pass
            sock.close()
    except (OSError, TimeoutError):
        sock.close()


async def churn(port: int, connections: int, seconds: float, hello: bytes) -> tuple[int, set[asyncio.Task[None]]]:
    """Open up to ``connections`` of every kind in turn, spread over half of ``seconds`` at most;
    how many were opened, and those still under way."""
    tasks: set[asyncio.Task[None]] = set()
    began = time.monotonic()
    opened = 0
    while opened < connections and time.monotonic() - began <= seconds:
        task = asyncio.create_task(one(port, ATTACKERS[opened % len(ATTACKERS)], opened % 5, hello))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        opened += 1
        await asyncio.sleep(seconds / connections / 2)
    return opened, tasks


async def run(port: int, context: ssl.SSLContext, connections: int, seconds: float, pid: int, log: Path) -> None:
    hello = client_hello()
    before, peak = descriptors(pid), 0
    stop = asyncio.Event()

    async def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, descriptors(pid))
            await asyncio.sleep(0.05)

    sampler = asyncio.create_task(sample())
    began = time.monotonic()
    opened, tasks = await churn(port, connections, seconds, hello)
    during = await asyncio.gather(*(attempt(port, context, "/readyz") for _ in range(5)))
    await asyncio.gather(*tasks, return_exceptions=True)
    await asyncio.sleep(2)
    stop.set()
    await sampler
    print(
        f"opened {opened} in {time.monotonic() - began:.1f}s; server fds before {before}, peak {peak}, after {descriptors(pid)}"
    )
    print("honest during:", [(round(t, 2), s) for t, s in during])
    print(
        "honest after:",
        [(round(t, 2), s) for t, s in await asyncio.gather(*(attempt(port, context, "/readyz") for _ in range(5)))],
    )
    text = log.read_text()
    print("tracebacks in the log:", text.count("Traceback"), "InvalidState:", text.count("InvalidState"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--connections", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cert_dir = servers.serving_certs(Path(tmp))
        with servers.ours(cert_dir, pin=False) as server:
            port = int(server.url.rsplit(":", 1)[1])
            assert server.pid is not None
            asyncio.run(
                run(port, servers.client_context(cert_dir), min(args.connections, 2000), min(args.seconds, 60),
                    server.pid, LOGS_DIR / "ours.log")
            )  # fmt: skip


if __name__ == "__main__":
    main()
