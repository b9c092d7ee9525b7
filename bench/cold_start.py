"""Cold start: process start to /readyz OK for the webhook (ours vs the Go peer), and to caches
synced (/readyz) for our controller, against a plane with no Foos and with ``--foos`` Foos.

    .venv/bin/python -m bench.cold_start [--repeat 5] [--foos 1000] [--no-controller]

Servers pinned to core 0 like the load benchmarks; readiness polled every 5 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from hack.cluster import LocalControlPlane, free_port
from hack.procs import Component
from hack.product import webhook_args

from . import servers
from .load import cores, pinned
from .peers import go_webhook_binary
from .planes import AdminClient, apply_plain_crd, plain_foo, plane
from .report import LOGS_DIR, fmt, ratio, save, say, table

POLL = 0.005


def _time_to_ready(name: str, argv: list[str], ready: Any, timeout: float = 120.0) -> float:
    component = Component(name, argv, LOGS_DIR / f"{name}.log")
    started = time.perf_counter()
    component.start()
    try:
        while True:
            try:
                if ready():
                    return time.perf_counter() - started
            except (OSError, urllib.error.URLError):
                pass
            component.check_alive()
            if time.perf_counter() - started > timeout:
                raise RuntimeError(f"{name} not ready after {timeout:g}s\n{component.describe_log()}")
            time.sleep(POLL)
    finally:
        component.stop()


def _https_ready(port: int, cert_dir: Path) -> Any:
    context = servers.client_context(cert_dir)
    return lambda: servers.request(f"https://127.0.0.1:{port}/readyz", context, method="GET", timeout=1)[0] == 200


def _http_ready(port: int) -> Any:
    def ready() -> bool:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as response:
            return bool(response.status == 200)

    return ready


def webhooks(repeat: int) -> dict[str, list[float]]:
    server_core, _ = cores()
    times: dict[str, list[float]] = {"ours": [], "go-controller-runtime": []}
    with tempfile.TemporaryDirectory(prefix="foo-bench-") as tmp:
        cert_dir = servers.serving_certs(Path(tmp) / "certs")
        go = str(go_webhook_binary())
        for _ in range(repeat):  # alternate, so drift in machine load hits both alike
            port = free_port()
            times["ours"].append(
                _time_to_ready(
                    "cold-ours",
                    pinned(
                        [sys.executable, "-m", "webhook", *webhook_args(cert_dir, port)],
                        server_core,
                    ),
                    _https_ready(port, cert_dir),
                )
            )
            port = free_port()
            times["go-controller-runtime"].append(
                _time_to_ready(
                    "cold-go",
                    pinned(
                        [go, "--cert-dir", str(cert_dir), "--bind-address", "127.0.0.1", "--port", str(port)],
                        server_core,
                    ),
                    _https_ready(port, cert_dir),
                )
            )
    return times


def controller_start(p: LocalControlPlane) -> float:
    server_core, _ = cores()
    port = free_port()
    argv = pinned(
        [
            sys.executable,
            "-m",
            "controller",
            "--kubeconfig",
            str(p.kubeconfig),
            "--health-probe-bind-address",
            f"127.0.0.1:{port}",
            "--metrics-bind-address",
            "0",
        ],
        server_core,
    )
    return _time_to_ready("cold-controller", argv, _http_ready(port))


def controllers(repeat: int, foos: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {}
    with plane("cold-start") as p:
        apply_plain_crd(p)
        times["controller, 0 Foos"] = [controller_start(p) for _ in range(repeat)]
        if foos:

            async def seed() -> None:
                async with AdminClient(p) as client:
                    outcome = await client.create_foos([plain_foo(i) for i in range(foos)])
                    if outcome.failed:
                        raise RuntimeError(f"seeding: {outcome.first_error}")

            say(f"storing {foos:,} Foos")
            asyncio.run(seed())
            # The first start also creates their Deployments; time the starts after that one.
            controller_start(p)
            times[f"controller, {foos:,} Foos"] = [controller_start(p) for _ in range(repeat)]
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cold_start", description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--foos", type=int, default=1000, help="Foos in the cache for the second controller case")
    parser.add_argument("--no-controller", action="store_true")
    args = parser.parse_args(argv)

    say(f"webhook start to /readyz, {args.repeat} times each")
    times = webhooks(args.repeat)
    if not args.no_controller:
        say("controller start to caches synced")
        times.update(controllers(max(1, args.repeat // 2 + 1), args.foos))
    medians = {name: statistics.median(t) for name, t in times.items()}
    rows = [[name, medians[name] * 1000, min(t) * 1000, max(t) * 1000, len(t)] for name, t in times.items()]
    print("\nCold start: process start to ready (webhook: /readyz; controller: caches synced)")
    print(table(["process", "median ms", "min ms", "max ms", "runs"], rows))
    webhook_ratio = ratio(medians["ours"], medians["go-controller-runtime"])
    print(f"\nours / Go peer (webhook start to /readyz): {fmt(webhook_ratio, 2)}")
    path = save(
        "cold_start",
        {"settings": vars(args), "seconds": times, "median_seconds": medians, "webhook_ratio_to_go": webhook_ratio},
    )
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
