"""`--workers 2` vs `--workers 1`: /validate-foo at saturation, req/s of the pod and their ratio.

    .venv/bin/python -m bench.workers [--seconds 10] [--connections 50] [--rounds 2]

The server is not pinned (the two workers may use both cores); wrk is pinned as in every other
benchmark (bench.load), so on a 2-core machine the load generator shares a core with one worker
and the ratio is bounded well below 2 — on a pod's own cores it is not. The counts alternate
(1, 2, 1, 2, ...) so a machine that gets busier mid-run disturbs both; each count's median
round is reported. Server CPU is the supervisor's and every worker's, from /proc.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path
from typing import Any

from . import servers
from .admission import bodies
from .load import run_wrk
from .report import fmt, ratio, save, say, table

ENDPOINT = "/validate-foo"
COUNTS = ("1", "2")


def projected_ratio(cpu_one: float, cpu_two: float) -> float | None:
    """What 2 workers would serve on 2 free cores ÷ what 1 serves on 1, from CPU µs per review.

    Each review costs the pod ``cpu_two`` µs with two workers (the second process's own costs
    included), so two cores hold 2 / cpu_two reviews a µs against one core's 1 / cpu_one.
    """
    return 2 * cpu_one / cpu_two if cpu_one > 0 and cpu_two > 0 else None


def pod_cpu_seconds(server: servers.Server) -> float:
    """CPU of the server process and its children (the workers, when it supervises)."""
    pid = server.pid
    if pid is None:
        return float("nan")
    try:
        children = [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        children = []
    return sum(servers.process_cpu_seconds(p) for p in (pid, *children))


def one_round(cert_dir: Path, workers: str, args: argparse.Namespace) -> dict[str, Any]:
    body = bodies()[ENDPOINT]
    with servers.ours(cert_dir, args=["--workers", workers], pin=False) as server:
        url = server.url + ENDPOINT
        say(f"--workers {workers}: warm-up, then {args.seconds:g}s at saturation ({args.connections} connections)")
        run_wrk(url, body, seconds=min(2.0, args.seconds), connections=args.connections)
        cpu = pod_cpu_seconds(server)
        load = run_wrk(url, body, seconds=args.seconds, connections=args.connections)
        cpu = pod_cpu_seconds(server) - cpu
    return {"workers": workers, **load.as_dict(), "cpu_us_per_request": cpu / max(load.requests, 1) * 1e6}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.workers", description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each load run")
    parser.add_argument("--connections", type=int, default=50, help="keep-alive connections at saturation")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each worker count, alternating")
    args = parser.parse_args(argv)

    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="foo-bench-") as tmp:
        cert_dir = servers.serving_certs(Path(tmp) / "certs")
        for _ in range(args.rounds):
            for workers in COUNTS:
                runs.append(one_round(cert_dir, workers, args))

    def median(workers: str, key: str) -> float:
        return float(statistics.median(r[key] for r in runs if r["workers"] == workers))

    rps = {workers: median(workers, "rps") for workers in COUNTS}
    speedup = ratio(rps["2"], rps["1"])
    print(f"\n{ENDPOINT} at saturation ({args.connections} conns, {args.seconds:g}s, median of {args.rounds})")
    print(
        table(
            ["--workers", "req/s", "p50 ms", "p99 ms", "CPU µs/req", "errors"],
            [
                [
                    w,
                    rps[w],
                    median(w, "p50_ms"),
                    median(w, "p99_ms"),
                    median(w, "cpu_us_per_request"),
                    median(w, "errors"),
                ]
                for w in COUNTS
            ],
        )
    )
    cpu = {workers: median(workers, "cpu_us_per_request") for workers in COUNTS}
    projected = projected_ratio(cpu["1"], cpu["2"])
    print(f"\n2 workers / 1 worker: {fmt(speedup, 2)}× req/s (target ≥ 1.8× on 2 cores of its own)")
    print(
        f"on two cores of their own, from CPU per review: {fmt(projected, 2)}× "
        f"(2 × {fmt(cpu['1'])} ÷ {fmt(cpu['2'])} µs; a projection: here wrk needs one of the two cores)"
    )
    path = save(
        "workers", {"settings": vars(args), "rps": rps, "ratio": speedup, "projected_ratio": projected, "runs": runs}
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
