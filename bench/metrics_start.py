"""Reviews while the metrics listener starts: aiohttp imported in a thread (what MetricsServer.start
does) vs in the event loop's own thread.

    .venv/bin/python -m bench.metrics_start [--repeat 4]

Each run is a fresh process on uvloop: an `asyncio.Protocol` server answering a canned
AdmissionReview (the shape of an admission port that needs no aiohttp), a client process sending
reviews back to back over one keep-alive connection, and, half a second in, ``MetricsServer.start``
on a port bound before. Printed: the longest review while it started, and the median.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import statistics
import subprocess
import sys
import time
from typing import cast

from hack.plane.cluster import free_port

from .report import say, table

_ANSWER = b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"u","allowed":true}}'
_RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
    len(_ANSWER),
    _ANSWER,
)

# Sends reviews for argv[2] seconds; prints "<sent at> <took>" per review, in seconds.
_CLIENT = """
import http.client, sys, time
connection = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]))
body = b'{"kind":"AdmissionReview","request":{"uid":"u"}}' * 20
end = time.perf_counter() + float(sys.argv[2])
while time.perf_counter() < end:
    sent = time.perf_counter()
    connection.request("POST", "/validate-foo", body, {"Content-Type": "application/json"})
    connection.getresponse().read()
    print(sent, time.perf_counter() - sent)
"""


class _Reviews(asyncio.Protocol):
    """Answers every complete POST (headers and Content-Length bytes) with the canned review."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is one without subclassing it
        self.buffer = b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            head, sep, rest = self.buffer.partition(b"\r\n\r\n")
            if not sep:
                return
            length = next(
                int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
            )
            if len(rest) < length:
                return
            self.buffer = rest[length:]
            self.transport.write(_RESPONSE)


async def _one_run(in_thread: bool) -> tuple[float, float, float]:
    """(seconds start() took, longest review meanwhile, median review meanwhile)."""
    from prometheus_client import CollectorRegistry

    from serving.metricsserver import MetricsOptions, MetricsServer

    loop = asyncio.get_running_loop()
    server = await loop.create_server(_Reviews, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _CLIENT, str(port), "1.2", stdout=subprocess.PIPE
    )
    metrics = MetricsServer(MetricsOptions(host="127.0.0.1", port=free_port()), CollectorRegistry())
    metrics.bind()
    await asyncio.sleep(0.5)
    started = time.perf_counter()
    if not in_thread:
        importlib.import_module("aiohttp.web")  # what start() would do without its thread
    await metrics.start()
    ended = time.perf_counter()
    out, _ = await client.communicate()
    await metrics.stop()
    server.close()
    reviews = [tuple(map(float, line.split())) for line in out.decode().splitlines()]
    meanwhile = [took for sent, took in reviews if started - 0.05 <= sent <= ended]
    if not meanwhile:
        raise RuntimeError("no review was sent while the listener started: the client failed")
    return ended - started, max(meanwhile), statistics.median(meanwhile)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.metrics_start", description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=4)
    parser.add_argument("--one", choices=["thread", "loop"], help=argparse.SUPPRESS)  # a single run, in this process
    args = parser.parse_args(argv)
    if args.one:
        import uvloop

        print(*uvloop.run(_one_run(args.one == "thread")))
        return 0
    say(f"metrics listener start while reviews flow, {args.repeat} runs each, alternating")
    results: dict[str, list[tuple[float, ...]]] = {"thread": [], "loop": []}
    for _ in range(args.repeat):
        for where in results:
            out = subprocess.run(
                [sys.executable, "-m", "bench.metrics_start", "--one", where],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            results[where].append(tuple(float(value) for value in out.split()))
    rows = [
        [
            f"aiohttp imported in {'a thread' if where == 'thread' else 'the loop'}",
            statistics.median(run[0] for run in runs) * 1000,
            max(run[1] for run in runs) * 1000,
            min(run[1] for run in runs) * 1000,
            statistics.median(run[2] for run in runs) * 1000,
        ]
        for where, runs in results.items()
    ]
    print("\nReviews while the metrics listener starts (ms)")
    print(table(["where", "start() took", "longest review (max)", "longest review (min)", "median review"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
