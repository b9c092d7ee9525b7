"""``kubectl-foo``: kubectl's flags in, kubectl's output and errors out. Only wiring.

kubectl runs a plugin with the user's arguments and environment and nothing else, so the
plugin reads --kubeconfig, --context and -n itself, and defaults the namespace to the
context's, as kubectl does.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import sys
from collections.abc import Sequence

from certs.rotator import APISERVICES, MUTATING, VALIDATING
from controller.cli import MIGRATE_DESCRIPTION, MIGRATE_SUMMARY, add_migrate_flags, run_migrate
from insights.resources import FOO_HEALTHS
from kube.cli import KUBECONFIG_HELP, add_subcommand, command_parser, subcommands
from kube.client import CRDS, ApiError, KubeClient
from kube.config import ClientSettings, connect
from kube.kubeconfig import KubeconfigError, context_namespace, load

from . import cabundles, health, output

PROG = "kubectl-foo"  # kubectl shows it as `kubectl foo`


def _cluster_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", help=KUBECONFIG_HELP)
    parser.add_argument("--context", help="kubeconfig context to use (default: the current one)")


def _output_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-o",
        "--output",
        choices=output.FORMATS,
        help="wide: more columns; json or yaml: the objects (default: a table)",
    )


def parser() -> argparse.ArgumentParser:
    p = command_parser(
        "kubectl foo",
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
    """kubectl's words: ``Error from server (Reason): message``; no answer at all is said so."""
    if err.status == 0:
        return f"error: no answer from the apiserver: {err.message}"
    reason = err.reason if err.reason != "Unknown" else str(err.status)
    return f"Error from server ({reason}): {' '.join(str(err.message).split())}"


async def _client(args: argparse.Namespace) -> KubeClient:
    return await connect(args.kubeconfig, context=args.context, settings=ClientSettings(user_agent="kubectl-foo"))


async def show_health(args: argparse.Namespace) -> str:
    namespace = (
        None
        if args.all_namespaces
        else (args.namespace or context_namespace(load(args.kubeconfig).config, args.context) or "default")
    )
    async with await _client(args) as client:
        healths = await health.fetch(client, namespace, args.name)
    if args.output in ("json", "yaml"):
        shown = healths[0] if args.name else {"apiVersion": "v1", "kind": "List", "items": healths}
        return output.document(shown, args.output)
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
    if args.output in ("json", "yaml"):
        return output.document([row.__dict__ for row in found], args.output)
    if not found:
        return "No caBundles of foo-operator found (is it installed?).\n"
    return output.table(cabundles.HEADERS, [row.cells() for row in found])


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "migrate-storage":
        return run_migrate(args)
    run = show_health if args.command == "health" else show_certs
    try:
        sys.stdout.write(asyncio.run(run(args)))
    except KubeconfigError as err:
        print(f"error: {err}", file=sys.stderr)
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
        print(f"error: {type(err).__name__}: {' '.join(str(err).split())}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
