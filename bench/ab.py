"""The webhook at a git ref against the work tree, alternated: is the work tree as fast as REF?

    .venv/bin/python -m bench.ab main [--pairs 4] [--seconds 6] [--posts 10]

REF's packages are exported (``git archive``) into a temporary directory and run by this
interpreter with these dependencies, so only the code differs. Each pair starts both webhooks
one after the other, in alternating order (REF first in even pairs), each pinned to core 0 with
wrk on core 1 (bench.load), and loads every endpoint in turn: a valid and an invalid
`/validate-foo`, `/mutate-foo`, a one-object `/convert` (wrk, 32 keep-alive connections, after
a warm-up), and one ConversionReview of 10,000 Foos posted ``--posts`` times on one keep-alive
connection. Per endpoint it prints the median over the pairs of work tree ÷ REF — of req/s, of
the 10,000-Foo review's speed (REF's seconds ÷ ours), and of server CPU per request (REF's ÷
ours: above 1 is cheaper) — with the lowest and highest pair beside it: a spread wider than the
effect says the machine was too busy to tell. Run it against main before resolving any issue
that touches serving/, webhook/ or apimachinery/ (bench/README.md, "A/B against main").
"""

from __future__ import annotations

import argparse
import http.client
import os
import statistics
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from attacks.foos import bad_foo, conversion_of, create_review, dumps
from fooapi import LEGACY_API_VERSION

from . import servers
from .admission import bodies
from .load import cores, run_wrk
from .report import REPO, fmt, save, say, table

BIG_CONVERSION = "convert 10,000"


def wrk_bodies() -> dict[str, tuple[str, bytes]]:
    """Endpoint name -> (path, body), the bodies bench.admission loads."""
    admission = bodies()
    return {
        "validate": ("/validate-foo", admission["/validate-foo"]),
        "invalid": ("/validate-foo", dumps(create_review(bad_foo()))),
        "mutate": ("/mutate-foo", admission["/mutate-foo"]),
        "convert": ("/convert", admission["/convert"]),
    }


def export(ref: str, into: Path) -> Path:
    """The tree at ``ref`` (its committed files), unpacked under ``into``."""
    commit = subprocess.run(
        ["git", "rev-parse", "--verify", f"{ref}^{{commit}}"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.strip()
    archive = into / "ref.tar"
    subprocess.run(["git", "archive", "--format=tar", "-o", str(archive), commit], cwd=REPO, check=True)
    tree = into / commit[:12]
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    archive.unlink()
    return tree


def load_side(server: servers.Server, cert_dir: Path, args: argparse.Namespace, big: bytes) -> dict[str, Any]:
    """Every endpoint of one running webhook: req/s and CPU per request, and the big review's time."""
    measured: dict[str, Any] = {}
    for name, (path, body) in wrk_bodies().items():
        url = server.url + path
        run_wrk(url, body, seconds=1.0, connections=args.connections)
        cpu = server.cpu_seconds()
        result = run_wrk(url, body, seconds=args.seconds, connections=args.connections)
        cpu = server.cpu_seconds() - cpu
        measured[name] = {
            "rps": result.rps,
            "p99_ms": result.p99_ms,
            "errors": result.errors,
            "cpu_us": cpu / max(result.requests, 1) * 1e6,
        }
    measured[BIG_CONVERSION] = post_repeatedly(server, cert_dir, big, args.posts)
    return measured


def post_repeatedly(server: servers.Server, cert_dir: Path, body: bytes, posts: int) -> dict[str, Any]:
    """``posts`` timed POSTs of ``body`` to /convert on one keep-alive connection, after one untimed."""
    host, port = server.url.removeprefix("https://").rsplit(":", 1)
    conn = http.client.HTTPSConnection(host, int(port), context=servers.client_context(cert_dir), timeout=120)
    affinity = os.sched_getaffinity(0)
    _, load_core = cores()
    if load_core is not None:
        os.sched_setaffinity(0, {int(load_core)})  # the client beside wrk, off the server's core
    times: list[float] = []
    try:
        cpu = 0.0
        for attempt in range(posts + 1):
            if attempt == 1:
                cpu = server.cpu_seconds()
            began = time.perf_counter()
            conn.request("POST", "/convert", body=body, headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            answer = response.read()
            if response.status != 200:
                raise RuntimeError(f"{server.name} /convert: HTTP {response.status}: {answer[:300]!r}")
            if attempt:
                times.append(time.perf_counter() - began)
        cpu = server.cpu_seconds() - cpu
    finally:
        conn.close()
        os.sched_setaffinity(0, affinity)
    seconds = statistics.median(times)
    return {"seconds": seconds, "rps": 1 / seconds, "cpu_us": cpu / posts * 1e6, "runs": times}


def spread(values: list[float]) -> str:
    return f"{fmt(statistics.median(values), 3)} [{fmt(min(values), 3)}, {fmt(max(values), 3)}]"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ab", description=__doc__.split("\n")[0])
    parser.add_argument("ref", help="the git ref to compare the work tree against (e.g. main)")
    parser.add_argument("--pairs", type=int, default=4, help="REF/work-tree pairs, order alternating")
    parser.add_argument("--seconds", type=float, default=6.0, help="each wrk run, after a 1 s warm-up")
    parser.add_argument("--connections", type=int, default=32, help="wrk's keep-alive connections")
    parser.add_argument("--posts", type=int, default=10, help="timed posts of the 10,000-Foo review")
    args = parser.parse_args(argv)

    server_core, load_core = cores()
    say(f"A/B: {args.ref} vs the work tree, {args.pairs} pairs; server on core {server_core}, load on {load_core}")
    big = dumps(conversion_of(10_000, LEGACY_API_VERSION))
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="foo-bench-ab-") as tmp:
        ref_tree = export(args.ref, Path(tmp))
        cert_dir = servers.serving_certs(Path(tmp) / "certs")
        sides: dict[str, Callable[[], servers.Server]] = {
            "ref": lambda: servers.ours(cert_dir, tree=ref_tree, name="ab-ref", args=servers.ROOM_FOR_BIG_REVIEWS),
            "tree": lambda: servers.ours(cert_dir, tree=REPO, name="ab-tree", args=servers.ROOM_FOR_BIG_REVIEWS),
        }
        for pair in range(args.pairs):
            order = ["ref", "tree"] if pair % 2 == 0 else ["tree", "ref"]
            run: dict[str, Any] = {}
            for side in order:
                say(f"pair {pair + 1}/{args.pairs}: {side}")
                with sides[side]() as server:
                    run[side] = load_side(server, cert_dir, args, big)
            runs.append(run)

    rows = []
    summary: dict[str, Any] = {}
    for endpoint in [*wrk_bodies(), BIG_CONVERSION]:
        speed = [run["tree"][endpoint]["rps"] / run["ref"][endpoint]["rps"] for run in runs]
        cpu = [run["ref"][endpoint]["cpu_us"] / run["tree"][endpoint]["cpu_us"] for run in runs]
        ref_rps = statistics.median(run["ref"][endpoint]["rps"] for run in runs)
        tree_rps = statistics.median(run["tree"][endpoint]["rps"] for run in runs)
        summary[endpoint] = {"speed": speed, "cpu": cpu, "ref_rps": ref_rps, "tree_rps": tree_rps}
        rows.append([endpoint, ref_rps, tree_rps, spread(speed), spread(cpu)])
    print(f"\nThe work tree ÷ {args.ref}, median [lowest, highest] of {args.pairs} alternated pairs")
    print(table(["endpoint", f"{args.ref} req/s", "tree req/s", "speed ×", "CPU per request ×"], rows))
    save("ab", {"ref": args.ref, "settings": vars(args), "summary": summary, "runs": runs})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
