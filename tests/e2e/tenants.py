"""The processes that cache a tenant's large objects on a real plane, and their memory (issue #34).

``Memory`` reads a process's resident size and its peak from /proc; ``Insights`` is the insights
server as a loopback process, called directly as the aggregator would call it (the front-proxy
client certificate and X-Remote-* headers). ``attacks.tenants.store`` writes the objects.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from certs.__main__ import main as certs_main
from hack.plane.cluster import LocalControlPlane, free_port
from insights.resources import GROUP_VERSION

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Memory:
    """A process's resident memory now (VmRSS) and at its peak so far (VmHWM), in MiB."""

    rss: float
    peak: float

    @classmethod
    def of(cls, pid: int) -> Memory:
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
        return cls(*(int(fields[name].split()[0]) / 1024 for name in ("VmRSS", "VmHWM")))


class Insights:
    """`python -m insights` on loopback against ``plane`` (as its admin), logging to ``log_file``."""

    def __init__(self, plane: LocalControlPlane, workdir: Path) -> None:
        self.plane = plane
        self.workdir = workdir
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        workdir.mkdir(parents=True, exist_ok=True)
        if not (workdir / "tls.crt").exists():
            assert certs_main(["generate", "--service", "insights", "--namespace", "ns", "--out", str(workdir)]) == 0
        self.log_file = plane.logs_dir / f"insights-{workdir.name}-{os.getpid()}.log"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> Insights:
        argv = [
            sys.executable, "-m", "insights", "--cert-dir", str(self.workdir), "--bind-address", "127.0.0.1",
            "--port", str(self.port), "--metrics-bind-address", "0", "--kubeconfig", str(self.plane.kubeconfig),
            "--requestheader-ca-file", str(self.workdir / "requestheader-ca.crt"),
        ]  # fmt: skip
        with open(self.log_file, "ab") as log:
            self.proc = subprocess.Popen(argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)

    def check_alive(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"insights exited {self.proc.returncode}:\n{self.log_file.read_text()[-3000:]}")

    def get(self, path: str) -> tuple[int, dict[str, Any]]:
        """GET ``path`` as the aggregator would, for a cluster admin."""
        pki = self.plane.pki
        assert pki is not None
        context = ssl.create_default_context(cafile=str(self.workdir / "ca.crt"))
        context.check_hostname = False
        context.load_cert_chain(pki.cert_file("front-proxy-client"), pki.key_file("front-proxy-client"))
        request = urllib.request.Request(
            f"https://127.0.0.1:{self.port}{path}",
            headers={"X-Remote-User": "tenant-memory-e2e", "X-Remote-Group": "system:masters"},
        )
        try:
            with urllib.request.urlopen(request, context=context, timeout=30) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"{}")

    def health(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The FooHealth of ``namespace/name``, or None while insights cannot answer it."""
        self.check_alive()
        try:
            status, body = self.get(f"/apis/{GROUP_VERSION}/namespaces/{namespace}/foohealths/{name}")
        except OSError:
            return None
        return body if status == 200 else None
