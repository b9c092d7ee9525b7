"""`python -m bench.selectors`: CPU time of insights' selector parsers on the inputs that froze the old one.

Measured 2026-11-23 on the shared 2-core machine (load average 6-13), CPU time of one parse:

| input                           | regex parser (430484f) | apimachinery port |
|---------------------------------|------------------------|-------------------|
| `k in (` + 2,000 blanks + `x`   | 15.2 s                 | 0.02 ms           |
| `k in (` + 2,000 blanks + `,`   | 11.2 s                 | 0.02 ms           |
| `a` + 2,000 tabs + `b`          | 17.7 s                 | 0.01 ms           |
| `k in (` + 2,000 blanks         | 0.0 s (trimmed)        | 0.02 ms           |
| `a` + 1 MiB of tabs + `b`       | (not tried)            | 2.2 ms            |
| a 4,006-character set, 800 values | -                    | 4.6 ms            |

The old numbers come from `git show 430484f:insights/selectors.py` timed the same way (`--old FILE`).
"""

from __future__ import annotations

import argparse
import importlib.util
import time
from collections.abc import Callable

from apimachinery.labels import parse_label_selector

INPUTS = {
    "k in ( + 2,000 blanks + x": "k in (" + " " * 2000 + "x",
    "k in ( + 2,000 blanks + ,": "k in (" + " " * 2000 + ",",
    "a + 2,000 tabs + b": "a" + "\t" * 2000 + "b",
    "k in ( + 2,000 blanks": "k in (" + " " * 2000,
    "a + 1 MiB of tabs + b": "a" + "\t" * (1 << 20) + "b",
    "a 4,006-character set, 800 values": "k in (" + ",".join(f"v{i:03d}" for i in range(800)) + ")",
}


def cpu_ms(parse: Callable[[str], object], selector: str, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        began = time.process_time()
        try:
            parse(selector)
        except ValueError:  # SelectorError, here and in the old module
            pass
        best = min(best, time.process_time() - began)
    return best * 1000


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.selectors", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--old",
        help="a copy of the old insights/selectors.py, to time its label_selector too (minutes: skips the 1 MiB input)",
    )
    args = parser.parse_args()
    old: Callable[[str], object] | None = None
    if args.old:
        spec = importlib.util.spec_from_file_location("old_selectors", args.old)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        old = module.label_selector
    for name, selector in INPUTS.items():
        line = f"{name:36} {len(selector):>8} chars  port {cpu_ms(parse_label_selector, selector, 20):9.3f} ms"
        if old is not None and len(selector) < 10_000:
            line += f"  regex {cpu_ms(old, selector, 1):10.1f} ms"
        print(line, flush=True)


if __name__ == "__main__":
    main()
