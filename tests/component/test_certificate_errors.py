"""A serving pair that does not load is named, file by file, in the one line a process exits with.

OpenSSL's own answer (`[SSL] PEM lib`, `KEY_VALUES_MISMATCH`) names no file, and the webhook used to
print it as `cannot serve on 0.0.0.0:9443: ...`, blaming the port. Insights says the same, before
it looks for a cluster; with no cluster to find it says that in one line too, not a traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from certs.__main__ import main as certs_main
from hack.plane.cluster import free_port
from hack.plane.product import webhook_args
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


def _run(process: str, cert_dir: Path, home: Path) -> subprocess.CompletedProcess[str]:
    """``python -m webhook`` or ``python -m insights`` on loopback, with no cluster to find: no
    KUBECONFIG, an empty home, not in a pod."""
    args = (
        webhook_args(cert_dir, free_port())
        if process == "webhook"
        else ["--cert-dir", str(cert_dir), "--bind-address", "127.0.0.1", "--port", str(free_port())]
        + ["--metrics-bind-address", "0"]
    )
    drop = ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")
    env = {k: v for k, v in os.environ.items() if k not in drop} | {"HOME": str(home)}
    home.mkdir(exist_ok=True)
    return subprocess.run([sys.executable, "-m", process, *args], capture_output=True, text=True, timeout=60, env=env)


@pytest.mark.parametrize("process", ["webhook", "insights"])
@pytest.mark.parametrize("breakage", list(BREAKAGES))
def test_a_server_with_a_broken_pair_names_the_file_in_one_line_and_exits_1(
    process: str, breakage: str, tmp_path: Path
) -> None:
    cert_dir = _pair(tmp_path / "pair")
    expected = BREAKAGES[breakage](cert_dir, tmp_path / "other")
    result = _run(process, cert_dir, tmp_path / "home")
    assert result.returncode == 1, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    # insights checks the pair before it looks for a cluster: the file is named, not the kubeconfig.
    assert last.startswith(f"foo-operator-{process}: {expected}"), result.stderr
    assert "cannot serve on" not in result.stderr and "Traceback" not in result.stderr


def test_insights_without_a_cluster_to_find_says_so_in_one_line_and_exits_1(tmp_path: Path) -> None:
    result = _run("insights", _pair(tmp_path / "pair"), tmp_path / "home")
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "foo-operator-insights: cannot load the cluster configuration: "
        "no cluster configured (no kubeconfig file found) and not running in a cluster"
    ), result.stderr
    assert "Traceback" not in result.stderr
