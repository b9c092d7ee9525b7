"""The `foo-operator-webhook` console script (pyproject's ``[project.scripts]``), what the image runs.

A console script imports the module it names, then calls its function: named ``webhook.__main__``,
the collector would run all through that module's imports, whose ``if __name__ == "__main__"``
pause only ``python -m webhook`` reaches. Start-up makes tens of thousands of objects that live
as long as the process, and collections while they are made walk them again and again, CPU spent
before /readyz. So this module imports nothing at its top: ``main`` pauses the
collector, then imports the webhook; ``serving.lifecycle.run_server`` freezes what start-up made and
turns the collector back on.
"""

from __future__ import annotations

import gc


def main() -> int:
    gc.disable()
    from .__main__ import main as run

    return run()
