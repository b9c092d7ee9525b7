"""`python -m bench [--quick] [NAME ...]`: every benchmark in one run (or the named ones), then the summary.

--quick runs each at a small size, to prove the harness works; its numbers mean little.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time

from .report import say

# name -> (full-size arguments, quick arguments); the order they run in.
BENCHMARKS: dict[str, tuple[list[str], list[str]]] = {
    "admission": ([], ["--seconds", "3"]),
    "conversion": (["--go-http1"], ["--objects", "1000", "--repeat", "2", "--go-http1"]),
    "admission_overhead": ([], ["--creates", "300", "--sequential", "30", "--kubectl", "3"]),
    "convergence": ([], ["--foos", "100", "--rss-foos", "300", "--quiet-seconds", "10", "--peer-timeout", "300"]),
    "cold_start": ([], ["--repeat", "2", "--foos", "100"]),
    "profile": ([], ["--seconds", "3"]),
    "flood": ([], ["--seconds", "5", "--adversaries", "10", "--slow", "2"]),
    "workers": ([], ["--seconds", "3", "--rounds", "1"]),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: prove the harness, not the speed")
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"any of: {', '.join(BENCHMARKS)} (default: all)")
    args = parser.parse_args(argv)
    unknown = [name for name in args.names if name not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark {', '.join(unknown)}; known: {', '.join(BENCHMARKS)}")
    failed = []
    for name in args.names or list(BENCHMARKS):
        full, quick = BENCHMARKS[name]
        say(f"=== {name} ===")
        started = time.monotonic()
        module = importlib.import_module(f"bench.{name}")
        try:
            module.main(quick if args.quick else full)
        except Exception as err:  # one broken benchmark must not hide the others' numbers
            say(f"{name} failed: {type(err).__name__}: {err}")
            failed.append(name)
        say(f"=== {name}: {time.monotonic() - started:.0f}s ===")
    importlib.import_module("bench.summary").main([])
    if failed:
        print(f"\nbenchmarks that did not finish: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
