"""`foo-operator-certs generate ...`: a CA and a serving certificate for a Service, as files."""

from __future__ import annotations

import argparse
import ipaddress
import re
import sys
from collections.abc import Callable
from pathlib import Path

from componentbase.cli import add_subcommand, command_parser, fail, subcommands

from .authority import issue_serving, new_ca, service_dns_names
from .files import CA_CERT, TLS_CERT, TLS_KEY, AlreadyExists, write_serving_files

PROG = "foo-operator-certs"
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_FILE_NAME = re.compile(r"[^/\0]+")


def _dns_label(kind: str) -> Callable[[str], str]:
    def check(value: str) -> str:
        if len(value) > 63 or not _DNS_LABEL.fullmatch(value):
            raise argparse.ArgumentTypeError(f"{kind} {value!r} is not a DNS-1123 label (lower case, digits, '-')")
        return value

    return check


def _file_name(value: str) -> str:
    if value in (".", "..") or not _FILE_NAME.fullmatch(value):
        raise argparse.ArgumentTypeError(f"{value!r} is not a file name (no '/')")
    return value


def _ip(value: str) -> str:
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an IP address") from None


def _days(value: str) -> int:
    try:
        days = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number of days") from None
    if not 1 <= days <= 36500:
        raise argparse.ArgumentTypeError(f"--days must be from 1 to 36500, got {days}")
    return days


def parser() -> argparse.ArgumentParser:
    parser = command_parser(PROG, "Make a CA and serving certificates for foo-operator.")
    generate = add_subcommand(
        subcommands(parser),
        "generate",
        f"write {CA_CERT}, {TLS_CERT} and {TLS_KEY} for a Service",
        f"Writes a new CA ({CA_CERT}, 10 years) and a serving certificate and key it signed for "
        "the Service's DNS names, localhost and any extra names, into --out.",
    )
    generate.add_argument("--service", type=_dns_label("service"), required=True, help="Service name")
    generate.add_argument("--namespace", type=_dns_label("namespace"), required=True, help="Service namespace")
    generate.add_argument("--out", type=Path, required=True, help="directory to write into")
    generate.add_argument("--days", type=_days, default=365, help="serving certificate lifetime (CA: 10 years)")
    generate.add_argument("--ip", type=_ip, action="append", default=[], help="extra IP SAN (repeatable)")
    generate.add_argument("--dns", action="append", default=[], help="extra DNS SAN (repeatable)")
    generate.add_argument("--key-type", choices=["ecdsa", "rsa"], default="ecdsa", help="ECDSA P-256 or RSA 2048")
    generate.add_argument(
        "--cert-name",
        type=_file_name,
        default=TLS_CERT,
        help="file name of the serving certificate (the servers' --cert-name)",
    )
    generate.add_argument(
        "--key-name", type=_file_name, default=TLS_KEY, help="file name of the private key (the servers' --key-name)"
    )
    generate.add_argument("--force", action="store_true", help="overwrite existing files")
    return parser


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    return parser().parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    ca = new_ca(f"foo-operator-ca@{args.namespace}", key_type=args.key_type)
    dns_names = [*service_dns_names(args.service, args.namespace), "localhost", *args.dns]
    serving = issue_serving(
        ca,
        common_name=f"{args.service}.{args.namespace}.svc",
        dns_names=dns_names,
        ips=args.ip,
        days=args.days,
        key_type=args.key_type,
    )
    try:
        written = write_serving_files(
            args.out, ca, serving, force=args.force, cert_name=args.cert_name, key_name=args.key_name
        )
    except AlreadyExists as err:
        return fail(PROG, str(err))
    except OSError as err:
        return fail(PROG, f"cannot write to {args.out}: {err.strerror or err}")
    print(f"wrote {', '.join(str(p) for p in written)} (valid {args.days} days)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
