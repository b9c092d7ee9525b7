"""The gate's and the pool's bookkeeping under churn, read from inside a webhook's ReviewServer.

Runs the churn of bench.gate_attacks.churn and the stalls of bench.gate_attacks.gate_starve against a TLS
ReviewServer on this process's loop (asyncio's, or uvloop's with --uvloop) and samples: places
computing (cap 8), the handshake pool (cap 64), SSL objects in handshake (asyncio only), and
afterwards whether every place, queue entry and per-address record was given back.

    .venv/bin/python -m bench.gate_attacks.inprocess_churn --connections 1500 --seconds 20 [--uvloop]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import ssl
import tempfile
import time
from pathlib import Path

import uvloop

from serving.reviews.server import ReviewServer
from tests.component.certificates import serving_certificates
from tests.component.handshakes import handshakes_held
from webhook.app import Settings, build_app

from .churn import churn, client_hello
from .gate_starve import ATTACKERS, attempt, keep_stock


async def run(tmp: Path, connections: int, seconds: float, asyncio_loop: bool) -> None:
    errors: list[logging.LogRecord] = []

    class Catch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno >= logging.WARNING or record.exc_info:
                errors.append(record)

    logging.getLogger().addHandler(Catch())
    asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: errors.append(ctx))  # type: ignore[arg-type]
    certs = serving_certificates(tmp)
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(certs / "tls.crt", certs / "tls.key")
    server = ReviewServer(build_app(Settings()).reviews)
    await server.start("127.0.0.1", 0, ssl=server_context)
    client = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    port, gate = server.port, server.gate
    peaks = {"computing": 0, "pool": 0, "ssl": 0}
    stop = asyncio.Event()

    async def sample() -> None:
        while not stop.is_set():
            peaks["computing"] = max(peaks["computing"], len(gate.computing))
            peaks["pool"] = max(peaks["pool"], len(server.handshakes))
            if asyncio_loop:
                peaks["ssl"] = max(peaks["ssl"], handshakes_held())
            await asyncio.sleep(0.1)

    sampler = asyncio.create_task(sample())
    stockers = [asyncio.create_task(keep_stock(port, a, 3, stop, [0])) for a in ATTACKERS[:4]]
    opened, tasks = await churn(port, connections, seconds, client_hello())
    during = await asyncio.gather(*(attempt(port, client, "/readyz") for _ in range(5)))
    stop.set()
    await asyncio.gather(*stockers, *tasks, return_exceptions=True)
    await sampler
    end = time.monotonic() + 15
    while (gate.computing or server.handshakes) and time.monotonic() < end:
        await asyncio.sleep(0.1)
    print(f"opened {opened}; peaks {peaks}")
    print("honest during:", [(round(t, 2), s) for t, s in during])
    print(
        f"after: computing {len(gate.computing)} waiting {len(gate._waiting)} "
        f"last_turn {len(getattr(gate, '_last_turn', {}))} pool {len(server.handshakes)} "
        f"connections {len(server.connections)} ssl-in-handshake {handshakes_held() if asyncio_loop else '-'}"
    )
    print("warnings/errors/loop exceptions:", len(errors), [str(getattr(e, "msg", e))[:120] for e in errors[:5]])
    await server.stop(1.0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--connections", type=int, default=1500)
    parser.add_argument("--uvloop", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        factory = uvloop.new_event_loop if args.uvloop else asyncio.new_event_loop
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(run(Path(tmp), min(args.connections, 2000), min(args.seconds, 60), not args.uvloop))


if __name__ == "__main__":
    main()
