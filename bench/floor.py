"""What the product adds per review: our webhook vs a bare aiohttp server (the floor) vs Go.

    .venv/bin/python -m bench.floor [--seconds 5] [--rounds 2]

Each server alone, pinned to core 0, wrk on core 1 saturating `/validate-foo` with the same
body; server CPU per request from /proc. The floor (bench/peers/aiohttp_floor.py) reads and
parses the body and answers a fixed review: the HTTP stack's own cost.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from hack.plane.cluster import free_port

from . import servers
from .admission import bodies
from .load import run_wrk
from .peers import PEERS_DIR
from .report import save, say, table


def floor(cert_dir: Path) -> servers.Server:
    port = free_port()
    argv = [sys.executable, str(PEERS_DIR / "aiohttp_floor.py"), str(cert_dir), str(port)]
    return servers._start("aiohttp-floor", argv, cert_dir, port)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.floor", description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2, help="each server once per round, alternating")
    parser.add_argument("--connections", type=int, default=50)
    args = parser.parse_args(argv)
    body = bodies()["/validate-foo"]
    rows: list[list[Any]] = []
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="foo-bench-") as tmp:
        cert_dir = servers.serving_certs(Path(tmp) / "certs")
        for round_ in range(args.rounds):
            for name, start in (("aiohttp-floor", floor), ("ours", servers.ours), ("go", servers.go_peer)):
                with start(cert_dir) as server:
                    url = server.url + "/validate-foo"
                    say(f"round {round_ + 1}: {name}")
                    run_wrk(url, body, seconds=2, connections=args.connections)
                    cpu = server.cpu_seconds()
                    load = run_wrk(url, body, seconds=args.seconds, connections=args.connections)
                    used = server.cpu_seconds() - cpu
                    run = {
                        "server": name,
                        "round": round_ + 1,
                        "rps": load.rps,
                        "cpu_us_per_request": used / max(load.requests, 1) * 1e6,
                        "load_average": os.getloadavg()[0],
                    }
                    runs.append(run)
                    rows.append([name, run["round"], run["rps"], run["cpu_us_per_request"], run["load_average"]])
    print()
    print(table(["server", "round", "sat req/s", "CPU µs/req", "load avg"], rows))
    save("floor", {"settings": {"seconds": args.seconds, "connections": args.connections}, "runs": runs})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
