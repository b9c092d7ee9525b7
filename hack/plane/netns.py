"""A network namespace joined to the host by a veth pair: a process at an address of its own.

For tests where a process, not a pod, is the point (docs/architecture.md says which and why):
the webhook failover test signals a replica mid-request and reads its connections, the
aggregated API test serves from the checkout on the session's loopback plane. The chart's pods
run on a real node (hack/plane/node.py), never here.

    with NetNamespace("foo-e2e", ns_ip="10.213.0.2", host_ip="10.213.0.1") as netns:
        netns.forward_host_port(apiserver_port)          # inside, 127.0.0.1:<port> is the host's
        proc = netns.popen([python, "-m", "webhook", "--bind-address", netns.ns_ip, ...])
        # the host (kube-apiserver) dials netns.ns_ip; only the two /32 addresses are routed

Each end gets a /32 address and a host route to the other, so nothing else becomes reachable
from inside and no existing route on the host is touched. Everything is removed on exit (also
after an error), and leftovers of an earlier run with the same name are removed on entry.

The host's kube-apiserver listens on 127.0.0.1 only; ``forward_host_port`` relays a loopback port
inside the namespace to the same port on the host's loopback (a listener created in the
namespace via setns(2), relaying from a thread in the host namespace), so a process inside uses
the very kubeconfig the host uses, TLS names included. Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN).
"""

from __future__ import annotations

import ctypes
import hashlib
import ipaddress
import os
import socket
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hack.plane.procs import run_command

CLONE_NEWNET = 0x40000000
NETNS_DIR = Path("/var/run/netns")
_libc = ctypes.CDLL(None, use_errno=True)


class NetNamespaceError(RuntimeError):
    """An `ip` command failed; the message carries its stderr."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run_command(["ip", *args], check=check, timeout=30, error=NetNamespaceError)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"setns: {os.strerror(errno)}")


class _Relay:
    """127.0.0.1:<port> inside the namespace → 127.0.0.1:<target> on the host, plain TCP."""

    def __init__(self, netns_path: Path, port: int, target: int) -> None:
        self.target = target
        self._closed = threading.Event()
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        # setns(2) moves only the calling thread: step in, make the listener, step back out.
        host = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        inside = os.open(netns_path, os.O_RDONLY)
        try:
            _setns(inside)
            try:
                self.listener = socket.create_server(("127.0.0.1", port), reuse_port=False)
            finally:
                _setns(host)
        finally:
            os.close(host)
            os.close(inside)
        self.port = self.listener.getsockname()[1]
        self._thread = threading.Thread(target=self._accept, name=f"netns-relay:{port}", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                inner, _ = self.listener.accept()
            except OSError:
                return  # closed
            try:
                outer = socket.create_connection(("127.0.0.1", self.target), timeout=10)
                outer.settimeout(None)
            except OSError:
                inner.close()
                continue
            with self._lock:
                self._conns.update((inner, outer))
            for src, dst in ((inner, outer), (outer, inner)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(65536):
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            with self._lock:
                for sock in (src, dst):
                    if sock in self._conns:
                        self._conns.discard(sock)
                        sock.close()

    def close(self) -> None:
        self._closed.set()
        try:
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()
        with self._lock:
            for sock in list(self._conns):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        self._thread.join(timeout=5)


class NetNamespace:
    """``ip netns add <name>`` plus a veth pair: ``ns_ip`` inside, ``host_ip`` on the host end."""

    def __init__(self, name: str, ns_ip: str, host_ip: str) -> None:
        for address in (ns_ip, host_ip):
            if not isinstance(ipaddress.ip_address(address), ipaddress.IPv4Address):
                raise ValueError(f"{address}: only IPv4 addresses are supported")
        if ns_ip == host_ip:
            raise ValueError("ns_ip and host_ip must differ")
        self.name = name
        self.ns_ip = ns_ip
        self.host_ip = host_ip
        # Interface names are limited to 15 bytes; derive short, stable ones from the name.
        digest = hashlib.sha1(name.encode()).hexdigest()[:8]
        self.host_link = f"vh{digest}"
        self.ns_link = f"vn{digest}"
        self._relays: list[_Relay] = []
        self._procs: list[subprocess.Popen[Any]] = []

    @property
    def path(self) -> Path:
        return NETNS_DIR / self.name

    def __enter__(self) -> NetNamespace:
        self.cleanup()
        try:
            self._create()
        except BaseException:
            self.cleanup()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    def _create(self) -> None:
        _ip("netns", "add", self.name)
        _ip("link", "add", self.host_link, "type", "veth", "peer", "name", self.ns_link)
        _ip("link", "set", self.ns_link, "netns", self.name)
        _ip("addr", "add", f"{self.host_ip}/32", "dev", self.host_link)
        _ip("link", "set", self.host_link, "up")
        _ip("route", "add", f"{self.ns_ip}/32", "dev", self.host_link, "src", self.host_ip)
        _ip("-n", self.name, "link", "set", "lo", "up")
        _ip("-n", self.name, "addr", "add", f"{self.ns_ip}/32", "dev", self.ns_link)
        _ip("-n", self.name, "link", "set", self.ns_link, "up")
        _ip("-n", self.name, "route", "add", f"{self.host_ip}/32", "dev", self.ns_link, "src", self.ns_ip)

    def popen(self, argv: Sequence[str | os.PathLike[str]], **kwargs: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` inside the namespace (``ip netns exec``); it is killed on exit if still running."""
        proc: subprocess.Popen[Any] = subprocess.Popen(["ip", "netns", "exec", self.name, *map(str, argv)], **kwargs)
        self._procs.append(proc)
        return proc

    def run(self, argv: Sequence[str | os.PathLike[str]], **kwargs: Any) -> subprocess.CompletedProcess[Any]:
        """Run ``argv`` inside the namespace to completion (``subprocess.run`` arguments)."""
        kwargs.setdefault("timeout", 60)
        return subprocess.run(["ip", "netns", "exec", self.name, *map(str, argv)], **kwargs)

    def forward_host_port(self, port: int, *, host_port: int | None = None) -> int:
        """Make 127.0.0.1:``port`` inside reach 127.0.0.1:``host_port`` (default: the same) on the host."""
        relay = _Relay(self.path, port, host_port or port)
        self._relays.append(relay)
        return relay.port

    def cleanup(self) -> None:
        """Remove the namespace, the veth pair and anything we started; safe to call any time."""
        for relay in self._relays:
            relay.close()
        self._relays.clear()
        for proc in self._procs:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)
        self._procs.clear()
        if self.path.exists():
            # Processes a crashed earlier run left inside this namespace: ours, found by its name.
            pids = _ip("netns", "pids", self.name, check=False).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), 9)
                except (ProcessLookupError, ValueError):
                    pass
            _ip("netns", "del", self.name, check=False)
        # Deleting the namespace destroys its veth end and with it the pair; this covers a pair
        # whose inner end never made it into the namespace.
        if _ip("link", "show", self.host_link, check=False).returncode == 0:
            _ip("link", "del", self.host_link, check=False)

    def __repr__(self) -> str:
        return f"NetNamespace({self.name!r}, ns_ip={self.ns_ip!r}, host_ip={self.host_ip!r})"
