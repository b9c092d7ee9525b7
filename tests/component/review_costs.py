"""What one review costs, counted: instructions on the in-process path, page faults over TLS.

Counts, not times, so a slow or busy machine moves none of them:

* **Instructions per review** (``valgrind --tool=callgrind``): every endpoint's request, as
  kube-apiserver writes it, fed to a ``serving.reviews.protocol.Connection`` in 64 KiB reads
  over a transport that takes every write — llhttp, the budget, the parse, the rule, the answer —
  with no socket and no TLS. One process does every phase; calling ``os.getppid()`` (nothing
  else here calls ``getppid``) makes callgrind dump the counts so far (``--dump-before``), so
  each phase's instructions are a dump of their own.
* **Page faults per review** over the real thing: the webhook process, TLS on loopback, loaded
  by wrk's keep-alive connections; minor faults from ``/proc/<pid>/stat``. A review that maps
  memory of its own (an mmap for a read buffer, unmapped again) faults at least once; one that
  reuses the heap faults never. That is the cost user-space instructions cannot see: 4dc2f08
  fixed glibc's mmap threshold at 128 KiB while uvloop's TLS layer allocated 256 KiB per read,
  and admission lost 30% with not one instruction more (bench/README.md, "Admission back
  ahead of Go").

``tests/component/review_costs.json`` holds the figures and what they were counted with; the
test holds a change to within 5% of them. Count them again after a change that moves them on
purpose, and say why in the commit:

    .venv/bin/python -m tests.component.review_costs --record
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

FIGURES = Path(__file__).with_name("review_costs.json")
REPO = Path(__file__).resolve().parents[2]
# What the in-process path's instructions depend on besides our code.
SHAPING = ("orjson", "httptools", "pydantic", "pydantic_core", "uvloop", "prometheus_client")
# Reviews counted per endpoint: enough that a review's share of the phase's fixed cost is small.
REVIEWS = {"validate": 400, "invalid": 400, "mutate": 400, "convert": 400, "convert 1,000": 5}
TOLERANCE = 0.05
_READ = 64 * 1024  # what one read hands the connection (serving.reviews.protocol._READ_SIZE)


def fingerprint() -> dict[str, str]:
    """The interpreter and the libraries the counts were made with."""
    versions = {name: importlib.metadata.version(name.replace("_", "-")) for name in SHAPING}
    return {"python": platform.python_version(), "machine": platform.machine(), **versions}


def requests() -> dict[str, bytes]:
    """Each endpoint's request, head and body, as kube-apiserver writes it."""
    from attacks.foos import bad_foo, conversion_of, create_review, dumps
    from bench.admission import bodies
    from fooapi import LEGACY_API_VERSION

    admission = bodies()
    by_endpoint = {
        "validate": ("/validate-foo?timeout=10s", admission["/validate-foo"]),
        "invalid": ("/validate-foo?timeout=10s", dumps(create_review(bad_foo()))),
        "mutate": ("/mutate-foo?timeout=10s", admission["/mutate-foo"]),
        "convert": ("/convert?timeout=30s", admission["/convert"]),
        "convert 1,000": ("/convert?timeout=30s", dumps(conversion_of(1_000, LEGACY_API_VERSION))),
    }
    return {
        name: (
            f"POST {path} HTTP/1.1\r\nHost: foo-operator-webhook.foo-system.svc:443\r\n"
            "Content-Type: application/json\r\nAccept: application/json, */*\r\nUser-Agent: kube-apiserver-admission\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        + body
        for name, (path, body) in by_endpoint.items()
    }


def _reads(request: bytes) -> Iterator[memoryview]:
    view = memoryview(request)
    for start in range(0, len(view), _READ):
        yield view[start : start + _READ]


async def _phases(settings_limit_mib: int) -> None:
    """Warm every endpoint up, then count each one's reviews as a phase of its own."""
    from bench.sink import Sink
    from serving.reviews.protocol import Connection
    from serving.reviews.server import ReviewServer
    from webhook.app import Settings, build_app

    webhook = build_app(Settings(in_flight_budget=settings_limit_mib * 1024 * 1024))
    server = ReviewServer(webhook.reviews)
    conn = Connection(webhook.reviews, server.connections)
    sink = Sink()
    conn.connection_made(sink)
    bodies = requests()

    async def review(request: bytes) -> None:
        written = sink.written
        for piece in _reads(request):
            conn.data_received(piece)
        while conn.queue or sink.written == written:  # answered, whether at once or by a task
            await asyncio.sleep(0)

    for request in bodies.values():
        for _ in range(100):
            await review(request)
    for name, request in bodies.items():
        os.getppid()  # callgrind dumps what came before: the next dump is this phase alone
        for _ in range(REVIEWS[name]):
            await review(request)
    os.getppid()
    conn.connection_lost(None)


def _drive() -> None:
    """The process callgrind runs."""
    import uvloop

    uvloop.run(_phases(2048))


def count_instructions() -> dict[str, float]:
    """Instructions per review of each endpoint on the in-process path (callgrind)."""
    with tempfile.TemporaryDirectory(prefix="foo-costs-") as tmp:
        out = Path(tmp) / "callgrind.out"
        env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": str(REPO)}
        subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--dump-before=getppid",
                "--dump-instr=no",
                f"--callgrind-out-file={out}",
                sys.executable,
                "-m",
                "tests.component.review_costs",
                "--drive",
            ],  # fmt: skip
            env=env,
            cwd=REPO,
            check=True,
            capture_output=True,
            timeout=1800,
        )
        dumps = sorted(Path(tmp).glob("callgrind.out.*"), key=lambda p: int(p.name.rsplit(".", 1)[1]))
        totals = [_total(dump) for dump in dumps]
    # Dump 1 is start-up and warm-up; dump k+1 is endpoint k's reviews; the last, the exit.
    names = list(REVIEWS)
    if len(totals) < len(names) + 1:
        raise RuntimeError(f"callgrind wrote {len(totals)} dumps, expected {len(names) + 2}")
    return {name: totals[i + 1] / REVIEWS[name] for i, name in enumerate(names)}


def _total(dump: Path) -> int:
    match = re.search(r"^(?:summary|totals): (\d+)", dump.read_text(), re.M)
    if match is None:
        raise RuntimeError(f"no totals in {dump}")
    return int(match.group(1))


def count_page_faults(seconds: float = 3.0, tree: Path | None = None) -> dict[str, float]:
    """Minor page faults per review of the webhook process over TLS under wrk's load."""
    from attacks.foos import bad_foo, create_review, dumps
    from bench import servers
    from bench.admission import bodies
    from bench.load import run_wrk

    admission = bodies()
    loads = {
        "validate": ("/validate-foo", admission["/validate-foo"]),
        "invalid": ("/validate-foo", dumps(create_review(bad_foo()))),
        "mutate": ("/mutate-foo", admission["/mutate-foo"]),
        "convert": ("/convert", admission["/convert"]),
    }
    faults: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="foo-costs-") as tmp:
        cert_dir = servers.serving_certs(Path(tmp))
        with servers.ours(cert_dir, pin=False, tree=tree) as server:
            for name, (path, body) in loads.items():
                run_wrk(server.url + path, body, seconds=1.0, connections=8)  # warm-up
                before = _minor_faults(server.pid)
                result = run_wrk(server.url + path, body, seconds=seconds, connections=8)
                faults[name] = (_minor_faults(server.pid) - before) / max(result.requests, 1)
    return faults


def _minor_faults(pid: int | None) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[7])


def load_figures() -> dict[str, Any]:
    figures: dict[str, Any] = json.loads(FIGURES.read_text())
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.component.review_costs", description=__doc__.split("\n")[0])
    parser.add_argument("--record", action="store_true", help=f"count, and write the figures to {FIGURES.name}")
    parser.add_argument("--drive", action="store_true", help=argparse.SUPPRESS)  # what callgrind runs
    args = parser.parse_args(argv)
    if args.drive:
        _drive()
        return 0
    figures = {
        "counted_with": fingerprint(),
        "instructions_per_review": {k: round(v) for k, v in count_instructions().items()},
    }
    print(json.dumps(figures, indent=2))
    if args.record:
        FIGURES.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
