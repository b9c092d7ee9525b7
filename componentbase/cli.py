"""The one command-line pattern every foo-operator command follows (component-base's cli).

Each command builds its parser with ``command_parser``: ``--version``, every default shown in
``--help``, environment fallbacks named in the help the way kubectl and helm name theirs, and a
mistake on the command line is one line on stderr and exit 2 (argparse's usage dump hides the
line that matters). The argument types say in words what they want.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import NoReturn

DISTRIBUTION = "foo-operator"
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
KUBECONFIG_HELP = (
    "kubeconfig file (default: the files in $KUBECONFIG merged as kubectl does, else ~/.kube/config, "
    "else the in-cluster service account)"
)


def version() -> str:
    """The installed distribution's version; a source tree that was never installed says so."""
    from importlib import metadata  # only when asked: reading it would slow every start

    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "0.0.0+uninstalled"


class DefaultsShown(argparse.HelpFormatter):
    """Appends ``(default: X)`` to every option that has a default worth showing.

    argparse's own ArgumentDefaultsHelpFormatter also prints ``(default: None)`` and
    ``(default: False)`` for flags, which says nothing; a help that states its default in words
    already (``default:`` in the text) is left as written.
    """

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            "default" in text
            or default is None
            or default is False
            or default == []
            or default is argparse.SUPPRESS
            or not action.option_strings
        ):
            return text
        shown = ",".join(map(str, default)) if isinstance(default, (list, tuple)) else "%(default)s"
        return f"{text} (default: {shown})" if text else f"(default: {shown})"


class CommandParser(argparse.ArgumentParser):
    """An ArgumentParser whose mistakes are one line: ``prog: error: what (see --help)``."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class _PrintVersion(argparse.Action):
    """``--version``: the version is looked up only when asked for (webhook start-up is measured)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        print(f"{parser.prog} {version()}")  # on stdout, as argparse's own version action does
        parser.exit()


def command_parser(prog: str, description: str) -> CommandParser:
    parser = CommandParser(prog=prog, description=description, formatter_class=DefaultsShown)
    parser.add_argument("--version", action=_PrintVersion, help="print the version and exit")
    return parser


def subcommands(parser: argparse.ArgumentParser) -> argparse._SubParsersAction[CommandParser]:
    """Sub-commands that share the pattern (their own --help shows defaults; errors are one line)."""
    return parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", help="one of:", parser_class=CommandParser
    )


def add_subcommand(
    commands: argparse._SubParsersAction[CommandParser], name: str, summary: str, description: str
) -> CommandParser:
    return commands.add_parser(name, help=summary, description=description, formatter_class=DefaultsShown)


def env_default(name: str, default: str, environ: Mapping[str, str] = os.environ) -> str:
    """``$name`` when set and not empty, else ``default``: a string, so argparse still applies ``type``."""
    return environ.get(name) or default


def pod_namespace(environ: Mapping[str, str] = os.environ, file: Path = SERVICE_ACCOUNT_NAMESPACE) -> str:
    """client-go's in-cluster namespace: $POD_NAMESPACE, then the service account's file, then default."""
    if environ.get("POD_NAMESPACE"):
        return environ["POD_NAMESPACE"]
    try:
        return file.read_text().strip() or "default"
    except OSError:
        return "default"


def add_log_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="least severe log line written",
    )
    parser.add_argument(
        "--log-format", default="text", choices=["text", "json"], help="text for people, json for log collectors"
    )


def fail(prog: str, message: str, code: int = 1) -> int:
    """Print one line for the user; the caller returns the code."""
    print(f"{prog}: {message}", file=sys.stderr, flush=True)
    return code


# ---- argument types: each says in words what it wants ------------------------------------------


def _number(text: str, kind: type[int] | type[float]) -> float:
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a {'whole ' if kind is int else ''}number") from None


def any_float(text: str) -> float:
    return _number(text, float)


def positive_int(text: str) -> int:
    value = int(_number(text, int))
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not at least 1")
    return value


def int_between(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(_number(text, int))
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text!r} is not from {low} to {high}")
        return value

    return parse


def positive_float(text: str) -> float:
    value = _number(text, float)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not greater than 0")
    return value


def non_negative_float(text: str) -> float:
    value = _number(text, float)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not 0 or more")
    return value


def count_or_auto(text: str) -> int | None:
    """A count of 1 or more, or ``auto`` (None: the caller works it out, e.g. from the CPU limit)."""
    if text.strip().lower() == "auto":
        return None
    try:
        return positive_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither auto nor a whole number of at least 1") from None


def port(text: str) -> int:
    value = int(_number(text, int))
    if not 0 < value < 65536:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (1-65535)")
    return value


def parse_bind_address(text: str, flag: str = "--metrics-bind-address") -> tuple[str | None, int]:
    """controller-runtime's form: ``host:port``, ``:port`` (every interface) or ``0`` (off).

    ValueError with one line when it is none of them.
    """
    if text.strip() == "0":
        return None, 0
    host, sep, port_text = text.strip().rpartition(":")
    if not sep or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"{flag} {text!r} is not host:port, :port or 0")
    host = host.removeprefix("[").removesuffix("]")
    return host or None, int(port_text)


def bind_address(flag: str) -> Callable[[str], tuple[str | None, int]]:
    """controller-runtime's ``host:port`` / ``:port`` / ``0`` for ``flag``, as (host, port)."""

    def parse(text: str) -> tuple[str | None, int]:
        try:
            return parse_bind_address(text, flag)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err).removeprefix(f"{flag} ")) from None

    return parse
