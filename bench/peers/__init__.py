"""The peers bench/ compares us with (and its profiler): built or installed on first use into a cache
outside the repo."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

from hack.plane.binaries import cache_dir

PEERS_DIR = Path(__file__).resolve().parent
GO_WEBHOOK_SRC = PEERS_DIR / "go-webhook"
KOPF_WEBHOOK = PEERS_DIR / "kopf_webhook.py"
KOPF_VERSION = "1.45.2"
PY_SPY_VERSION = "0.4.3"


def bench_cache() -> Path:
    path = cache_dir() / "bench"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _log(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


def go_webhook_binary() -> Path:
    """The controller-runtime peer, built once per version of its sources.

    Named by a digest of the sources, not rebuilt by their mtimes: worktrees of different branches
    share this cache, and one rebuilding "the" binary from its own sources would swap the peer under
    another's running benchmark (a flag one branch added vanished mid-run). Built aside and renamed,
    so a running binary is never overwritten."""
    sources = sorted(p for p in GO_WEBHOOK_SRC.iterdir() if p.suffix in (".go", ".mod", ".sum"))
    digest = hashlib.sha256()
    for source in sources:
        digest.update(source.name.encode() + b"\0" + source.read_bytes() + b"\0")
    out = bench_cache() / f"go-webhook-{digest.hexdigest()[:12]}"
    if out.exists():
        return out
    _log(f"building the Go peer ({GO_WEBHOOK_SRC.name}, controller-runtime) into {out} (first time: minutes)")
    env = {**os.environ, "GOFLAGS": "-mod=mod"}
    building = out.with_name(f"{out.name}.{os.getpid()}.tmp")
    subprocess.run(
        ["go", "build", "-trimpath", "-ldflags", "-s -w", "-o", str(building), "."],
        cwd=GO_WEBHOOK_SRC,
        env=env,
        check=True,
    )
    building.replace(out)
    return out


def _tool_venv(name: str, binary: str, *requirements: str) -> Path:
    """A virtualenv of its own under the bench cache holding ``requirements``, made on first use and
    brought up to date when the requirements change (they are recorded in it)."""
    venv = bench_cache() / name
    recorded = venv / "bench-requirements.txt"
    wanted = "\n".join(requirements) + "\n"
    if (venv / "bin" / binary).exists() and recorded.exists() and recorded.read_text() == wanted:
        return venv
    _log(f"installing {' '.join(requirements)} into {venv}")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", *requirements], check=True)
    recorded.write_text(wanted)
    return venv


def kopf_venv() -> Path:
    """A virtualenv holding kopf (not one of our dependencies), made on first use; with the
    libraries fooapi imports, at our versions, since the kopf peer calls fooapi's rules."""
    fooapi_needs = [f"{name}=={version(name)}" for name in ("pydantic", "orjson")]
    return _tool_venv("kopf-venv", "kopf", f"kopf=={KOPF_VERSION}", "uvloop", *fooapi_needs)


def py_spy() -> Path:
    """py-spy (a sampling profiler that reads another process's stacks), in its own virtualenv."""
    return _tool_venv("tools-venv", "py-spy", f"py-spy=={PY_SPY_VERSION}") / "bin" / "py-spy"
