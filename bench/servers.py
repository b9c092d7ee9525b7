"""The webhook servers under test — ours, the Go controller-runtime peer, the kopf peer — started
alike: same certificates, 127.0.0.1 only, pinned to the server core, logs under bench/results/logs.
"""

from __future__ import annotations

import http.client
import os
import ssl
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from attacks.foos import create_review, dumps, new_foo
from certs.authority import issue_serving, new_ca
from certs.files import write_serving_files
from hack.plane.cluster import free_port
from hack.plane.procs import Component, wait_until
from hack.plane.product import webhook_args

from .load import cores, pinned
from .peers import KOPF_WEBHOOK, go_webhook_binary, kopf_venv
from .report import LOGS_DIR, REPO


def serving_certs(cert_dir: Path) -> Path:
    """A CA and a serving certificate for 127.0.0.1 (ca.crt, tls.crt, tls.key) in ``cert_dir``."""
    ca = new_ca("foo-operator-bench-ca")
    serving = issue_serving(ca, common_name="foo-operator-bench", dns_names=["localhost"], ips=["127.0.0.1"])
    write_serving_files(cert_dir, ca, serving, force=True)
    return cert_dir


def client_context(cert_dir: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(cert_dir / "ca.crt"))


def request(
    url: str, context: ssl.SSLContext, *, body: bytes | None = None, method: str = "POST", timeout: float = 60.0
) -> tuple[int, bytes]:
    """One HTTPS request on a fresh connection: (status, body)."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPSConnection(parts.hostname or "127.0.0.1", parts.port, context=context, timeout=timeout)
    try:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        conn.request(method, parts.path or "/", body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


@dataclass
class Server:
    """One running webhook server."""

    name: str
    url: str
    component: Component
    endpoints: tuple[str, ...] = ("/validate-foo", "/mutate-foo", "/convert")
    started_at: float = field(default_factory=time.monotonic)

    @property
    def pid(self) -> int | None:
        return self.component.pid

    def cpu_seconds(self) -> float:
        """User + system CPU the server process (all its threads) has used: robust to a busy machine."""
        return process_cpu_seconds(self.pid)

    def run_queue_seconds(self) -> float:
        """Time the server was ready to run but waited for its core (see process_run_queue_seconds)."""
        return process_run_queue_seconds(self.pid)

    def stop(self) -> None:
        self.component.stop()

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def process_cpu_seconds(pid: int | None) -> float:
    if pid is None:
        return float("nan")
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_run_queue_seconds(pid: int | None) -> float:
    """Time the process's threads were ready to run but waited for a core (``/proc/<pid>/task/*/schedstat``).

    What tells a contended core from a slow server: a fixed-rate tail that matches this wait is the
    machine's, not the server's (issue #17: the "50 ms stalls" were this, on a core shared with others).
    """
    if pid is None:
        return float("nan")
    waited = 0
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                waited += int((task / "schedstat").read_text().split()[1])
            except (OSError, IndexError, ValueError):
                continue  # a thread that ended, or a kernel without schedstats
    except OSError:
        return float("nan")
    return waited / 1e9


def process_bytes_read(pid: int | None) -> int:
    """Bytes the process has read through read(2) and friends, sockets included (``rchar`` in
    /proc/<pid>/io): tells whether a server without a request counter was sent anything."""
    if pid is None:
        return 0
    try:
        for line in Path(f"/proc/{pid}/io").read_text().splitlines():
            if line.startswith("rchar:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _ready_by_get(url: str, context: ssl.SSLContext) -> bool:
    return request(url + "/readyz", context, method="GET", timeout=2)[0] == 200


def _ready_by_review(url: str, context: ssl.SSLContext) -> bool:
    status, _ = request(url + "/validate-foo", context, body=dumps(create_review(new_foo())), timeout=2)
    return status == 200


def _start(
    name: str,
    argv: list[str],
    cert_dir: Path,
    port: int,
    *,
    env: dict[str, str] | None = None,
    by_review: bool = False,
    timeout: float = 60.0,
    pin: bool = True,
    cwd: Path | None = None,
) -> Server:
    server_core, _ = cores()
    component = Component(
        f"bench-{name}", pinned(argv, server_core if pin else None), LOGS_DIR / f"{name}.log", env=env, cwd=cwd
    )
    component.start()
    url = f"https://127.0.0.1:{port}"
    server = Server(name, url, component)
    context = client_context(cert_dir)
    check = _ready_by_review if by_review else _ready_by_get
    try:
        wait_until(f"{name} ready", lambda: check(url, context), timeout=timeout, watch=[component], interval=0.05)
    except BaseException:
        component.stop()
        raise
    return server


def ours(
    cert_dir: Path,
    *,
    port: int = 0,
    args: list[str] | None = None,
    pin: bool = True,
    env: dict[str, str] | None = None,
    launcher: Sequence[str] = (),
    tree: Path | None = None,
    name: str = "ours",
) -> Server:
    """Our webhook; ``launcher`` goes before the interpreter (e.g. ``taskset``, ``prlimit``);
    ``tree``: another checkout's packages (``python -m webhook`` imports from its directory
    first), run by this interpreter with these dependencies."""
    port = port or free_port()
    # No metrics listener: the Go peer has none either (its metrics are still recorded, as ours are).
    argv = [*launcher, sys.executable, "-m", "webhook", *webhook_args(cert_dir, port), *(args or [])]
    return _start(name, argv, cert_dir, port, pin=pin, env=env, cwd=tree)


# A ConversionReview of 10,000 Foos is charged ~163 MiB to parse, more than the default
# --memory-limit-mib (256) leaves a process (serving.budget): our side of a benchmark that posts
# one gets room for it, as a pod sized for such reviews would.
ROOM_FOR_BIG_REVIEWS = ["--memory-limit-mib", "2048"]


def start(name: str, argv: list[str], cert_dir: Path, port: int, *, env: dict[str, str] | None = None) -> Server:
    """Any server of ours (``argv`` as given, not pinned) ready once its ``/readyz`` says 200."""
    return _start(name, argv, cert_dir, port, pin=False, env=env)


GO_PEER = "go-controller-runtime"
GO_PEER_HTTP1 = "go-controller-runtime-http1"


def go_peer(cert_dir: Path, *, port: int = 0, pin: bool = True, http1: bool = False) -> Server:
    """The controller-runtime peer; with ``http1``, offering only HTTP/1.1 in ALPN as ours does
    (controller-runtime offers h2 alone by default, so Go clients that offer h2 speak it)."""
    port = port or free_port()
    argv = [str(go_webhook_binary()), "--cert-dir", str(cert_dir), "--bind-address", "127.0.0.1", "--port", str(port)]
    return _start(GO_PEER_HTTP1 if http1 else GO_PEER, [*argv, "--http1"] if http1 else argv, cert_dir, port, pin=pin)


def kopf_peer(cert_dir: Path, kubeconfig: Path, *, port: int = 0) -> Server:
    """kopf's admission server; it scans the API first, so ``kubeconfig`` must reach a plane with the CRD."""
    port = port or free_port()
    venv = kopf_venv()
    env = {
        **os.environ,
        "FOO_BENCH_CERT_DIR": str(cert_dir),
        "FOO_BENCH_PORT": str(port),
        "PYTHONPATH": str(REPO),
        "KUBECONFIG": str(kubeconfig),
    }
    argv = [str(venv / "bin" / "kopf"), "run", "--standalone", "--all-namespaces", str(KOPF_WEBHOOK)]
    server = _start("kopf", argv, cert_dir, port, env=env, by_review=True, timeout=120)
    server.endpoints = ("/validate-foo", "/mutate-foo")
    return server


_TCP_LISTEN = "0A"


def client_ports(port: int, proc_net_tcp: str) -> set[int]:
    """The client ports of every TCP connection to ``port`` in a ``/proc/net/tcp`` table, whatever its
    state: the server's side (local port = ``port``, listener excepted) and the client's (remote port =
    ``port``; after the client closed first, only its TIME_WAIT is left)."""
    found = set()
    for line in proc_net_tcp.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 4:
            continue
        local, remote = int(fields[1].rsplit(":", 1)[1], 16), int(fields[2].rsplit(":", 1)[1], 16)
        if local == port and fields[3] != _TCP_LISTEN:
            found.add(remote)
        elif remote == port:
            found.add(local)
    return found


def connections_to(port: int) -> set[int]:
    """Client ports connected (or lately connected: TIME_WAIT) to ``port`` on this host, IPv4 and IPv6."""
    found: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            found |= client_ports(port, Path(table).read_text())
        except OSError:
            continue
    return found


def webhook_requests(metrics_url: str, endpoint: str) -> float:
    """How many requests our service has answered on ``endpoint``: its controller-runtime metric, read
    from its metrics listener (plain HTTP at ``metrics_url``; `/metrics` never shares the webhook's port)."""
    try:
        with urllib.request.urlopen(metrics_url + "/metrics", timeout=10) as response:
            text = response.read().decode()
    except OSError:
        return float("nan")
    total = 0.0
    for line in text.splitlines():
        if line.startswith("controller_runtime_webhook_requests_total{") and f'webhook="{endpoint}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total
