"""`python -m webhook`: parse flags, wire the server, run until SIGTERM. No logic here."""

from __future__ import annotations

import argparse
import gc
import asyncio
import sys
from pathlib import Path

from datetime import timedelta

from certs.authority import service_dns_names
from certs.rotation import RotationPolicy
from fooapi import DEFAULT_IMAGE
from kube.logs import setup_logging

from .aggregated import AggregatedConfig
from .app import MiB, Settings
from .server import RotationOptions, ServerOptions, serve


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="foo-operator-webhook", description="foo-operator webhook service (TLS).")
    parser.add_argument("--cert-dir", type=Path, required=True, help="directory holding tls.crt and tls.key")
    parser.add_argument("--cert-name", default="tls.crt")
    parser.add_argument("--key-name", default="tls.key")
    parser.add_argument("--bind-address", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=9443)
    parser.add_argument("--default-image", default=DEFAULT_IMAGE, help="image given to Foos that name none")
    parser.add_argument("--admission-body-limit-mib", type=int, default=8)
    parser.add_argument("--conversion-body-limit-mib", type=int, default=256)
    parser.add_argument("--drain-seconds", type=float, default=0.0,
                        help="time between turning unready and closing the listener on SIGTERM")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    parser.add_argument("--log-format", default="text", choices=["text", "json"])
    parser.add_argument("--no-uvloop", action="store_true", help="use asyncio's own event loop")
    rotation = parser.add_argument_group("certificate rotation (the service keeps its own CA in a Secret)")
    rotation.add_argument("--cert-rotation", action="store_true", help="generate and rotate certificates")
    rotation.add_argument("--kubeconfig", help="kubeconfig (default: in-cluster)")
    rotation.add_argument("--cert-secret", default="foo-operator-certs", help="Secret that holds the certificates")
    rotation.add_argument("--namespace", default=_pod_namespace(), help="namespace of the Secret and lease")
    rotation.add_argument("--service", default="foo-operator-webhook", help="Service name (certificate DNS names)")
    rotation.add_argument("--extra-dns", action="append", default=[], help="additional DNS SAN (repeatable)")
    rotation.add_argument("--extra-ip", action="append", default=[], help="additional IP SAN (repeatable)")
    rotation.add_argument("--webhook-configuration", default="foo-operator",
                          help="name of the Mutating and Validating WebhookConfigurations to keep caBundle in")
    rotation.add_argument("--crd", default="foos.samplecontroller.k8s.io", help="CRD whose conversion caBundle to keep")
    rotation.add_argument("--apiservice", default="v1alpha1.insights.samplecontroller.k8s.io",
                          help="APIService whose caBundle to keep ('' to skip)")
    rotation.add_argument("--rotation-lease", default="foo-operator-cert-rotator",
                          help="Lease that elects the one replica that writes certificates")
    rotation.add_argument("--rotation-interval", type=float, default=30.0, help="seconds between rotation rounds")
    rotation.add_argument("--rotation-overlap", type=float, default=300.0,
                          help="seconds each CA change step waits for every client and replica")
    rotation.add_argument("--ca-validity-days", type=int, default=3650)
    rotation.add_argument("--serving-validity-days", type=int, default=365)
    rotation.add_argument("--renew-fraction", type=float, default=1 / 3,
                          help="renew when less than this fraction of a certificate's lifetime is left")
    aggregated = parser.add_argument_group("aggregated API insights.samplecontroller.k8s.io (needs --kubeconfig or in-cluster)")
    aggregated.add_argument("--aggregated-api", action="store_true", help="serve FooReview and FooHealth")
    aggregated.add_argument("--requestheader-ca-file", type=Path, default=Path("/tmp/foo-operator/requestheader-ca.crt"),
                            help="where the front-proxy CA from kube-system/extension-apiserver-authentication is "
                                 "written for the TLS layer")
    return parser.parse_args(argv)


def _pod_namespace() -> str:
    try:
        return Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace").read_text().strip()
    except OSError:
        return "default"


def _rotation(args: argparse.Namespace) -> RotationOptions | None:
    if not args.cert_rotation:
        return None
    return RotationOptions(
        namespace=args.namespace, secret_name=args.cert_secret,
        dns_names=(*service_dns_names(args.service, args.namespace), *args.extra_dns), ips=tuple(args.extra_ip),
        kubeconfig=args.kubeconfig, mutating=args.webhook_configuration or None,
        validating=args.webhook_configuration or None, crd=args.crd or None, apiservice=args.apiservice or None,
        interval=args.rotation_interval, lease_name=args.rotation_lease,
        policy=RotationPolicy(ca_validity=timedelta(days=args.ca_validity_days),
                              serving_validity=timedelta(days=args.serving_validity_days),
                              renew_fraction=args.renew_fraction, overlap=timedelta(seconds=args.rotation_overlap)),
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    setup_logging(args.log_level, args.log_format)
    if args.cert_rotation:
        if args.rotation_overlap <= args.rotation_interval:
            print("foo-operator-webhook: --rotation-overlap must be longer than --rotation-interval "
                  "(every replica needs a round to pick up a change)", file=sys.stderr)
            return 2
    for name in () if args.cert_rotation else (args.cert_name, args.key_name):
        if not (args.cert_dir / name).is_file():
            print(f"foo-operator-webhook: {args.cert_dir / name} does not exist "
                  f"(make one with: python -m certs generate --out {args.cert_dir})", file=sys.stderr)
            return 2
    if not 0 < args.port < 65536:
        print(f"foo-operator-webhook: --port {args.port} is not a TCP port", file=sys.stderr)
        return 2
    settings = Settings(
        default_image=args.default_image,
        admission_body_limit=args.admission_body_limit_mib * MiB,
        conversion_body_limit=args.conversion_body_limit_mib * MiB,
    )
    options = ServerOptions(cert_dir=args.cert_dir, cert_name=args.cert_name, key_name=args.key_name,
                            bind_address=args.bind_address, port=args.port, drain_seconds=args.drain_seconds,
                            rotation=_rotation(args),
                            aggregated=AggregatedConfig(default_image=args.default_image, kubeconfig=args.kubeconfig,
                                                        requestheader_ca_file=args.requestheader_ca_file)
                            if args.aggregated_api else None)
    runner = asyncio.run
    if not args.no_uvloop:
        try:
            import uvloop

            runner = uvloop.run
        except ImportError:
            pass
    # Everything imported so far lives as long as the process: move it out of the collector's
    # sight, so its full collections stop re-walking modules (bench.profile: -20% CPU on big reviews).
    gc.freeze()
    try:
        runner(serve(options, settings))
    except OSError as err:
        print(f"foo-operator-webhook: cannot serve on {args.bind_address}:{args.port}: {err.strerror or err}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
