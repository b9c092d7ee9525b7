"""``python -m controller`` / ``foo-operator-controller``: parse flags, set up logs, run. Only wiring."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Sequence

from componentbase.logs import setup_logging

from .manager import run
from .settings import parse


def main(argv: Sequence[str] | None = None) -> None:
    settings = parse(argv)
    setup_logging(settings.log_level, "json" if settings.log_format == "json" else "text")
    # kubernetes_asyncio's own debug output is request dumps; ours says what happened.
    logging.getLogger("kubernetes_asyncio").setLevel(logging.WARNING)
    try:
        import uvloop
    except ImportError:
        code = asyncio.run(run(settings))
    else:
        code = uvloop.run(run(settings))
    sys.exit(code)


if __name__ == "__main__":
    main()
