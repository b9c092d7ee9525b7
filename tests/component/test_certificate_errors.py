"""A serving pair that does not load is named, file by file, in the one line a process exits with.

OpenSSL's own answer (`[SSL] PEM lib`, `KEY_VALUES_MISMATCH`) names no file, and the webhook used to
print it as `cannot serve on 0.0.0.0:9443: ...`, blaming the port.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from certs.__main__ import main as certs_main
from hack.cluster import free_port
from hack.product import webhook_args
from serving.tls import CertificateFilesError, CertWatcher


def _pair(directory: Path, service: str = "foo-webhook") -> Path:
    assert certs_main(["generate", "--service", service, "--namespace", "ns", "--out", str(directory)]) == 0
    return directory


def _garbage_certificate(cert_dir: Path, _: Path) -> str:
    (cert_dir / "tls.crt").write_text("not a certificate\n")
    return f"{cert_dir / 'tls.crt'}: not a PEM certificate"


def _garbage_key(cert_dir: Path, _: Path) -> str:
    (cert_dir / "tls.key").write_text("not a key\n")
    return f"{cert_dir / 'tls.key'}: not a PEM private key"


def _key_of_another_pair(cert_dir: Path, other: Path) -> str:
    (cert_dir / "tls.key").write_bytes((_pair(other, "other") / "tls.key").read_bytes())
    return f"{cert_dir / 'tls.key'} is not the private key of the certificate in {cert_dir / 'tls.crt'}"


BREAKAGES: dict[str, Callable[[Path, Path], str]] = {
    "garbage certificate": _garbage_certificate,
    "garbage key": _garbage_key,
    "key of another pair": _key_of_another_pair,
}


@pytest.mark.parametrize("breakage", list(BREAKAGES))
def test_the_watcher_names_the_file_at_fault(breakage: str, tmp_path: Path) -> None:
    cert_dir = _pair(tmp_path / "pair")
    expected = BREAKAGES[breakage](cert_dir, tmp_path / "other")
    with pytest.raises(CertificateFilesError) as raised:
        CertWatcher(cert_dir / "tls.crt", cert_dir / "tls.key").server_context()
    assert str(raised.value).startswith(expected)


@pytest.mark.parametrize("breakage", list(BREAKAGES))
def test_a_webhook_with_a_broken_pair_names_the_file_in_one_line_and_exits_1(breakage: str, tmp_path: Path) -> None:
    cert_dir = _pair(tmp_path / "pair")
    expected = BREAKAGES[breakage](cert_dir, tmp_path / "other")
    result = subprocess.run(
        [sys.executable, "-m", "webhook", *webhook_args(cert_dir, free_port())],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"foo-operator-webhook: {expected}"), result.stderr
    assert "cannot serve on" not in result.stderr and "Traceback" not in result.stderr
