"""The docs are tests: every shell block a user is told to run is run, as written, by an e2e test,
or says on the page why it is not.

A block is marked by an HTML comment on the line before its fence (GitHub renders neither the
comment nor anything of it):

    <!-- doc-test: tests/e2e/test_release.py#verify -->    run by that test, at its step `verify`
    <!-- doc-test: skip: REASON -->                         not run, and why

tests/unit/test_docs_are_tests.py fails on a shell block with neither, on a skip without a reason
and on a named test that does not run that step. A test runs a step with `DocSession.run(doc,
step)`: the blocks in page order, each in bash with `set -euo pipefail`, one after the other in
one working directory, variables carried from block to block as in the user's shell. The only
change to the text is `substitutions` (where the user's world is on this machine: the registry on
loopback for ghcr.io, a file server for the GitHub release), applied in plain sight by the test.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
# Every page a user is sent to run commands from.
DOCS = ("README.md", "docs/install.md", "charts/foo-operator/README.md", "docs/disruptions.md")
SHELL = frozenset({"sh", "bash", "shell", "console"})
MARKER = re.compile(r"^<!--\s*doc-test:\s*(?P<what>.*?)\s*-->\s*$")
FENCE = re.compile(r"^(?P<fence>```+|~~~+)\s*(?P<lang>[\w+-]*)")
SKIP = re.compile(r"^skip:\s*(?P<reason>.*)$")
RUN = re.compile(r"^(?P<test>tests/e2e/test_\w+\.py)#(?P<step>[\w-]+)$")


@dataclass(frozen=True)
class Block:
    doc: str
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    marker: str | None  # what the comment before the fence says, if there is one

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"

    @property
    def skip_reason(self) -> str | None:
        match = SKIP.match(self.marker or "")
        return match.group("reason") if match else None

    @property
    def run_by(self) -> tuple[str, str] | None:
        """(test file, step) for a block a test runs."""
        match = RUN.match(self.marker or "")
        return (match.group("test"), match.group("step")) if match else None


def blocks(doc: str, root: Path = REPO_ROOT) -> list[Block]:
    """Every fenced block of `doc` (a path from the repository root), with the marker before it."""
    found: list[Block] = []
    lines = (root / doc).read_text().splitlines()
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        fence, start = opening.group("fence"), i
        i += 1
        while i < len(lines) and not lines[i].startswith(fence):
            i += 1
        before = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        marker = MARKER.match(before)
        text = "\n".join(lines[start + 1 : i]) + "\n"
        found.append(Block(doc, start + 1, opening.group("lang"), text, marker.group("what") if marker else None))
        i += 1
    return found


def shell_blocks(doc: str, root: Path = REPO_ROOT) -> list[Block]:
    return [b for b in blocks(doc, root) if b.lang in SHELL]


def stray_markers(doc: str, root: Path = REPO_ROOT) -> list[str]:
    """Markers that no fence follows: a block moved away from its comment."""
    lines = (root / doc).read_text().splitlines()
    stray = []
    for n, line in enumerate(lines):
        if MARKER.match(line):
            after = next((lines[j] for j in range(n + 1, len(lines)) if lines[j].strip()), "")
            if not FENCE.match(after):
                stray.append(f"{doc}:{n + 1}")
    return stray


def step_blocks(doc: str, test: str, step: str, root: Path = REPO_ROOT) -> list[Block]:
    return [b for b in shell_blocks(doc, root) if b.run_by == (test, step)]


def substituted(text: str, substitutions: Mapping[str, str]) -> str:
    for old, new in substitutions.items():
        text = text.replace(old, new)
    return text


# Bash's own variables, which the next block's shell sets for itself.
_SHELL_OWN = re.compile(r"^declare -x (PWD|OLDPWD|SHLVL|_)=", re.M)


@dataclass
class DocSession:
    """A user's shell: one working directory, one environment, the variables each block sets."""

    test: str  # the test file that runs the steps, as the markers name it
    cwd: Path
    env: dict[str, str]
    substitutions: Mapping[str, str]
    root: Path = REPO_ROOT  # where the pages are
    ran: list[str] = field(default_factory=list)  # where each block that ran is

    def run(self, doc: str, step: str, *, timeout: float = 600) -> str:
        """Run the step's blocks in page order; return what they printed. A failing block fails."""
        todo = step_blocks(doc, self.test, step, self.root)
        assert todo, f"{doc} has no block marked {self.test}#{step}"
        printed = []
        state = self.cwd / ".doc-session.env"
        for block in todo:
            script = substituted(block.text, self.substitutions)
            wrapped = (
                f"set -a\n[ -f {state} ] && . {state}\nset -euo pipefail\n{script}\nset +u\nexport -p > {state}.new\n"
            )
            result = subprocess.run(
                ["bash", "-c", wrapped], cwd=self.cwd, env=self.env, capture_output=True, text=True, timeout=timeout
            )
            printed.append(result.stdout + result.stderr)
            assert result.returncode == 0, (
                f"{block.where} failed (exit {result.returncode}) as run here:\n{script}\n"
                f"--- stdout\n{result.stdout[-4000:]}\n--- stderr\n{result.stderr[-4000:]}"
            )
            saved = (state.parent / (state.name + ".new")).read_text()
            state.write_text(_SHELL_OWN.sub("# ", saved))
            self.ran.append(block.where)
        return "".join(printed)


def path_with(*directories: Path) -> str:
    return os.pathsep.join([*(str(d) for d in directories), os.environ.get("PATH", "")])
