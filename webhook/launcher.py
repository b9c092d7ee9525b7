"""The webhook's one entry point: the `foo-operator-webhook` console script (pyproject's
``[project.scripts]``, what the image runs) and ``python -m webhook``.

A console script imports the module it names, then calls its function: were it the command
module, the collector would run all through that module's imports. Start-up makes tens of
thousands of objects that live as long as the process, and collections while they are made walk
them again and again, CPU spent before /readyz (bench/README, "Figures moved from docstrings").
So this module imports nothing at its top: ``main`` pauses the collector, then imports the
webhook's command; ``serving.lifecycle.run_server`` freezes what start-up made and turns the
collector back on.
"""

from __future__ import annotations

import gc


def main() -> int:
    gc.disable()
    from .command import main as run

    return run()
