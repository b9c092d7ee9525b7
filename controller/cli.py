"""``foo-operator``: the operator's commands for people. Only wiring; ``migrate`` does the work.

foo-operator migrate-storage [--kubeconfig PATH] [--context NAME] [--qps Q] [--page-size N]
                             [--dry-run[=client|server]] [-o json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from typing import Any

from componentbase.cli import KUBECONFIG_HELP, add_subcommand, command_parser, positive_float, positive_int, subcommands
from componentbase.escaping import escape_controls

from .migrate import DRY_RUNS, MigrationSettings, Say, migrate_storage
from .progress import Progress, bar

EXIT_INTERRUPTED = 130


MIGRATE_SUMMARY = "re-write every Foo at the CRD's storage version, then prune status.storedVersions"
MIGRATE_DESCRIPTION = (
    "Re-writes every Foo at the Foo CRD's storage version (v1 once foo-operator is installed) and "
    "then removes every other version from the CRD's status.storedVersions. Refuses to start while "
    "the conversion webhook is not answering. Safe to run again: Foos already stored at that "
    "version are counted as such and not written."
)


def parser(prog: str = "foo-operator") -> argparse.ArgumentParser:
    p = command_parser(prog, "foo-operator's commands.")
    add_migrate_flags(add_subcommand(subcommands(p), "migrate-storage", MIGRATE_SUMMARY, MIGRATE_DESCRIPTION))
    return p


def add_migrate_flags(migrate: argparse.ArgumentParser) -> None:
    """The flags of ``migrate-storage``, here and in ``kubectl foo-operator migrate-storage``."""
    defaults = MigrationSettings()
    migrate.add_argument("--kubeconfig", help=KUBECONFIG_HELP)
    migrate.add_argument("--context", help="kubeconfig context to use (default: the current one)")
    migrate.add_argument("--qps", type=positive_float, default=defaults.qps, help="at most this many requests a second")
    migrate.add_argument("--page-size", type=positive_int, default=defaults.page_size, help="Foos per list page")
    migrate.add_argument(
        "--probe-timeout",
        type=positive_float,
        default=defaults.probe_timeout,
        help="seconds to wait for the conversion webhook probe",
    )
    migrate.add_argument(
        "--dry-run",
        nargs="?",
        const="client",
        default=defaults.dry_run,
        choices=DRY_RUNS,
        help="kubectl's: client lists and counts every Foo; server also sends each write with "
        "dryRun=All so admission answers for every Foo; neither writes a Foo or the CRD "
        "(bare --dry-run: client)",
    )
    migrate.add_argument(
        "--only-if-needed",
        action="store_true",
        help="do nothing when status.storedVersions is the storage version alone (no Foo can be stored at "
        "another version): one read of the CRD, for a Job that runs on every deploy",
    )
    migrate.add_argument(
        "-o",
        "--output",
        choices=["json"],
        help="json: a summary object on stdout, progress lines on stderr (default: lines on stdout)",
    )


def _say(line: str) -> None:
    print(escape_controls(line), flush=True)  # a line may quote what the cluster said


def _warn(line: str) -> None:
    print(escape_controls(line), file=sys.stderr, flush=True)


class TerminalBar:
    """On a terminal, one bar on stderr redrawn in place of the page lines; cleared before any other line."""

    def __init__(self, say: Say) -> None:
        self._say = say
        self._drawn = False

    def page(self, line: str, progress: Progress) -> None:
        sys.stderr.write(f"\r\033[K{bar(progress)}")
        sys.stderr.flush()
        self._drawn = True

    def say(self, line: str) -> None:
        if self._drawn:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
            self._drawn = False
        self._say(line)


def _report(summary: dict[str, Any]) -> None:
    print(json.dumps(summary, indent=2), flush=True)


def main(argv: Sequence[str] | None = None) -> None:
    sys.exit(run_migrate(parser().parse_args(argv)))


def run_migrate(args: argparse.Namespace) -> int:
    """Run migrate-storage as ``args`` ask; the exit code."""
    settings = MigrationSettings(
        kubeconfig=args.kubeconfig,
        context=args.context,
        qps=args.qps,
        page_size=args.page_size,
        probe_timeout=args.probe_timeout,
        dry_run=args.dry_run,
        only_if_needed=args.only_if_needed,
    )
    # -o json: stdout holds the summary alone, so a script can parse it; the lines go to stderr.
    say = _warn if args.output == "json" else _say
    terminal = TerminalBar(say) if sys.stderr.isatty() else None
    try:
        code = asyncio.run(
            migrate_storage(
                settings,
                terminal.say if terminal else say,
                terminal.say if terminal else _warn,
                on_page=terminal.page if terminal else None,
                report=_report if args.output == "json" else None,
            )
        )
    except KeyboardInterrupt:
        _warn("interrupted; run again to finish (Foos already re-written are not written again)")
        code = EXIT_INTERRUPTED
    except Exception as exc:  # a bug of ours: still one line for the user, never a traceback
        _warn(f"error: unexpected {type(exc).__name__}: {exc} (please report it); running again is safe")
        code = 1
    return code


if __name__ == "__main__":
    main()
