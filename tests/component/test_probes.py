"""The probe port (serving.probes): answered however busy the main loop is, and bounded for anyone else."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from apimachinery.status import NOT_ALLOWED, NOT_FOUND
from certs.__main__ import main as certs_main
from hack.plane.cluster import free_port
from hack.plane.product import webhook_args
from serving import probes
from serving.probes import PROBE_PORT, ProbeServer, answer
from tests.e2e.waiting import wait_for


def _ask(port: int, request: bytes, *, timeout: float = 10.0) -> bytes:
    """Send ``request`` and read until the server closes the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(request)
        received = b""
        while chunk := sock.recv(4096):
            received += chunk
        return received


def _get(port: int, path: str) -> bytes:
    return _ask(
        port, f"GET {path} HTTP/1.1\r\nHost: probe\r\nUser-Agent: kube-probe/1.34\r\nConnection: close\r\n\r\n".encode()
    )


def _status(answer_: bytes) -> int:
    return int(answer_.split(b" ", 2)[1])


def test_each_path_answers_what_the_kubelet_reads() -> None:
    live, ready = (True, "ok"), (lambda: (False, "not serving yet"))
    assert answer("GET", "/healthz", live, ready) == (200, "ok")
    assert answer("GET", "/livez?verbose", live, ready) == (200, "ok")
    assert answer("GET", "/readyz", live, ready) == (503, "not serving yet")
    assert answer("GET", "/healthz", (False, "the event loop has not run for 12s"), ready)[0] == 500
    # In kube-apiserver's words, as the serving ports' Statuses say them (apimachinery.status).
    assert answer("POST", "/readyz", live, ready) == (405, NOT_ALLOWED + "\n")
    assert answer("GET", "/metrics", live, ready) == (404, NOT_FOUND + "\n")


async def test_a_probe_is_answered_while_the_main_loop_is_busy() -> None:
    server = ProbeServer(lambda: (True, "ok"), "127.0.0.1", 0)
    server.start()
    answered: list[tuple[bytes, float]] = []
    try:
        asker = threading.Thread(target=lambda: answered.append((_get(server.port, "/readyz"), time.monotonic())))
        asker.start()
        time.sleep(1.5)  # the main loop busy, as under eight large Tables: nothing of it runs
        loop_free_again = time.monotonic()
        asker.join()
    finally:
        await server.stop()
    [(received, at)] = answered
    assert _status(received) == 200 and received.endswith(b"\r\n\r\nok")
    assert at < loop_free_again, "the probe waited for the main loop"


async def test_healthz_fails_while_the_main_loop_is_stuck_and_readyz_still_says_ready(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(probes, "HEARTBEAT_SECONDS", 0.05)
    server = ProbeServer(lambda: (True, "ok"), "127.0.0.1", 0, stall_seconds=0.3)
    server.start()
    try:
        await asyncio.sleep(0)  # the first heartbeat
        time.sleep(0.8)  # stuck
        stuck = _get(server.port, "/healthz")
        ready = _get(server.port, "/readyz")
        await asyncio.sleep(0.05)  # the loop runs again: its heartbeat with it
        again = _get(server.port, "/healthz")
    finally:
        await server.stop()
    assert _status(stuck) == 500 and b"the event loop has not run for" in stuck
    assert _status(ready) == 200
    assert _status(again) == 200


async def test_a_flood_of_idle_connections_holds_at_most_the_cap_and_a_probe_still_gets_in() -> None:
    server = ProbeServer(lambda: (True, "ok"), "127.0.0.1", 0)
    server.start()
    flood = []
    try:
        cap = PROBE_PORT.max_connections
        for _ in range(3 * cap):
            flood.append(socket.create_connection(("127.0.0.1", server.port)))
        wait_for("the flood to be accepted", lambda: server.connections.evicted >= 2 * cap, timeout=10)
        assert len(server.connections) <= cap
        assert _status(await asyncio.to_thread(_get, server.port, "/readyz")) == 200
    finally:
        for sock in flood:
            sock.close()
        await server.stop()


async def test_a_head_too_large_is_431_and_one_too_slow_is_408() -> None:
    limits = dataclasses.replace(PROBE_PORT, head_seconds=0.3)
    server = ProbeServer(lambda: (True, "ok"), "127.0.0.1", 0, limits=limits)
    server.start()
    try:
        large = await asyncio.to_thread(_ask, server.port, b"GET /readyz HTTP/1.1\r\nX: " + b"a" * 10_000)
        began = time.monotonic()
        slow = await asyncio.to_thread(_ask, server.port, b"GET /readyz HTTP/1.1\r\n")
        waited = time.monotonic() - began
        garbage = await asyncio.to_thread(_ask, server.port, b"\x16\x03\x01 hello\r\n\r\n")
    finally:
        await server.stop()
    assert _status(large) == 431
    assert _status(slow) == 408 and waited < 5
    assert _status(garbage) == 400


@pytest.fixture
def cert_dir(tmp_path: Path) -> Path:
    assert certs_main(["generate", "--service", "foo-webhook", "--namespace", "default", "--out", str(tmp_path)]) == 0
    return tmp_path


def test_a_webhook_answers_its_probes_on_their_own_port_unready_until_it_serves(cert_dir: Path, tmp_path: Path) -> None:
    probe_port = free_port()
    argv = [
        sys.executable, "-m", "webhook", *webhook_args(cert_dir, free_port()),
        "--health-probe-bind-address", f"127.0.0.1:{probe_port}",
    ]  # fmt: skip
    with (
        open(tmp_path / "webhook.log", "wb") as log,
        subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT) as process,
    ):
        try:

            def ready() -> bool:
                assert process.poll() is None, (tmp_path / "webhook.log").read_text()
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{probe_port}/readyz", timeout=1) as response:
                        return bool(response.status == 200)
                except (OSError, urllib.error.HTTPError):
                    return False

            wait_for("the webhook's /readyz on its probe port", ready, timeout=30, interval=0.02)
            with urllib.request.urlopen(f"http://127.0.0.1:{probe_port}/healthz", timeout=10) as response:
                assert response.read() == b"ok"
        finally:
            process.terminate()
            process.wait(timeout=30)
    assert process.returncode == 0


def test_a_probe_address_that_is_the_serving_port_is_one_line_and_exit_2(cert_dir: Path) -> None:
    port = free_port()
    result = subprocess.run(
        [sys.executable, "-m", "webhook", *webhook_args(cert_dir, port), "--health-probe-bind-address", f":{port}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert f"--health-probe-bind-address must not use the serving port {port}" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_probe_port_already_taken_is_one_line_and_exit_1(cert_dir: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "webhook",
                *webhook_args(cert_dir, free_port()),
                "--health-probe-bind-address",
                address,
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 1
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith(f"foo-operator-webhook: cannot serve the probes on {address}: ")
    )
    assert "Traceback" not in result.stderr
