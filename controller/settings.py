"""Command-line settings of ``python -m controller``."""

from __future__ import annotations

import argparse
import socket
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from certs.files import TLS_CERT, TLS_KEY
from componentbase.cli import (
    KUBECONFIG_HELP,
    add_log_flags,
    any_float,
    bind_address,
    command_parser,
    non_negative_float,
    pod_namespace,
    positive_int,
)
from fooapi.defaults import DEFAULT_IMAGE
from fooapi.images import image_reference
from serving.metricsserver import MetricsOptions


def _identity() -> str:
    # client-go's convention: hostname plus a uuid, unique even for two processes on one host.
    return f"{socket.gethostname()}_{uuid.uuid4()}"


@dataclass(frozen=True)
class Settings:
    kubeconfig: str | None = None
    namespace: str | None = None
    workers: int = 16
    leader_elect: bool = False
    leader_elect_namespace: str = field(default_factory=pod_namespace)
    leader_elect_name: str = "foo-operator-controller"
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    identity: str = field(default_factory=_identity)
    # Metrics on loopback unless asked otherwise: a plain-HTTP /metrics must not face the pod network.
    metrics: MetricsOptions = MetricsOptions(host="127.0.0.1", port=8080)
    metrics_cert_dir: str | None = None  # secure metrics without one: a self-signed pair
    # Probes stay plain HTTP on every interface: the kubelet calls them from the node.
    health_host: str | None = None
    health_port: int = 8081
    qps: float = 1000.0
    burst: int = 2000
    default_image: str = DEFAULT_IMAGE
    shutdown_grace: float = 30.0
    log_level: str = "info"
    log_format: str = "text"


def parser() -> argparse.ArgumentParser:
    p = command_parser("foo-operator-controller", "Reconciles samplecontroller.k8s.io Foos into nginx Deployments.")
    p.add_argument("--kubeconfig", help=KUBECONFIG_HELP)
    p.add_argument("--namespace", help="watch only this namespace (default: all)")
    p.add_argument("--workers", type=positive_int, default=Settings.workers, help="concurrent reconciles")
    p.add_argument("--leader-elect", action="store_true", help="run only while holding the Lease")
    p.add_argument(
        "--leader-elect-namespace",
        help="namespace of the Lease (default: $POD_NAMESPACE, else the pod's own, else default)",
    )
    p.add_argument("--leader-elect-name", default=Settings.leader_elect_name, help="name of the Lease")
    p.add_argument(
        "--leader-elect-lease-duration",
        type=non_negative_float,
        default=Settings.lease_duration,
        metavar="SECONDS",
        help="how long a Lease holds without renewal",
    )
    p.add_argument(
        "--leader-elect-renew-deadline",
        type=non_negative_float,
        default=Settings.renew_deadline,
        metavar="SECONDS",
        help="how long the leader keeps trying to renew before it stops",
    )
    p.add_argument(
        "--leader-elect-retry-period",
        type=non_negative_float,
        default=Settings.retry_period,
        metavar="SECONDS",
        help="time between attempts to take or renew the Lease",
    )
    p.add_argument("--identity", help="leader-election identity (default: hostname_uuid)")
    p.add_argument(
        "--metrics-bind-address",
        type=bind_address("--metrics-bind-address"),
        default=("127.0.0.1", 8080),
        metavar="ADDRESS",
        help="host:port or :port for /metrics (default 127.0.0.1:8080; 0: off)",
    )
    p.add_argument(
        "--metrics-secure",
        action="store_true",
        help="serve /metrics over HTTPS to callers whose bearer token passes a TokenReview and a "
        "SubjectAccessReview (get on /metrics)",
    )
    p.add_argument(
        "--metrics-cert-dir",
        help=f"directory with {TLS_CERT} and {TLS_KEY} for secure metrics (default: a self-signed pair made at start)",
    )
    p.add_argument(
        "--health-probe-bind-address",
        type=bind_address("--health-probe-bind-address"),
        default=(None, 8081),
        metavar="ADDRESS",
        help="host:port or :port for /healthz and /readyz, plain HTTP (default :8081; 0: off)",
    )
    p.add_argument(
        "--qps", type=any_float, default=Settings.qps, help="client-side requests per second (<= 0: no limit)"
    )
    p.add_argument("--burst", type=positive_int, default=Settings.burst, help="client-side burst")
    p.add_argument(
        "--default-image", type=image_reference, default=Settings.default_image, help="image for Foos that name none"
    )
    p.add_argument(
        "--shutdown-grace",
        type=non_negative_float,
        default=Settings.shutdown_grace,
        metavar="SECONDS",
        help="how long in-flight reconciles may take to finish on shutdown",
    )
    add_log_flags(p)
    return p


def parse(argv: Sequence[str] | None = None) -> Settings:
    args = parser().parse_args(argv)
    if not args.leader_elect_lease_duration > args.leader_elect_renew_deadline > args.leader_elect_retry_period > 0:
        parser().error("need lease duration > renew deadline > retry period > 0")
    extra = {}
    if args.leader_elect_namespace:
        extra["leader_elect_namespace"] = args.leader_elect_namespace
    if args.identity:
        extra["identity"] = args.identity
    return Settings(
        kubeconfig=args.kubeconfig,
        namespace=args.namespace,
        workers=args.workers,
        leader_elect=args.leader_elect,
        leader_elect_name=args.leader_elect_name,
        lease_duration=args.leader_elect_lease_duration,
        renew_deadline=args.leader_elect_renew_deadline,
        retry_period=args.leader_elect_retry_period,
        metrics=MetricsOptions(
            host=args.metrics_bind_address[0], port=args.metrics_bind_address[1], secure=args.metrics_secure
        ),
        metrics_cert_dir=args.metrics_cert_dir,
        health_host=args.health_probe_bind_address[0],
        health_port=args.health_probe_bind_address[1],
        qps=args.qps,
        burst=args.burst,
        default_image=args.default_image,
        shutdown_grace=args.shutdown_grace,
        log_level=args.log_level,
        log_format=args.log_format,
        **extra,
    )
