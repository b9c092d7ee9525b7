"""What a benchmark leaves behind: a short table on stdout and a JSON file under bench/results/."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO / "bench" / "results"  # git-ignored
LOGS_DIR = RESULTS_DIR / "logs"


def ratio(ours: float | None, theirs: float | None) -> float | None:
    """ours / theirs, or None when either side is missing or zero."""
    if not ours or not theirs:
        return None
    return ours / theirs


def percentile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank ``q``-th percentile (0-100) of ``values``, or None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


def fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if abs(value) >= 100:
            return f"{value:,.0f}"
        return f"{value:.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [list(headers)] + [[fmt(c) if not isinstance(c, str) else c for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))
        for row in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def environment() -> dict[str, Any]:
    """Enough about the machine and the tree to tell two result files apart."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        commit = ""
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "commit": commit,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "cpu": cpu,
        "load_average": os.getloadavg(),
    }


def save(name: str, results: dict[str, Any]) -> Path:
    """Write bench/results/<name>.json (the latest run) and a dated copy under bench/results/history/."""
    document = {"benchmark": name, "environment": environment(), **results}
    text = json.dumps(document, indent=2, default=str) + "\n"
    history = RESULTS_DIR / "history"
    history.mkdir(parents=True, exist_ok=True)
    stamp = document["environment"]["when"].replace(":", "").replace("-", "")
    (history / f"{name}-{stamp}.json").write_text(text)
    path = RESULTS_DIR / f"{name}.json"
    path.write_text(text)
    return path


def say(message: str) -> None:
    """Progress for the person watching, on stderr so stdout stays the tables."""
    import sys

    print(f"bench: {message}", file=sys.stderr, flush=True)
