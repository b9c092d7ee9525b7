"""``kubectl-foo_operator``: kubectl's flags in, kubectl's output and errors out. Only wiring.

kubectl runs a plugin with the user's arguments and environment and nothing else, so the
plugin reads --kubeconfig, --context and -n itself, and defaults the namespace to the
context's, as kubectl does.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import re
import sys
from collections.abc import Sequence

from certs.rotator import APISERVICES, MUTATING, VALIDATING
from componentbase.cli import KUBECONFIG_HELP, add_subcommand, command_parser, subcommands
from componentbase.escaping import escape_controls
from controller.cli import MIGRATE_DESCRIPTION, MIGRATE_SUMMARY, add_migrate_flags, run_migrate
from insights.resources import FOO_HEALTHS
from kube.client import CRDS, ApiError, KubeClient, no_answer
from kube.config import ClientSettings, MissingContextError, connect
from kube.kubeconfig import KubeconfigError, context_namespace, load

from . import cabundles, health, output

PROG = "kubectl-foo_operator"  # kubectl shows it as `kubectl foo-operator`


def _cluster_flags(parser: argparse.ArgumentParser) -> None:
    """kubectl's connection flags, with kubectl's names and meanings."""
    parser.add_argument("--kubeconfig", help=KUBECONFIG_HELP)
    parser.add_argument("--context", help="kubeconfig context to use (default: the current one)")
    parser.add_argument("--as", dest="as_user", metavar="USER", help="username to impersonate for the operation")
    parser.add_argument(
        "--as-group",
        action="append",
        default=[],
        metavar="GROUP",
        help="group to impersonate for the operation (repeat for several)",
    )
    parser.add_argument(
        "--request-timeout",
        type=request_timeout,
        default=None,
        metavar="DURATION",
        help="how long to wait for one server request (1s, 2m, 3h; a bare number is seconds; 0: "
        "no limit) (default: 30s)",
    )


def request_timeout(value: str) -> float:
    """kubectl's --request-timeout: a Go duration of s, m or h (or ms), or bare seconds."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m|h)?", value.strip())
    if match is None:
        raise argparse.ArgumentTypeError(
            "Invalid timeout value. Timeout must be a single integer in seconds, or an integer followed "
            "by a corresponding time unit (e.g. 1s | 2m | 3h)"
        )
    return float(match[1]) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, None: 1}[match[2]]


def _output_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-o",
        "--output",
        type=output.output_format,
        metavar="FORMAT",
        help="wide: more columns; json, yaml: the objects; name: resource/name; jsonpath=TEMPLATE; "
        "custom-columns=HEADER:PATH,... (default: a table)",
    )


def parser() -> argparse.ArgumentParser:
    p = command_parser(
        "kubectl foo-operator",
        "kubectl plugin for foo-operator: Foo health, storage migration, and where the CA of every caBundle expires.",
    )
    commands = subcommands(p)
    health_ = add_subcommand(
        commands,
        "health",
        "show FooHealths (from the aggregated API)",
        "Shows the FooHealth of one Foo, or of every Foo in a namespace, read from the "
        "aggregated API insights.samplecontroller.k8s.io.",
    )
    health_.add_argument("name", nargs="?", help="a Foo's name (default: every Foo)")
    health_.add_argument("-n", "--namespace", help="namespace (default: the context's namespace, else default)")
    health_.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")
    health_.add_argument(
        "-l", "--selector", help="label selector of the Foos (=, ==, !=, in, notin, exists), e.g. app=web"
    )
    _cluster_flags(health_)
    _output_flag(health_)
    add_migrate_flags(add_subcommand(commands, "migrate-storage", MIGRATE_SUMMARY, MIGRATE_DESCRIPTION))
    certs = add_subcommand(
        commands,
        "certs",
        "show when the CA of each caBundle expires",
        "Lists every caBundle through which the apiserver trusts foo-operator (the admission "
        "webhooks, the Foo CRD's conversion webhook, the insights APIService) with the "
        "subject and expiry of each CA certificate in it.",
    )
    _cluster_flags(certs)
    _output_flag(certs)
    return p


def explain(err: ApiError) -> str:
    """kubectl's words: ``Error from server (Reason): message``; no answer at all is said so, with
    the apiserver's URL, as ``foo-operator migrate-storage`` says it."""
    if err.status == 0:
        return f"error: {no_answer(err)}"
    reason = err.reason if err.reason != "Unknown" else str(err.status)
    return f"Error from server ({reason}): {escape_controls(' '.join(str(err.message).split()))}"


async def _client(args: argparse.Namespace) -> KubeClient:
    settings = ClientSettings(
        user_agent="kubectl-foo-operator",
        impersonate_user=args.as_user,
        impersonate_groups=tuple(args.as_group),
        **({} if args.request_timeout is None else {"timeout": args.request_timeout}),
    )
    return await connect(args.kubeconfig, context=args.context, settings=settings)


async def show_health(args: argparse.Namespace) -> str:
    namespace = (
        None
        if args.all_namespaces
        else (args.namespace or context_namespace(load(args.kubeconfig).config, args.context) or "default")
    )
    async with await _client(args) as client:
        healths = await health.fetch(client, namespace, args.name, selector=args.selector)
    shown = healths[0] if args.name else {"apiVersion": "v1", "kind": "List", "items": healths}
    printed = output.objects(healths, shown, args.output or "", resource=health.RESOURCE)
    if printed is not None:
        return printed
    if not healths:
        where = "any namespace" if namespace is None else f"{namespace} namespace"
        return f"No resources found in {where}.\n"
    wide = args.output == "wide"
    rows = health.table_rows(healths, datetime.datetime.now(datetime.UTC), wide=wide, all_namespaces=namespace is None)
    return output.table(health.headers(wide=wide, all_namespaces=namespace is None), rows)


async def show_certs(args: argparse.Namespace) -> str:
    async with await _client(args) as client:
        bundles = [
            *cabundles.webhook_bundles(MUTATING.kind, (await client.list(MUTATING)).get("items") or ()),
            *cabundles.webhook_bundles(VALIDATING.kind, (await client.list(VALIDATING)).get("items") or ()),
            *cabundles.crd_bundles((await client.list(CRDS)).get("items") or ()),
            *cabundles.apiservice_bundles((await client.list(APISERVICES)).get("items") or ()),
        ]
    found = cabundles.rows(bundles, datetime.datetime.now(datetime.UTC))
    if args.output == "name":
        raise UsageError("--output name: a caBundle row is not an object of its own; use -o jsonpath or json")
    rows = [row.__dict__ for row in found]
    printed = output.objects(rows, rows, args.output or "", resource="")
    if printed is not None:
        return printed
    if not found:
        return "No caBundles of foo-operator found (is it installed?).\n"
    return output.table(cabundles.HEADERS, [row.cells() for row in found])


def _context_user(kubeconfig: str | None, context: str | None) -> str:
    """The kubeconfig user of the context in use, as kubectl names it in its refusals."""
    try:
        config = load(kubeconfig).config
    except Exception:
        return ""
    wanted = context or config.get("current-context")
    for entry in config.get("contexts") or ():
        if entry.get("name") == wanted:
            return str((entry.get("context") or {}).get("user", ""))
    return ""


# kubectl takes its global flags anywhere (cobra's persistent flags), so users write
# `kubectl foo-operator --context prod health`; argparse reads a subcommand's flags only after it.
LEADING_FLAGS = frozenset({"--kubeconfig", "--context", "--as", "--as-group", "--request-timeout", "-n", "--namespace"})


def subcommand_first(argv: Sequence[str]) -> list[str]:
    """``argv`` with kubectl's connection flags written before the subcommand moved after it.

    Only those flags, each with its value (``--context prod`` or ``--context=prod``). When no
    subcommand follows them, they are dropped, so argparse answers about what does follow
    (--help, --version, an unknown flag, no subcommand) rather than take a flag's value for the
    subcommand ("invalid choice: 'prod'").
    """
    moved: list[str] = []
    rest = list(argv)
    while rest and rest[0].split("=", 1)[0] in LEADING_FLAGS:
        taken = 1 if "=" in rest[0] else 2
        moved, rest = moved + rest[:taken], rest[taken:]
    if not moved or not rest or rest[0].startswith("-"):
        return rest
    return [rest[0], *moved, *rest[1:]]


class UsageError(Exception):
    """A flag combination found wrong only once the command knows what it prints: exit 2."""


def main(argv: Sequence[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(subcommand_first(sys.argv[1:] if argv is None else argv))
    if args.command == "migrate-storage":
        return run_migrate(args)
    if args.command == "health" and args.name and args.selector:
        p.exit(2, "error: name cannot be provided when a selector is specified\n")
    if args.as_group and args.as_user is None:
        user = _context_user(args.kubeconfig, args.context)
        p.exit(2, f"error: requesting uid, groups or user-extra for {user} without impersonating a user\n")
    run = show_health if args.command == "health" else show_certs
    try:
        sys.stdout.write(asyncio.run(run(args)))
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except MissingContextError as err:
        print(f"Error in configuration: {escape_controls(str(err))}", file=sys.stderr)  # kubectl's line, word for word
        return 1
    except KubeconfigError as err:
        print(f"error: {escape_controls(str(err))}", file=sys.stderr)
        return 1
    except ApiError as err:
        if err.not_found and args.command == "health" and not args.name:
            print(
                f'error: the server doesn\'t have a resource type "{FOO_HEALTHS.name}" '
                "(is foo-operator's insights APIService installed and available?)",
                file=sys.stderr,
            )
        else:
            print(explain(err), file=sys.stderr)
        return 1
    except Exception as err:  # the loaders raise anything from ConfigException to OS errors
        print(f"error: {type(err).__name__}: {escape_controls(' '.join(str(err).split()))}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
