"""Files the repository keeps generated (the chart's CRD, the plain manifests): one way to write
them, and one `--check` that fails when the committed copy drifted from its source."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def generate(argv: list[str] | None, *, module: str, doc: str | None, output: Path, render: Callable[[], str]) -> int:
    """``python -m <module> [--check]``: rewrite ``output`` from ``render()``, or exit 1 if stale."""
    parser = argparse.ArgumentParser(
        prog=f"python -m {module}", description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--check", action="store_true", help="do not write; exit 1 if the file is out of date")
    args = parser.parse_args(argv)
    text = render()
    current = output.read_text() if output.exists() else ""
    name = output.relative_to(REPO_ROOT)
    if args.check:
        if current != text:
            print(f"{name} is out of date: run `python -m {module}`", file=sys.stderr)
            return 1
        return 0
    if current != text:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text)
        print(f"wrote {name}")
    return 0
