"""Cold start: process start to /readyz OK for the webhook (ours vs the Go peer), and to caches
synced (/readyz) for our controller, against a plane with no Foos and with ``--foos`` Foos.

    .venv/bin/python -m bench.cold_start [--repeat 5] [--foos 1000] [--no-controller]
    .venv/bin/python -m bench.cold_start --imports [--repeat 5]

Servers pinned to core 0 like the load benchmarks; readiness polled every 5 ms; the process's CPU
(``/proc/<pid>/schedstat``) read at the first /readyz 200. ``--imports``: where our webhook's
start goes instead — real starts under ``python -X importtime``, self time summed per top-level
package and the heaviest imports by cumulative time (importtime itself adds a few per cent).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from hack.plane.adminclient import AdminClient, plain_foo
from hack.plane.cluster import LocalControlPlane, free_port
from hack.plane.procs import Component
from hack.plane.product import webhook_args

from . import servers
from .load import cores, pinned
from .peers import go_webhook_binary
from .planes import apply_plain_crd, plane
from .report import LOGS_DIR, REPO, fmt, ratio, save, say, table

POLL = 0.005
# Our own packages, summed as one line of the --imports breakdown.
PRODUCT = ("apimachinery", "fooapi", "kube", "serving", "webhook", "certs")
# Every package a process of ours may load, compiled before it is timed.
PACKAGES = (*PRODUCT, "insights", "controller")


# What the image's `foo-operator-webhook` console script runs (pyproject's [project.scripts]),
# written out so that an editable install made before the entry point changed measures the same.
CONSOLE_SCRIPT = "import sys; from webhook.launcher import main; sys.exit(main())"


def webhook_command(cert_dir: Path, port: int, *python_flags: str) -> list[str]:
    """Our webhook as a pod starts it, serving ``cert_dir``'s pair on ``port`` (hack.plane.product's flags)."""
    return [sys.executable, *python_flags, "-c", CONSOLE_SCRIPT, *webhook_args(cert_dir, port)]


@functools.cache
def compiled_env() -> dict[str, str]:
    """The environment our processes start in, once the product's bytecode is compiled (next to
    its sources, in the git-ignored ``__pycache__`` directories), as every image ships it
    (``pip install --compile``, hack/image.sh). Without it, a machine with
    PYTHONDONTWRITEBYTECODE=1 (this one, many CI runners) compiles our ~30 modules from source
    at every start: ~40 ms of CPU no pod pays. (Not PYTHONPYCACHEPREFIX: under a prefix Python
    looks for every module's bytecode there, and would compile the standard library and aiohttp.)"""
    env = {name: value for name, value in os.environ.items() if name != "PYTHONPYCACHEPREFIX"}
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", *(str(REPO / name) for name in PACKAGES)],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return env


def process_cpu(pid: int) -> float:
    """Seconds of CPU ``pid`` has used: /proc's schedstat (nanoseconds; a start is ~20 clock
    ticks), else the clock ticks every bench reads (``servers.process_cpu_seconds``)."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return servers.process_cpu_seconds(pid)


def _start_to_ready(name: str, argv: list[str], ready: Any, timeout: float = 120.0) -> tuple[float, float, str]:
    """(wall seconds to the first ready answer, the process's CPU seconds then, what it had logged by then)."""
    log_file = LOGS_DIR / f"{name}.log"
    log_file.unlink(missing_ok=True)
    component = Component(name, argv, log_file, env=compiled_env())
    started = time.perf_counter()
    component.start()
    assert component.pid is not None
    try:
        while True:
            try:
                if ready():
                    wall, cpu = time.perf_counter() - started, process_cpu(component.pid)
                    with open(log_file, "rb") as log:  # only what was written before it was ready
                        return wall, cpu, log.read(log_file.stat().st_size).decode(errors="replace")
            except (OSError, urllib.error.URLError):
                pass
            component.check_alive()
            if time.perf_counter() - started > timeout:
                raise RuntimeError(f"{name} not ready after {timeout:g}s\n{component.describe_log()}")
            time.sleep(POLL)
    finally:
        component.stop()


def _time_to_ready(name: str, argv: list[str], ready: Any, timeout: float = 120.0) -> float:
    return _start_to_ready(name, argv, ready, timeout)[0]


def _https_ready(port: int, cert_dir: Path) -> Any:
    context = servers.client_context(cert_dir)
    return lambda: servers.request(f"https://127.0.0.1:{port}/readyz", context, method="GET", timeout=1)[0] == 200


def _http_ready(port: int) -> Any:
    def ready() -> bool:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as response:
            return bool(response.status == 200)

    return ready


def webhooks(repeat: int) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """(wall seconds, CPU seconds) to the first /readyz 200 of each start, ours and the Go peer's."""
    server_core, _ = cores()
    times: dict[str, list[float]] = {"ours": [], "go-controller-runtime": []}
    cpu: dict[str, list[float]] = {"ours": [], "go-controller-runtime": []}
    with tempfile.TemporaryDirectory(prefix="foo-bench-") as tmp:
        cert_dir = servers.serving_certs(Path(tmp) / "certs")
        go = str(go_webhook_binary())
        for _ in range(repeat):  # alternate, so drift in machine load hits both alike
            for name, component in (("ours", "cold-ours"), ("go-controller-runtime", "cold-go")):
                port = free_port()
                argv = (
                    webhook_command(cert_dir, port)
                    if name == "ours"
                    else [go, "--cert-dir", str(cert_dir), "--bind-address", "127.0.0.1", "--port", str(port)]
                )
                wall, used, _ = _start_to_ready(component, pinned(argv, server_core), _https_ready(port, cert_dir))
                times[name].append(wall)
                cpu[name].append(used)
    return times, cpu


# ``-X importtime``'s lines: "import time: <self µs> | <cumulative µs> | <two spaces per level><module>"
_IMPORT_TIME = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \| ( *)(\S+)\s*$")


def import_times(log: str) -> list[tuple[str, float, float]]:
    """(module, self ms, cumulative ms) of every import ``-X importtime`` reported in ``log``."""
    rows = []
    for line in log.splitlines():
        match = _IMPORT_TIME.match(line)
        if match:
            rows.append((match[4], int(match[1]) / 1000, int(match[2]) / 1000))
    return rows


def package_self_times(rows: list[tuple[str, float, float]]) -> dict[str, float]:
    """Self time summed per top-level package, our own packages once more as one line, all of them as another."""
    totals: dict[str, float] = {}
    for module, own, _ in rows:
        package = module.partition(".")[0]
        totals[package] = totals.get(package, 0.0) + own
    totals["= foo-operator's own"] = sum(totals.get(name, 0.0) for name in PRODUCT)
    totals["= every import"] = sum(own for _, own, _ in rows)
    return totals


def imports(repeat: int, top: int = 15) -> int:
    """Print where a real start of our webhook goes: CPU at /readyz, imports per package, heaviest imports."""
    server_core, _ = cores()
    walls: list[float] = []
    cpus: list[float] = []
    packages: dict[str, list[float]] = {}
    cumulative: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="foo-bench-") as tmp:
        cert_dir = servers.serving_certs(Path(tmp) / "certs")
        for _ in range(repeat):
            argv = webhook_command(cert_dir, port := free_port(), "-X", "importtime")
            wall, used, log = _start_to_ready("cold-imports", pinned(argv, server_core), _https_ready(port, cert_dir))
            walls.append(wall)
            cpus.append(used)
            rows = import_times(log)
            for name, total in package_self_times(rows).items():
                packages.setdefault(name, []).append(total)
            for module, _, whole in rows:
                cumulative.setdefault(module, []).append(whole)
    wall_ms, cpu_ms = statistics.median(walls) * 1000, statistics.median(cpus) * 1000
    imported = statistics.median(packages["= every import"])
    print(
        f"\nOur webhook under -X importtime, median of {repeat}: /readyz 200 after {wall_ms:.0f} ms wall, {cpu_ms:.0f} ms CPU"
    )
    if imported < cpu_ms:
        print(
            f"imports {imported:.0f} ms; the rest (interpreter, flags, TLS, app, listener) ~{cpu_ms - imported:.0f} ms\n"
        )
    else:  # importtime counts wall time: on a shared core, more than the CPU
        print(f"imports {imported:.0f} ms of wall time, more than the CPU: other processes shared the core\n")
    by_package = sorted(packages.items(), key=lambda item: -statistics.median(item[1]))
    print(
        table(
            ["package (self time)", "median ms", "min ms", "max ms"],
            [[name, statistics.median(t), min(t), max(t)] for name, t in by_package[: top + 2]],
        )
    )
    heaviest = sorted(
        ((module, statistics.median(t)) for module, t in cumulative.items() if len(t) == repeat), key=lambda r: -r[1]
    )
    print("\n" + table(["import (cumulative)", "median ms"], [[module, ms] for module, ms in heaviest[:top]]))
    save("cold_start_imports", {"wall_seconds": walls, "cpu_seconds": cpus, "package_self_ms": packages})
    return 0


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
    parser.add_argument(
        "--imports", action="store_true", help="where our webhook's start goes (python -X importtime), nothing else"
    )
    args = parser.parse_args(argv)
    if args.imports:
        say(f"webhook start under -X importtime, {args.repeat} times")
        return imports(args.repeat)

    say(f"webhook start to /readyz, {args.repeat} times each")
    times, cpu = webhooks(args.repeat)
    if not args.no_controller:
        say("controller start to caches synced")
        times.update(controllers(max(1, args.repeat // 2 + 1), args.foos))
    medians = {name: statistics.median(t) for name, t in times.items()}
    cpu_medians = {name: statistics.median(t) for name, t in cpu.items()}
    rows = [
        [
            name,
            medians[name] * 1000,
            min(t) * 1000,
            max(t) * 1000,
            cpu_medians[name] * 1000 if name in cpu else None,
            len(t),
        ]
        for name, t in times.items()
    ]
    print("\nCold start: process start to ready (webhook: /readyz; controller: caches synced)")
    print(table(["process", "median ms", "min ms", "max ms", "CPU ms (median)", "runs"], rows))
    webhook_ratio = ratio(medians["ours"], medians["go-controller-runtime"])
    print(f"\nours / Go peer (webhook start to /readyz): {fmt(webhook_ratio, 2)}")
    path = save(
        "cold_start",
        {
            "settings": vars(args),
            "seconds": times,
            "median_seconds": medians,
            "cpu_seconds": cpu,
            "median_cpu_seconds": cpu_medians,
            "webhook_ratio_to_go": webhook_ratio,
        },
    )
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
