"""The metrics listener in two steps: the port is taken before the process is ready, served after.

`bind` is synchronous and needs no aiohttp, so a webhook learns that :8080 is taken (one line,
exit 1) before it says it is ready; `start` serves what was bound and imports aiohttp off the
event loop, so reviews keep flowing while it loads. Real sockets on loopback, real HTTP(S).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter

from certs.authority import issue_client, issue_serving, new_ca
from certs.files import write_atomic, write_self_signed, write_serving_files
from hack.plane.cluster import free_port
from serving.metricsauth import MetricsGuard, User
from serving.metricsserver import MetricsOptions, MetricsServer, MetricsSetupError
from serving.tls import CertWatcher


def _registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    Counter("foo_things", "things", registry=registry).inc()
    return registry


def _get(url: str, context: ssl.SSLContext | None = None, token: str | None = None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10, context=context) as response:
        return response.status, response.read().decode()


async def _scrape(url: str, context: ssl.SSLContext | None = None, token: str | None = None) -> tuple[int, str]:
    return await asyncio.to_thread(_get, url, context, token)


def test_a_port_in_use_is_a_setup_error_at_bind_before_anything_async() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        server = MetricsServer(MetricsOptions(host="127.0.0.1", port=port), _registry())
        with pytest.raises(MetricsSetupError, match=rf"^cannot serve metrics on 127\.0\.0\.1:{port}: .*in use"):
            server.bind()
        assert not server.bound


async def test_bound_then_started_serves_metrics_and_a_scrape_sent_in_between_is_answered() -> None:
    port = free_port()
    server = MetricsServer(MetricsOptions(host="127.0.0.1", port=port), _registry())
    server.bind()
    try:
        early = asyncio.create_task(_scrape(f"http://127.0.0.1:{port}/metrics"))
        await asyncio.sleep(0.05)  # the scrape waits in the kernel's queue, not refused
        assert not early.done()
        await server.start()
        code, body = await early
        assert code == 200 and "foo_things_total 1.0" in body
    finally:
        await server.stop()


async def test_start_without_bind_binds_itself_as_insights_and_the_controller_use_it() -> None:
    port = free_port()
    server = MetricsServer(MetricsOptions(host="127.0.0.1", port=port), _registry())
    await server.start()
    try:
        assert server.bound
        assert (await _scrape(f"http://127.0.0.1:{port}/metrics"))[0] == 200
    finally:
        await server.stop()


async def test_a_port_in_use_is_still_a_setup_error_at_start_without_bind() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        server = MetricsServer(MetricsOptions(host="127.0.0.1", port=taken.getsockname()[1]), _registry())
        with pytest.raises(MetricsSetupError, match="cannot serve metrics on"):
            await server.start()


async def test_stop_frees_a_port_that_was_bound_but_never_served() -> None:
    port = free_port()
    server = MetricsServer(MetricsOptions(host="127.0.0.1", port=port), _registry())
    server.bind()
    await server.stop()
    with socket.create_server(("127.0.0.1", port)):
        pass


async def test_every_interface_is_served_when_no_host_is_given() -> None:
    port = free_port()
    server = MetricsServer(MetricsOptions(host=None, port=port), _registry())
    await server.start()
    try:
        assert (await _scrape(f"http://127.0.0.1:{port}/metrics"))[0] == 200
        if socket.has_ipv6:
            try:
                code = (await _scrape(f"http://[::1]:{port}/metrics"))[0]
            except OSError:  # a kernel without IPv6 on loopback: nothing to check there
                return
            assert code == 200
    finally:
        await server.stop()


async def test_secure_metrics_bound_then_started_are_https_behind_the_guard(tmp_path: Path) -> None:
    async def authenticate(token: str) -> User | None:
        return User("system:serviceaccount:monitoring:prometheus") if token == "reader-token" else None

    async def authorize(user: User, path: str, verb: str) -> bool:
        return True

    cert, key = write_self_signed(tmp_path)
    port = free_port()
    server = MetricsServer(
        MetricsOptions(host="127.0.0.1", port=port, secure=True),
        _registry(),
        guard=MetricsGuard(authenticate, authorize),
        certificate=CertWatcher(cert, key),
    )
    server.bind()
    await server.start()
    insecure = ssl.create_default_context()
    insecure.check_hostname, insecure.verify_mode = False, ssl.CERT_NONE
    try:
        code, body = await _scrape(f"https://127.0.0.1:{port}/metrics", insecure, "reader-token")
        assert code == 200 and "foo_things_total 1.0" in body
        with pytest.raises(urllib.error.HTTPError, match="401"):
            await _scrape(f"https://127.0.0.1:{port}/metrics", insecure)
    finally:
        await server.stop()


def _handshake(port: int, context: ssl.SSLContext) -> str:
    """The common name of the certificate served on ``port``, once a request was answered."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname="localhost") as tls:
            peer = tls.getpeercert()
            tls.sendall(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            # Under TLS 1.3 a client certificate the server refused surfaces here, as an alert.
            assert tls.recv(5) == b"HTTP/"
    assert peer is not None
    return str(dict(pair[0] for pair in peer["subject"])["commonName"])


async def test_secure_metrics_beside_a_listener_serve_its_pair_through_its_watcher(tmp_path: Path) -> None:
    """One watcher per pair: the metrics port serves the listener's pair, reloaded once for both,
    and never asks for the client certificate the listener asks for (insights' front-proxy CA)."""

    async def authenticate(token: str) -> User | None:
        return None

    async def authorize(user: User, path: str, verb: str) -> bool:
        return False

    ca = new_ca("serving-ca")
    write_serving_files(tmp_path, ca, issue_serving(ca, common_name="first", dns_names=["localhost"]))
    front_proxy = new_ca("front-proxy-ca")
    write_atomic(tmp_path / "front-proxy-ca.crt", front_proxy.cert_pem)
    stranger = issue_client(new_ca("another-ca"), common_name="prometheus")
    write_atomic(tmp_path / "client.crt", stranger.cert_pem)
    write_atomic(tmp_path / "client.key", stranger.key_pem)
    watcher = CertWatcher(tmp_path / "tls.crt", tmp_path / "tls.key", client_ca_file=tmp_path / "front-proxy-ca.crt")
    listener = watcher.server_context()  # what the serving port is given, as serve_until_stopped does
    port = free_port()
    server = MetricsServer(
        MetricsOptions(host="127.0.0.1", port=port, secure=True),
        _registry(),
        guard=MetricsGuard(authenticate, authorize),
    )
    server.serve_with(watcher)
    await server.start()
    client = ssl.create_default_context(cafile=tmp_path / "ca.crt")
    client.load_cert_chain(tmp_path / "client.crt", tmp_path / "client.key")
    try:
        assert not [task for task in asyncio.all_tasks() if task.get_name() == "metrics-cert-watcher"]
        assert listener.verify_mode == ssl.CERT_OPTIONAL
        assert await asyncio.to_thread(_handshake, port, client) == "first"

        write_serving_files(tmp_path, ca, issue_serving(ca, common_name="second", dns_names=["localhost"]), force=True)
        assert watcher.reload()
        assert await asyncio.to_thread(_handshake, port, client) == "second"
    finally:
        await server.stop()


# A fresh interpreter: this test process has aiohttp imported already. It binds (no aiohttp yet),
# then starts while a ticker counts the loop's turns; imported in the loop's own thread, aiohttp's
# ~200 ms would leave the ticker one turn.
_BIND_THEN_START = """
import asyncio, sys, time
from prometheus_client import CollectorRegistry
from serving.metricsserver import MetricsOptions, MetricsServer

server = MetricsServer(MetricsOptions(host="127.0.0.1", port=int(sys.argv[1])), CollectorRegistry())
server.bind()
print("aiohttp after bind:", "aiohttp" in sys.modules)

async def main():
    turns, longest, stop = [0], [0.0], asyncio.Event()
    async def tick():
        while not stop.is_set():
            started = time.perf_counter()
            await asyncio.sleep(0.001)
            turns[0] += 1
            longest[0] = max(longest[0], time.perf_counter() - started)
    ticker = asyncio.create_task(tick())
    await server.start()
    stop.set()
    await ticker
    await server.stop()
    print("turns while starting:", turns[0])

asyncio.run(main())
"""


def test_bind_needs_no_aiohttp_and_start_imports_it_while_the_loop_keeps_turning() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _BIND_THEN_START, str(free_port())],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.splitlines()
    assert out[0] == "aiohttp after bind: False"
    turns = int(out[1].rpartition(" ")[2])
    assert turns >= 5, f"the loop turned {turns} times while aiohttp was imported"
