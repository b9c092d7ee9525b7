"""``python -m controller`` / ``foo-operator-controller``: parse flags, set up logs, run. Only wiring."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence

from .logs import configure
from .manager import run
from .settings import parse


def main(argv: Sequence[str] | None = None) -> None:
    settings = parse(argv)
    configure(settings.log_level, settings.log_format)
    try:
        import uvloop
    except ImportError:
        code = asyncio.run(run(settings))
    else:
        code = uvloop.run(run(settings))
    sys.exit(code)


if __name__ == "__main__":
    main()
