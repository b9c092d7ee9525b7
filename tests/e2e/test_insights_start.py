"""The insights server, like the webhook, names the file of a serving pair that does not load.

It builds its TLS context only after its start-up against the real apiserver (the front-proxy CA
it writes then must verify the aggregator's first handshake), but checks the pair before that
start-up: against the plane, a cluster that answers changes nothing in the line
(tests/component/test_certificate_errors.py has the case without one).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from certs.__main__ import main as certs_main
from hack.plane.cluster import LocalControlPlane, free_port


def test_insights_with_a_garbage_certificate_names_the_file_in_one_line_and_exits_1(
    control_plane: LocalControlPlane, tmp_path: Path
) -> None:
    assert certs_main(["generate", "--service", "foo-insights", "--namespace", "ns", "--out", str(tmp_path)]) == 0
    (tmp_path / "tls.crt").write_text("not a certificate\n")
    argv = [
        sys.executable, "-m", "insights", "--cert-dir", str(tmp_path), "--bind-address", "127.0.0.1",
        "--port", str(free_port()), "--metrics-bind-address", "0", "--kubeconfig", str(control_plane.kubeconfig),
        "--requestheader-ca-file", str(tmp_path / "requestheader-ca.crt"),
    ]  # fmt: skip
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert (
        last
        == f"foo-operator-insights: {tmp_path / 'tls.crt'}: not a PEM certificate (no readable -----BEGIN CERTIFICATE----- block)"
    )
    assert "Traceback" not in result.stderr
