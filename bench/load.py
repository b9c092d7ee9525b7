"""HTTP load with wrk (Debian's package): POST one body for a fixed time, pinned to its own core.

wrk has no open-loop rate; a fixed rate is approximated with its Lua ``delay()``: each of ``c``
connections waits ``c / rate`` seconds between requests, so the offered rate is at most ``rate``
and the achieved rate is reported next to it. Latency is wrk's (request written to response
read, in microseconds), percentiles from its histogram.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .report import say

# Printed by the Lua `done` hook: one JSON line the harness parses.
_LUA = r"""
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = assert(io.open(os.getenv("BENCH_BODY_FILE"), "rb"))
wrk.body = f:read("*a")
f:close()
local pause = tonumber(os.getenv("BENCH_DELAY_MS") or "0")
if pause > 0 then
  function delay() return pause end
end
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCH_JSON {"requests":%d,"duration_us":%d,"bytes":%d,' ..
    '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
    '"latency_us":{"mean":%.1f,"p50":%d,"p90":%d,"p99":%d,"p999":%d,"max":%d}}\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status, e.timeout,
    latency.mean, latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency:percentile(99.9), latency.max))
end
"""


@dataclass(frozen=True)
class LoadResult:
    requests: int
    seconds: float
    rps: float
    errors: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float
    mean_ms: float
    connections: int
    target_rps: float | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def cores() -> tuple[str | None, str | None]:
    """(server core, load core): 0 and 1 when the machine has two and taskset exists."""
    if (os.cpu_count() or 1) >= 2 and shutil.which("taskset"):
        return "0", "1"
    return None, None


def pinned(argv: list[str], core: str | None) -> list[str]:
    return ["taskset", "-c", core, *argv] if core is not None else argv


def ensure_wrk() -> str:
    """Path of wrk; installs Debian's package when missing and we are root."""
    found = shutil.which("wrk")
    if found:
        return found
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise SystemExit("bench: wrk is not installed: apt-get install -y wrk")
    say("installing wrk (apt-get install -y wrk)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    if subprocess.run(["apt-get", "install", "-y", "-q", "wrk"], env=env, capture_output=True).returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, check=True)
        subprocess.run(["apt-get", "install", "-y", "-q", "wrk"], env=env, capture_output=True, check=True)
    found = shutil.which("wrk")
    if not found:
        raise SystemExit("bench: wrk did not install")
    return found


def run_wrk(
    url: str, body: bytes, *, seconds: float, connections: int, rate: float | None = None, timeout_s: float = 5.0
) -> LoadResult:
    """POST ``body`` to ``url`` for ``seconds`` from ``connections`` keep-alive connections."""
    wrk = ensure_wrk()
    _, load_core = cores()
    with tempfile.TemporaryDirectory(prefix="foo-bench-") as tmp:
        script = Path(tmp) / "post.lua"
        script.write_text(_LUA)
        body_file = Path(tmp) / "body.json"
        body_file.write_bytes(body)
        delay_ms = 0
        if rate:
            delay_ms = max(1, round(connections * 1000 / rate))
        env = {**os.environ, "BENCH_BODY_FILE": str(body_file), "BENCH_DELAY_MS": str(delay_ms)}
        argv = pinned(
            [wrk, "-t1", f"-c{connections}", f"-d{seconds:g}s", f"--timeout={timeout_s:g}s", "-s", str(script), url],
            load_core,
        )
        result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=seconds + 60)
    line = next((ln for ln in result.stdout.splitlines() if ln.startswith("BENCH_JSON ")), None)
    if result.returncode != 0 or line is None:
        raise RuntimeError(f"wrk failed ({result.returncode}): {result.stdout[-2000:]} {result.stderr[-2000:]}")
    data = json.loads(line.removeprefix("BENCH_JSON "))
    lat = data["latency_us"]
    seconds_run = data["duration_us"] / 1e6
    return LoadResult(
        requests=data["requests"],
        seconds=seconds_run,
        rps=data["requests"] / seconds_run,
        errors=sum(data["errors"].values()),
        p50_ms=lat["p50"] / 1000,
        p90_ms=lat["p90"] / 1000,
        p99_ms=lat["p99"] / 1000,
        p999_ms=lat["p999"] / 1000,
        max_ms=lat["max"] / 1000,
        mean_ms=lat["mean"] / 1000,
        connections=connections,
        target_rps=rate,
    )
