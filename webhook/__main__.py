"""`python -m webhook`: parse flags, wire the server, run until SIGTERM. No logic here."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from fooapi import DEFAULT_IMAGE
from kube.logs import setup_logging

from .app import MiB, Settings
from .server import ServerOptions, serve


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
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    setup_logging(args.log_level, args.log_format)
    for name in (args.cert_name, args.key_name):
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
                            bind_address=args.bind_address, port=args.port, drain_seconds=args.drain_seconds)
    runner = asyncio.run
    if not args.no_uvloop:
        try:
            import uvloop

            runner = uvloop.run  # type: ignore[assignment]
        except ImportError:
            pass
    try:
        runner(serve(options, settings))
    except OSError as err:
        print(f"foo-operator-webhook: cannot serve on {args.bind_address}:{args.port}: {err.strerror or err}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
