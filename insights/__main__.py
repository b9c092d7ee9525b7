"""`python -m insights`: parse flags, wire the aggregated API server, run until SIGTERM. No logic here."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from componentbase.cli import KUBECONFIG_HELP, command_parser, env_default, fail, positive_int
from componentbase.logs import setup_logging
from fooapi import DEFAULT_IMAGE
from fooapi.images import image_reference
from serving.lifecycle import ServingOptions, add_serving_flags, check_serving_flags, run_server, serving_options
from serving.limits import keep_large_blocks_out_of_the_heap, raise_open_file_limit

from .config import AggregatedConfig
from .server import serve
from .wiring import ClusterConfigError

PROG = "foo-operator-insights"


def parser() -> argparse.ArgumentParser:
    parser = command_parser(
        PROG,
        "foo-operator insights server: the aggregated API insights.samplecontroller.k8s.io "
        "(FooReview, FooHealth) over TLS, behind an APIService.",
    )
    add_serving_flags(parser, default_port=8443)
    parser.add_argument("--kubeconfig", help=KUBECONFIG_HELP)
    parser.add_argument(
        "--namespace",
        help="watch only this namespace (default: all): the controller's, so FooHealths are the Foos it "
        "reconciles and the informers need read access there alone",
    )
    parser.add_argument(
        "--default-image", type=image_reference, default=DEFAULT_IMAGE, help="image FooReviews default a Foo to"
    )
    parser.add_argument(
        "--requestheader-ca-file",
        type=Path,
        default=Path("/tmp/foo-operator/requestheader-ca.crt"),
        help="where the front-proxy CA from kube-system/extension-apiserver-authentication is "
        "written for the TLS layer",
    )
    parser.add_argument(
        "--memory-limit-mib",
        type=positive_int,
        default=env_default("MEMORY_LIMIT_MIB", "256"),
        help="the container's memory limit [env MEMORY_LIMIT_MIB, which the chart sets from limits.memory "
        "through the downward API]; FooReviews in progress and the FooHealth history may hold a share of it",
    )
    parser.add_argument(
        "--list-history-seconds",
        type=float,
        default=300.0,
        help="how long a FooHealth list can still be read as it was (resourceVersionMatch=Exact, continue "
        "tokens, watches resuming); older versions answer 410 Expired, as after etcd's compaction",
    )
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return parser().parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    setup_logging(args.log_level, args.log_format)
    problem = check_serving_flags(args, PROG)
    if problem is not None:
        return fail(PROG, problem, 2)
    options: ServingOptions = serving_options(args)
    config = AggregatedConfig(
        default_image=args.default_image,
        kubeconfig=args.kubeconfig,
        namespace=args.namespace or None,
        requestheader_ca_file=args.requestheader_ca_file,
        memory_limit_mib=args.memory_limit_mib,
        history_window=args.list_history_seconds,
    )
    raise_open_file_limit()
    keep_large_blocks_out_of_the_heap()
    try:
        return run_server(serve(options, config), args, PROG)
    except ClusterConfigError as err:
        return fail(PROG, str(err))


if __name__ == "__main__":
    sys.exit(main())
