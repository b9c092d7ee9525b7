"""The webhook's command: its flags, the settings and serving options they make, how many
processes serve (``--workers``) and what of the memory limit each may hold, and the server they
start.

Started by ``webhook.launcher`` (the console script, and ``python -m webhook``), which pauses
the collector before this module's imports run. Start-up, step by step:

1. ``main``: flags checked, process limits raised, the worker count decided;
2. with more than one worker, ``serving.workers.supervise`` forks them, each into ``serve_as``;
3. ``serve_as``: settings and serving options, then ``run_server`` on uvloop;
4. ``webhook.server.serve``: metrics, the serving pair, the app on its listener;
5. ``serving.lifecycle.serve_until_stopped``: listening, ready, draining on SIGTERM.
"""

from __future__ import annotations

import argparse
import importlib
from datetime import timedelta

from apimachinery.admission import REVIEW_BODY_LIMIT
from certs.policy import RotationPolicy
from componentbase.cli import (
    KUBECONFIG_HELP,
    command_parser,
    count_or_auto,
    env_default,
    fail,
    int_between,
    parse_bind_address,
    pod_namespace,
    positive_float,
    positive_int,
)
from componentbase.logs import setup_logging
from fooapi import DEFAULT_IMAGE
from fooapi.images import image_reference
from serving.budget import (
    CLIENT_MIB,
    RESERVED_MIB,
    WORKER_BUDGET_MIB,
    MiB,
    budget_for_memory_limit,
    processes_memory_feeds,
)
from serving.lifecycle import add_serving_flags, check_serving_flags, run_server, serving_options
from serving.limits import keep_large_blocks_out_of_the_heap, raise_open_file_limit
from serving.workers import Worker, supervise

from .app import CONVERSION_BODY_LIMIT_MIB, Settings, admission_deadline
from .manifests import TIMEOUT_SECONDS
from .server import RotationOptions, ServerOptions, serve

PROG = "foo-operator-webhook"


def parser() -> argparse.ArgumentParser:
    parser = command_parser(PROG, "foo-operator webhook service: admission and conversion over TLS.")
    add_serving_flags(parser, default_port=9443)
    parser.add_argument(
        "--workers",
        type=count_or_auto,
        default=env_default("WEBHOOK_WORKERS", "auto"),
        help="processes serving the port together (SO_REUSEPORT), with a supervisor when more than 1; "
        "auto: the container's CPU limit from its cgroup, rounded down, else the CPUs it may run on, "
        f"at most one per {RESERVED_MIB + WORKER_BUDGET_MIB} MiB of --memory-limit-mib less its quarter kept as "
        f"headroom and, with --metrics-secure or --cert-rotation, {CLIENT_MIB} MiB for the Kubernetes client "
        "[env WEBHOOK_WORKERS] "
        "(default: auto)",
    )
    parser.add_argument(
        "--default-image", type=image_reference, default=DEFAULT_IMAGE, help="image given to Foos that name none"
    )
    parser.add_argument(
        "--admission-body-limit-mib",
        type=positive_int,
        default=REVIEW_BODY_LIMIT // MiB,
        help="largest AdmissionReview body accepted, in MiB",
    )
    parser.add_argument(
        "--conversion-body-limit-mib",
        type=positive_int,
        default=CONVERSION_BODY_LIMIT_MIB,
        help="largest ConversionReview body accepted, in MiB",
    )
    parser.add_argument(
        "--memory-limit-mib",
        type=positive_int,
        default=env_default("MEMORY_LIMIT_MIB", "256"),
        help="the container's memory limit [env MEMORY_LIMIT_MIB, which the chart sets from "
        f"limits.memory through the downward API]; request bodies may hold all of it but a quarter "
        f"(at least 16 MiB), {RESERVED_MIB} MiB per worker and the client's {CLIENT_MIB} MiB when used, at once",
    )
    parser.add_argument(
        "--admission-timeout-seconds",
        type=int_between(1, 30),
        default=TIMEOUT_SECONDS,
        help="the admission configurations' timeoutSeconds: each review is answered (or refused "
        "with 504) that much earlier, so the apiserver gets our answer, not its own timeout",
    )
    parser.add_argument(
        "--max-in-flight-mib",
        type=positive_int,
        default=None,
        help="bytes of request bodies, raw and parsed, held at once by each worker (default: from "
        "--memory-limit-mib, split between the workers)",
    )
    rotation = parser.add_argument_group("certificate rotation (the service keeps its own CA in a Secret)")
    rotation.add_argument("--cert-rotation", action="store_true", help="generate and rotate certificates")
    rotation.add_argument("--kubeconfig", help=f"for rotation and --metrics-secure: {KUBECONFIG_HELP}")
    rotation.add_argument("--cert-secret", default="foo-operator-certs", help="Secret that holds the certificates")
    rotation.add_argument(
        "--namespace",
        default=pod_namespace(),
        help="namespace of the Secret and lease (default: $POD_NAMESPACE, else the pod's own, else default)",
    )
    rotation.add_argument("--service", default="foo-operator-webhook", help="Service name (certificate DNS names)")
    rotation.add_argument("--extra-dns", action="append", default=[], help="additional DNS SAN (repeatable)")
    rotation.add_argument("--extra-ip", action="append", default=[], help="additional IP SAN (repeatable)")
    rotation.add_argument(
        "--webhook-configuration",
        default="foo-operator",
        help="name of the Mutating and Validating WebhookConfigurations to keep caBundle in",
    )
    rotation.add_argument("--crd", default="foos.samplecontroller.k8s.io", help="CRD whose conversion caBundle to keep")
    rotation.add_argument(
        "--apiservice",
        default="v1alpha1.insights.samplecontroller.k8s.io",
        help="APIService whose caBundle to keep ('' to skip)",
    )
    rotation.add_argument(
        "--rotation-lease",
        default="foo-operator-cert-rotator",
        help="Lease that elects the one replica that writes certificates",
    )
    rotation.add_argument(
        "--rotation-interval", type=positive_float, default=30.0, help="seconds between rotation rounds"
    )
    rotation.add_argument(
        "--rotation-overlap",
        type=positive_float,
        default=300.0,
        help="seconds each CA change step waits for every client and replica",
    )
    rotation.add_argument("--ca-validity-days", type=positive_int, default=3650, help="lifetime of a new CA")
    rotation.add_argument(
        "--serving-validity-days", type=positive_int, default=365, help="lifetime of a new serving certificate"
    )
    rotation.add_argument(
        "--renew-fraction",
        type=positive_float,
        default=1 / 3,
        help="renew when less than this fraction of a certificate's lifetime is left (default: 1/3)",
    )
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return parser().parse_args(argv)


def _rotation(args: argparse.Namespace) -> RotationOptions | None:
    if not args.cert_rotation:
        return None
    # Here, not at the top: certs.authority imports cryptography, which a webhook serving
    # certificates from files does not need before its first review.
    from certs.authority import service_dns_names

    return RotationOptions(
        namespace=args.namespace,
        secret_name=args.cert_secret,
        dns_names=tuple(dict.fromkeys((*service_dns_names(args.service, args.namespace), *args.extra_dns))),
        ips=tuple(args.extra_ip),
        kubeconfig=args.kubeconfig,
        mutating=args.webhook_configuration or None,
        validating=args.webhook_configuration or None,
        crd=args.crd or None,
        apiservice=args.apiservice or None,
        interval=args.rotation_interval,
        lease_name=args.rotation_lease,
        policy=RotationPolicy(
            ca_validity=timedelta(days=args.ca_validity_days),
            serving_validity=timedelta(days=args.serving_validity_days),
            renew_fraction=args.renew_fraction,
            overlap=timedelta(seconds=args.rotation_overlap),
        ),
    )


def settings_from(args: argparse.Namespace, processes: int = 1) -> Settings:
    """The app's settings; with ``processes`` workers the memory limit's budget is split between them."""
    return Settings(
        default_image=args.default_image,
        admission_body_limit=args.admission_body_limit_mib * MiB,
        conversion_body_limit=args.conversion_body_limit_mib * MiB,
        admission_timeout=admission_deadline(args.admission_timeout_seconds),
        in_flight_budget=(
            args.max_in_flight_mib * MiB
            if args.max_in_flight_mib is not None
            else budget_for_memory_limit(args.memory_limit_mib, processes, shared_mib=client_mib(args))
        ),
        memory_limit_mib=args.memory_limit_mib,
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    setup_logging(args.log_level, args.log_format)
    if args.cert_rotation:
        if args.rotation_overlap <= args.rotation_interval:
            return fail(
                PROG,
                "--rotation-overlap must be longer than --rotation-interval "
                "(every replica needs a round to pick up a change)",
                2,
            )
    problem = check_serving_flags(
        args, PROG, certificates_made_here=args.cert_rotation, service=args.service, namespace=args.namespace
    )
    if problem is not None:
        return fail(PROG, problem, 2)
    raise_open_file_limit()  # before the workers fork: each inherits it
    keep_large_blocks_out_of_the_heap()  # and this
    count = workers(args)
    if count > 1:
        import_what_workers_share(args)
        return supervise(count, lambda worker: serve_as(args, worker), prog=PROG)
    return serve_as(args, None)


def import_what_workers_share(args: argparse.Namespace) -> None:
    """Import, in the supervisor, the modules every worker would otherwise import for itself
    after the fork: the metrics listener's aiohttp and, for `--metrics-secure` (TokenReview) or
    `--cert-rotation`, the Kubernetes client. Imported once before the fork, their pages are
    shared copy-on-write and the pod's cgroup is charged for them once, not once per worker:
    with `--metrics-secure` each worker held kubernetes_asyncio's pages of its own, more than the
    memory plan (serving.budget) gives a worker, and the chart's pod went past its
    limit under attack (issue #25)."""
    _, metrics_port = parse_bind_address(args.metrics_bind_address)
    shared = ["aiohttp.web"] if metrics_port else []
    if metrics_port and args.metrics_secure:
        shared += ["serving.metricsauth"]
    if talks_to_the_apiserver(args):
        shared += ["kube.config"]
    if args.cert_rotation:
        shared += ["kube.leader", "certs.rotator"]
    for module in shared:
        importlib.import_module(module)


def serve_as(args: argparse.Namespace, worker: Worker | None) -> int:
    """Serve as the only process (``worker`` None) or as one of several."""
    settings = settings_from(args, worker.count if worker is not None else 1)
    options = serving_options(
        args,
        ServerOptions,
        reuse_port=worker is not None,
        rotation=_rotation(args),
        kubeconfig=args.kubeconfig,
        worker=worker,
    )
    return run_server(serve(options, settings), args, PROG)


def workers(args: argparse.Namespace) -> int:
    """--workers as a count. ``auto``: one per CPU of the container (serving.cpus, read only when
    asked), but no more than its memory limit feeds, each with room for request bodies: the
    chart sets no CPU limit, and a 64-core node must not put 64 workers into 256 MiB."""
    if args.workers is not None:
        return int(args.workers)
    from serving.cpus import auto_workers

    return min(auto_workers(), processes_memory_feeds(args.memory_limit_mib, shared_mib=client_mib(args)))


def talks_to_the_apiserver(args: argparse.Namespace) -> bool:
    """Whether the processes hold a Kubernetes client: TokenReviews for a secure `/metrics`, or
    the certificate rotator."""
    _, metrics_port = parse_bind_address(args.metrics_bind_address)
    return bool(args.cert_rotation or (metrics_port and args.metrics_secure))


def client_mib(args: argparse.Namespace) -> int:
    """What of the memory limit the Kubernetes client holds, once per pod (serving.budget.CLIENT_MIB)."""
    return CLIENT_MIB if talks_to_the_apiserver(args) else 0
