"""Serving certificates for the component tests that speak TLS, made by the real `certs` CLI."""

from __future__ import annotations

from pathlib import Path

from certs.__main__ import main as certs_main


def serving_certificates(out: Path, *flags: str) -> Path:
    """`foo-operator-certs generate` for the webhook Service and 127.0.0.1 into ``out`` (returned).

    ``flags`` are more of the CLI's, e.g. ``--force`` to replace them or ``--key-type ecdsa``.
    """
    argv = ["generate", "--service", "foo-webhook", "--namespace", "ns", "--out", str(out), "--ip", "127.0.0.1"]
    assert certs_main([*argv, *flags]) == 0
    return out
