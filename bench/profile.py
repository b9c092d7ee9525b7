"""Where our webhook spends its time under load, per endpoint, at saturation.

    .venv/bin/python -m bench.profile [--seconds 10] [--top 12] [--cprofile]

The service runs pinned to core 0 while wrk (core 1) saturates one endpoint; /convert is also
profiled on back-to-back reviews of 10,000 Foos. By default py-spy samples the running process
from outside (no slowdown, so the shares are true; time in C code counts to the Python line that
called it); with ``--cprofile`` the service runs under cProfile instead (call counts, but every
Python call is slowed alike). Prints own time by function and summed by package.
"""

from __future__ import annotations

import argparse
import pstats
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from attacks.foos import conversion_of, dumps
from hack.plane.cluster import free_port
from hack.plane.product import webhook_args

from . import servers
from .admission import bodies
from .load import run_wrk
from .peers import py_spy
from .report import save, say, table

_PACKAGES = (
    "aiohttp",
    "multidict",
    "yarl",
    "orjson",
    "apimachinery",
    "fooapi",
    "webhook",
    "kube",
    "serving",
    "prometheus_client",
    "uvloop",
    "asyncio",
    "ssl",
    "logging",
    "json",
    "base64",
    "dataclasses",
    "typing",
)


def _package(filename: str, function: str = "") -> str:
    if filename == "~":  # cProfile's C functions: named, but not by module
        for name in ("ssl", "orjson", "uvloop", "json", "base64"):
            if name in function:
                return name
        return "builtins"
    parts = Path(filename).parts
    for name in _PACKAGES:
        if name in parts or Path(filename).stem == name:
            return name
    return Path(filename).stem


def _shares(own: Counter[str], by_package: Counter[str], top: int) -> dict[str, Any]:
    total = sum(own.values()) or 1
    return {
        "samples": total,
        "functions": [{"function": k, "share": v / total} for k, v in own.most_common(top)],
        "packages": {k: v / total for k, v in by_package.most_common()},
    }


def read_py_spy(raw_file: Path, top: int) -> dict[str, Any]:
    """py-spy's raw (collapsed) stacks: 'outer (file:line);...;leaf (file:line) count'. Own time by
    function and package, and inclusive time (the function anywhere on the stack) by function."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    by_package: Counter[str] = Counter()
    for line in raw_file.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        frames = [_frame(frame) for frame in stack.split(";")]
        filename, function = frames[-1]
        own[f"{Path(filename).name}:{function}"] += int(count)
        by_package[_package(filename)] += int(count)
        for name in {f"{Path(f).name}:{fn}" for f, fn in frames}:
            inclusive[name] += int(count)
    shares = _shares(own, by_package, top)
    total = shares["samples"]
    shares["inclusive"] = [{"function": k, "share": v / total} for k, v in inclusive.most_common(top)]
    return shares


def _frame(frame: str) -> tuple[str, str]:
    """(file, function) of one py-spy frame, 'function (file:line)'."""
    function, _, where = frame.partition(" (")
    return where.rstrip(")").rsplit(":", 1)[0], function


def read_cprofile(stats_file: Path, top: int) -> dict[str, Any]:
    raw: dict[Any, Any] = pstats.Stats(str(stats_file)).stats  # type: ignore[attr-defined]
    own: Counter[str] = Counter()
    by_package: Counter[str] = Counter()
    for (filename, _line, function), entry in raw.items():
        micros = int(entry[2] * 1e6)
        own[f"{Path(filename).name}:{function}"] += micros
        by_package[_package(filename, function)] += micros
    return _shares(own, by_package, top)


def _drive(
    server: servers.Server, cert_dir: Path, endpoint: str, body: bytes, seconds: float, connections: int
) -> dict[str, Any]:
    if endpoint != "/convert-10k":
        return run_wrk(server.url + endpoint, body, seconds=seconds, connections=connections).as_dict()
    context = servers.client_context(cert_dir)
    started, runs = time.perf_counter(), 0
    while time.perf_counter() - started < seconds:
        servers.request(server.url + "/convert", context, body=body, timeout=120)
        runs += 1
    elapsed = time.perf_counter() - started
    return {"reviews": runs, "seconds": elapsed, "seconds_per_review": elapsed / max(runs, 1)}


def profile_endpoint(cert_dir: Path, tmp: Path, endpoint: str, body: bytes, args: argparse.Namespace) -> dict[str, Any]:
    out = tmp / f"{endpoint.strip('/')}.{'prof' if args.cprofile else 'txt'}"
    if args.cprofile:
        port = free_port()
        server = servers._start(
            "ours-cprofile",
            [
                sys.executable,
                "-m",
                "cProfile",
                "-o",
                str(out),
                "-m",
                "webhook",
                *webhook_args(cert_dir, port),
            ],
            cert_dir,
            port,
        )
        try:
            load = _drive(server, cert_dir, endpoint, body, args.seconds, args.connections)
        finally:
            server.stop()  # SIGTERM: the service drains and returns, and cProfile writes its file
        return {"load": load, **read_cprofile(out, args.top)}
    with servers.ours(cert_dir) as server:
        assert server.pid is not None
        sampler = start_py_spy(server.pid, out, seconds=args.seconds)
        time.sleep(0.5)  # attached before the load starts
        load = _drive(server, cert_dir, endpoint, body, args.seconds, args.connections)
        return {"load": load, **stop_py_spy(sampler, out, args.top)}


def start_py_spy(pid: int, out: Path, *, seconds: float | None = None) -> subprocess.Popen[bytes]:
    """py-spy sampling ``pid`` from outside into ``out`` (raw collapsed stacks), for ``seconds`` or,
    without, until stop_py_spy interrupts it."""
    duration = ["--duration", str(int(seconds))] if seconds is not None else []
    argv = [str(py_spy()), "record", "--pid", str(pid), *duration, "--rate", "250", "--format", "raw"]
    return subprocess.Popen(
        [*argv, "--nonblocking", "--output", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )


def stop_py_spy(sampler: subprocess.Popen[bytes], out: Path, top: int) -> dict[str, Any]:
    """Wait for (or, when it runs without a duration, interrupt: py-spy writes what it has on SIGINT)
    the sampler, then read its stacks."""
    if sampler.poll() is None and "--duration" not in sampler.args:  # type: ignore[operator]
        sampler.send_signal(signal.SIGINT)
    _, err = sampler.communicate(timeout=60)
    if not out.exists():
        raise RuntimeError(f"py-spy wrote nothing: {err.decode()[-1000:]}")
    return read_py_spy(out, top)


def profile_table(result: dict[str, Any], packages: int = 10) -> str:
    """Own time by package, then the top functions, as read_py_spy or read_cprofile summed them."""
    by_package = table(["package", "share %"], [[k, v * 100] for k, v in list(result["packages"].items())[:packages]])
    functions = table(["function", "share %"], [[f["function"][:90], f["share"] * 100] for f in result["functions"]])
    if "inclusive" not in result:
        return f"{by_package}\n{functions}"
    inclusive = table(
        ["function (anywhere on the stack)", "share %"],
        [[f["function"][:90], f["share"] * 100] for f in result["inclusive"]],
    )
    return f"{by_package}\n{functions}\n{inclusive}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--cprofile", action="store_true", help="cProfile in the process instead of py-spy")
    args = parser.parse_args(argv)

    cases = dict(bodies())
    cases["/convert-10k"] = dumps(conversion_of(10_000))
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="foo-bench-") as tmp:
        cert_dir = servers.serving_certs(Path(tmp) / "certs")
        for endpoint, body in cases.items():
            say(f"profiling {endpoint} for {args.seconds:g}s with {'cProfile' if args.cprofile else 'py-spy'}")
            results[endpoint] = profile_endpoint(cert_dir, Path(tmp), endpoint, body, args)

    for endpoint, r in results.items():
        load = r["load"]
        rate = (
            f"{load['rps']:,.0f} req/s"
            if "rps" in load
            else f"{load['seconds_per_review'] * 1000:,.0f} ms per review of 10,000"
        )
        print(f"\n{endpoint} ({rate} while profiled): own time by package, then by function")
        print(profile_table(r))
    path = save("profile", {"settings": vars(args), "results": results})
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
