"""Run as a program: a TLS webhook on uvloop, as in the pod, under a flood of bare connects cut
at once or a moment later, some after a few bytes; then one real client asks /healthz.

Its own process, because what it guards against (a reader left registered for a descriptor the
next accept reuses) aborts the process inside libuv.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import uvloop

from serving.reviews.server import ADMISSION_PORT, ReviewServer
from webhook.app import Settings, build_app

from .certificates import serving_certificates


async def _flood(port: int, connects: int) -> None:
    loop = asyncio.get_running_loop()
    for i in range(connects):
        sock = socket.socket()
        sock.setblocking(False)
        try:
            await loop.sock_connect(sock, ("127.0.0.1", port))
            if i % 3 == 0:
                await loop.sock_sendall(sock, b"\x16\x03\x01")  # the start of a ClientHello
        except OSError:
            pass
        if i % 2:
            sock.close()
        else:
            loop.call_later(0.01, sock.close)
        if i % 10 == 0:
            await asyncio.sleep(0)


async def main() -> None:
    certs = serving_certificates(Path(tempfile.mkdtemp()))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certs / "tls.crt", certs / "tls.key")
    webhook = build_app(Settings(connections=replace(ADMISSION_PORT, max_connections=4, max_handshakes=4)))
    server = ReviewServer(webhook.reviews)
    await server.start("127.0.0.1", 0, ssl=context)
    try:
        await asyncio.gather(*(_flood(server.port, 600) for _ in range(8)))
        await asyncio.sleep(0.5)
        client = ssl.create_default_context(cafile=str(certs / "ca.crt"))
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", server.port, ssl=client, server_hostname="127.0.0.1"
        )
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        sys.stdout.write((await asyncio.wait_for(reader.read(12), timeout=10)).decode())
        writer.close()
    finally:
        await server.stop(1.0)


if __name__ == "__main__":
    uvloop.run(main())
