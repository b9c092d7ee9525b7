"""CPU of one review on the admission port's fast path, in process: no TLS, no sockets, no client.

    .venv/bin/python -m bench.fastpath [--reviews 20000] [--rounds 5]

Feeds a whole `/validate-foo` request (head and body in one read, as kube-apiserver writes it) to
a ``serving.reviews.protocol.Connection`` over a transport that drops what it is given, and times the
``data_received`` calls with the process's CPU clock: what the server's own code costs a
review, without the machine's network and TLS noise that bench.admission measures too. Run it
from two checkouts (e.g. `cd /tmp/main && python -m bench.fastpath`) to compare a change.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import orjson

from attacks.foos import create_review, new_foo
from bench.sink import Sink
from webhook.app import Settings, build_app

from .report import save, say


async def _round(reviews: int) -> float:
    """µs of process CPU per review over ``reviews`` reviews on one keep-alive connection."""
    from serving.reviews.protocol import Connection
    from serving.reviews.server import ReviewServer

    webhook = build_app(Settings())
    server = ReviewServer(webhook.reviews)
    body = orjson.dumps(create_review(new_foo(defaulted=True)))
    request = (
        b"POST /validate-foo?timeout=5s HTTP/1.1\r\nHost: foo-operator-webhook.default.svc:443\r\n"
        b"Content-Type: application/json\r\nAccept: application/json, */*\r\n"
        b"Content-Length: %d\r\n\r\n" % len(body) + body
    )
    conn = Connection(webhook.reviews, server.connections)
    sink = Sink()
    conn.connection_made(sink)
    for _ in range(200):  # warm-up
        conn.data_received(request)
    started = time.process_time()
    for _ in range(reviews):
        conn.data_received(request)
    spent = time.process_time() - started
    conn.connection_lost(None)
    return spent / reviews * 1e6


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.fastpath", description=__doc__.split("\n")[0])
    parser.add_argument("--reviews", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    rounds = [asyncio.run(_round(args.reviews)) for _ in range(args.rounds)]
    say(
        f"fast path: least {min(rounds):.1f}, median {statistics.median(rounds):.1f} µs/review "
        f"of {args.rounds} rounds; all: " + ", ".join(f"{r:.1f}" for r in rounds) + ")"
    )
    save("fastpath", {"settings": vars(args), "us_per_review": rounds, "median": statistics.median(rounds)})


if __name__ == "__main__":
    main()
