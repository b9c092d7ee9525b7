"""`python -m webhook --workers 2` on loopback: two processes on one port under a supervisor.

Every request below opens a new connection, so the kernel (SO_REUSEPORT) picks a worker each time.
"""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from attacks.foos import admission_review
from attacks.objects import foo_v1
from hack.plane.product import webhook_args
from tests.component.test_tls import free_port
from tests.e2e.waiting import wait_for

TRIES = 40  # new connections: both workers answer some of them unless the kernel is very unlucky


@dataclass
class Webhook:
    process: subprocess.Popen[str]
    url: str
    metrics_url: str
    context: ssl.SSLContext

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.url + path, context=self.context, timeout=5) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()

    def validate(self, body: object) -> dict[str, object]:
        request = urllib.request.Request(
            self.url + "/validate-foo", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, context=self.context, timeout=5) as response:
            return dict(json.loads(response.read()))

    def metrics(self) -> str:
        with urllib.request.urlopen(self.metrics_url, timeout=5) as response:
            return str(response.read().decode())

    def workers(self) -> list[int]:
        """The workers' pids, worker 0 first (forked in order: pids grow)."""
        pid = self.process.pid
        return sorted(int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split())

    def ready(self) -> bool:
        try:
            return self.get("/readyz")[0] == 200
        except OSError:
            return False


@pytest.fixture
def webhook(cert_dir: Path) -> Iterator[Webhook]:
    port, metrics_port = free_port(), free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "webhook",
            *webhook_args(cert_dir, port, metrics=f"127.0.0.1:{metrics_port}"),
            "--workers",
            "2",
            "--drain-seconds",
            "1",
        ],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
    )
    context = ssl.create_default_context(cafile=str(cert_dir / "ca.crt"))
    server = Webhook(process, f"https://127.0.0.1:{port}", f"http://127.0.0.1:{metrics_port}/metrics", context)
    try:
        yield server
    finally:
        if process.poll() is None:
            process.terminate()
        process.wait(20)
        assert process.stderr is not None
        process.stderr.close()


@pytest.fixture
def cert_dir(tmp_path: Path) -> Path:
    from certs.__main__ import main as certs_main

    command = ["generate", "--service", "foo-webhook", "--namespace", "ns", "--out", str(tmp_path), "--ip", "127.0.0.1"]
    assert certs_main(command) == 0
    return tmp_path


def ready_answers(webhook: Webhook) -> set[str]:
    return {webhook.get("/readyz")[1] for _ in range(TRIES)}


def test_both_workers_serve_the_port_and_readyz_waits_for_both(webhook: Webhook) -> None:
    answers: list[tuple[int, str]] = []

    def every_worker_ready() -> bool:
        try:
            answers.append(webhook.get("/readyz"))
        except OSError:
            return False
        return answers[-1][0] == 200

    wait_for("/readyz", every_worker_ready, timeout=60, interval=0.02)
    # Before both served, whichever worker answered said so; once ready, both workers answer.
    assert all(why.endswith("1 of 2 workers serving") or why == "not serving yet" for _, why in answers[:-1])
    assert ready_answers(webhook) == {"ok (worker 0 of 2)", "ok (worker 1 of 2)"}
    assert len(webhook.workers()) == 2


def test_metrics_of_both_workers_are_summed(webhook: Webhook) -> None:
    wait_for("/readyz", webhook.ready, timeout=60)
    for _ in range(TRIES):
        assert webhook.validate(admission_review(foo_v1()))["response"]["allowed"] is True  # type: ignore[index]
    text = webhook.metrics()
    assert f'controller_runtime_webhook_requests_total{{code="200",webhook="/validate-foo"}} {TRIES}.0' in text
    assert f'controller_runtime_webhook_latency_seconds_count{{webhook="/validate-foo"}} {TRIES}.0' in text
    assert 'controller_runtime_webhook_requests_in_flight{webhook="/validate-foo"} 0.0' in text
    # What dashboards and rules read is still there, once per pod, not once per worker.
    for name in ("process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds", "python_info"):
        assert sum(line.startswith(name) for line in text.splitlines()) == 1, name
    assert 'python_gc_collections_total{generation="0"}' in text
    assert "foo_operator_certificate_expiry_timestamp_seconds " in text
    (rss,) = (float(line.split()[-1]) for line in text.splitlines() if line.startswith("process_resident"))
    one_worker = int(Path(f"/proc/{webhook.workers()[0]}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    assert rss > 1.5 * one_worker  # the supervisor's and both workers' memory


def test_sigterm_drains_both_workers_and_the_supervisor_exits_0(webhook: Webhook) -> None:
    wait_for("/readyz", webhook.ready, timeout=60)
    workers = webhook.workers()
    webhook.process.send_signal(signal.SIGTERM)
    assert webhook.process.wait(20) == 0
    assert not any(Path(f"/proc/{pid}").exists() for pid in workers)
    assert webhook.process.stderr is not None
    lines = webhook.process.stderr.read().splitlines()
    # Each worker's lines say which worker it is; the supervisor's own say nothing of the kind.
    stopped = sorted(line.rsplit(" ", 1)[-1] for line in lines if "stopped server=webhook" in line)
    assert stopped == ["worker=0", "worker=1"], lines


def test_a_worker_that_dies_stops_the_pod_with_one_line_and_a_failure(webhook: Webhook) -> None:
    wait_for("/readyz", webhook.ready, timeout=60)
    first, second = webhook.workers()
    os.kill(second, signal.SIGKILL)
    assert webhook.process.wait(20) == 1
    assert not Path(f"/proc/{first}").exists()
    assert webhook.process.stderr is not None
    lines = [line for line in webhook.process.stderr.read().splitlines() if "SIGKILL" in line]
    assert lines == [
        f"foo-operator-webhook: worker 1 (pid {second}) was killed by SIGKILL; "
        "stopping the other workers and exiting so that the pod restarts"
    ]


def test_one_draining_worker_makes_every_worker_unready(webhook: Webhook) -> None:
    wait_for("/readyz", webhook.ready, timeout=60)
    _, second = webhook.workers()
    os.kill(second, signal.SIGTERM)  # it drains for --drain-seconds 1, its listener still open
    started = time.monotonic()
    answers = []
    while time.monotonic() - started < 0.8:
        answers.append(webhook.get("/readyz"))
    # The signal takes a moment to reach the worker's loop; from its first unready answer on,
    # no worker says ready.
    first_unready = next(i for i, (code, _) in enumerate(answers) if code == 503)
    assert (200, "ok (worker 0 of 2)") not in answers[first_unready:]
    assert (503, "worker 0 of 2: 1 of 2 workers serving") in answers
    assert webhook.process.wait(20) == 1  # then it exits, which nobody asked the supervisor for
