"""What a webhook loads before it serves: start-up time is what a rolling update waits for."""

from __future__ import annotations

import asyncio
import socket
import ssl
import subprocess
import sys
import tomllib
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from certs.__main__ import main as certs_main
from hack.plane.cluster import free_port
from hack.plane.product import webhook_args
from serving.tls import CertWatcher
from tests.e2e.waiting import wait_for

from .waiting import until

# Each costs tens of milliseconds of CPU to import, and none is needed to answer a review from
# certificate files: cryptography describes or makes certificates, kubernetes_asyncio talks to
# the API (--cert-rotation, --metrics-secure), pydantic models the insights API, and
# importlib.metadata reads the version for --version. kube.client and serving.metricsauth (with
# prometheus-client's aiohttp handler) serve only --metrics-secure, and the metrics listener
# loads them when it starts, after the webhook is ready; ctypes is for forked workers.
NOT_BEFORE_THE_FIRST_REVIEW = (
    "aiohttp",  # ~200 ms: the admission port is serving.reviews; metrics import it in a thread once ready
    "cryptography",
    "kubernetes_asyncio",
    "pydantic",
    "importlib.metadata",
    "kube.client",
    "serving.metricsauth",
    "prometheus_client.aiohttp",
    "ctypes",
)

_UP_TO_LISTENING = """
import sys
from pathlib import Path
from serving.tls import CertWatcher
from webhook.command import parse_args, settings_from
from webhook.app import build_app
from webhook.metrics import WebhookMetrics
from webhook.server import serve
from serving.metricsserver import MetricsOptions, MetricsServer

cert_dir = Path(sys.argv[1])
args = parse_args(["--cert-dir", str(cert_dir), "--metrics-bind-address", "0"])
metrics = WebhookMetrics.create()
build_app(settings_from(args), webhook_metrics=metrics)
CertWatcher(cert_dir / "tls.crt", cert_dir / "tls.key").server_context()
MetricsServer(MetricsOptions(host="127.0.0.1", port=0), metrics.registry).bind()  # its port taken, not yet served
print(" ".join(name for name in sys.argv[2:] if name in sys.modules))
"""


@pytest.fixture
def cert_dir(tmp_path: Path) -> Path:
    assert certs_main(["generate", "--service", "foo-webhook", "--namespace", "ns", "--out", str(tmp_path)]) == 0
    return tmp_path


def test_everything_up_to_listening_leaves_the_heavy_modules_unimported(cert_dir: Path) -> None:
    # A fresh interpreter: this test process has imported all of them already.
    loaded = subprocess.run(
        [sys.executable, "-c", _UP_TO_LISTENING, str(cert_dir), *NOT_BEFORE_THE_FIRST_REVIEW],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()
    assert loaded == [], f"imported before the webhook listens: {loaded}"


# A description imports cryptography and parses the pair in a thread: well under a second on a
# quiet machine. Only a watcher that never loads takes this.
DESCRIBED_WITHIN = 30.0


async def _watch_until(watcher: CertWatcher, seen: list[Any], *, interval: float) -> None:
    """Run ``watcher.watch`` until ``on_load`` has filled ``seen``, then stop it."""
    watching = asyncio.create_task(watcher.watch(interval=interval))
    try:
        await until("the watcher to load and describe the pair", lambda: bool(seen), timeout=DESCRIBED_WITHIN)
    finally:
        watching.cancel()
        await asyncio.gather(watching, return_exceptions=True)


async def test_the_pair_a_server_starts_with_is_described_once_it_listens(cert_dir: Path) -> None:
    described: list[Any] = []
    watcher = CertWatcher(cert_dir / "tls.crt", cert_dir / "tls.key", on_load=described.append)

    watcher.server_context()
    assert watcher.loaded and described == [], "the context is built before anything describes the pair"

    await _watch_until(watcher, described, interval=3600)
    assert [certificate.subject.rfc4514_string() for certificate in described] == ["CN=foo-webhook.ns.svc"]


async def test_a_server_stopped_while_its_pair_is_described_waits_for_the_description(cert_dir: Path) -> None:
    described: list[Any] = []
    watcher = CertWatcher(cert_dir / "tls.crt", cert_dir / "tls.key", on_load=described.append)
    watcher.server_context()

    watching = asyncio.create_task(watcher.watch(interval=3600))
    await asyncio.sleep(0)  # the description has started in its thread
    watching.cancel()
    await asyncio.gather(watching, return_exceptions=True)

    assert watching.cancelled()
    assert len(described) == 1, "the thread finished before the watch returned"


def test_a_new_pair_is_described_when_it_is_loaded(cert_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    described: list[Any] = []
    watcher = CertWatcher(cert_dir / "tls.crt", cert_dir / "tls.key", on_load=described.append)
    watcher.server_context()
    other = tmp_path_factory.mktemp("other")
    assert certs_main(["generate", "--service", "other-webhook", "--namespace", "ns", "--out", str(other)]) == 0
    for name in ("tls.crt", "tls.key"):
        (cert_dir / name).write_bytes((other / name).read_bytes())

    assert watcher.reload()
    assert [certificate.subject.rfc4514_string() for certificate in described] == ["CN=other-webhook.ns.svc"]


# What the image's `foo-operator-webhook` console script does: import the module pyproject names,
# then call its function (--help: the webhook's imports all run, then argparse exits).
_AS_THE_CONSOLE_SCRIPT = """
import gc, sys
collections = []
gc.callbacks.append(lambda phase, info: phase == "start" and collections.append(info["generation"]))
from webhook.launcher import main
loaded_by_the_script = "webhook.command" in sys.modules
collections.clear()
sys.argv = ["foo-operator-webhook", "--help"]
try:
    main()
except SystemExit:
    pass
print(loaded_by_the_script, len(collections), file=sys.stderr)
"""


def test_the_console_script_pauses_the_collector_before_the_webhook_imports() -> None:
    # ~55,000 objects that live as long as the process are made by these imports; a collection
    # while they are made walks them again and again (~25 ms of CPU at start, bench.cold_start).
    scripts = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["foo-operator-webhook"] == "webhook.launcher:main"
    result = subprocess.run(
        [sys.executable, "-c", _AS_THE_CONSOLE_SCRIPT], capture_output=True, text=True, check=True, timeout=60
    )
    assert "usage: foo-operator-webhook" in result.stdout
    assert result.stderr.split() == ["False", "0"], (
        "the launcher imports nothing, no collection while the webhook loads"
    )


def test_a_webhook_whose_metrics_port_is_taken_says_so_in_one_line_and_exits_1(cert_dir: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        metrics = f"127.0.0.1:{taken.getsockname()[1]}"
        result = subprocess.run(
            [sys.executable, "-m", "webhook", *webhook_args(cert_dir, free_port(), metrics=metrics)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 1
    assert (
        result.stderr.strip().splitlines()[-1].startswith(f"foo-operator-webhook: cannot serve metrics on {metrics}: ")
    )
    assert "Traceback" not in result.stderr


def test_a_ready_webhook_serves_its_metrics_on_their_own_port(cert_dir: Path, tmp_path: Path) -> None:
    port, metrics_port = free_port(), free_port()
    argv = [sys.executable, "-m", "webhook", *webhook_args(cert_dir, port, metrics=f"127.0.0.1:{metrics_port}")]
    context = ssl.create_default_context(cafile=cert_dir / "ca.crt")
    context.check_hostname = False
    with (
        open(tmp_path / "webhook.log", "wb") as log,
        subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT) as process,
    ):
        try:

            def ready() -> bool:
                assert process.poll() is None, (tmp_path / "webhook.log").read_text()
                try:
                    with urllib.request.urlopen(f"https://127.0.0.1:{port}/readyz", context=context, timeout=1) as r:
                        return bool(r.status == 200)
                except OSError:
                    return False

            wait_for("the webhook's /readyz", ready, timeout=30, interval=0.02)
            with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as response:
                assert (
                    response.status == 200
                    and "foo_operator_certificate_expiry_timestamp_seconds" in response.read().decode()
                )
        finally:
            process.terminate()
            process.wait(timeout=30)


async def test_a_watcher_round_that_fails_unexpectedly_is_logged_and_the_next_round_reloads(
    cert_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    loaded: list[Any] = []
    watcher = CertWatcher(cert_dir / "tls.crt", cert_dir / "tls.key", on_load=loaded.append)
    watcher.server_context()
    real_describe = watcher.describe
    failures = iter([RuntimeError("first description fails"), RuntimeError("and the first reload too")])

    def describe_failing_twice() -> None:
        failure = next(failures, None)
        if failure is not None:
            raise failure
        real_describe()

    monkeypatch.setattr(watcher, "describe", describe_failing_twice)
    # A new pair in place, as the kubelet swaps a Secret volume.
    other = tmp_path / "other"
    assert certs_main(["generate", "--service", "renewed", "--namespace", "ns", "--out", str(other)]) == 0
    for name in ("tls.crt", "tls.key"):
        (cert_dir / name).write_bytes((other / name).read_bytes())
    await _watch_until(watcher, loaded, interval=0.01)
    assert [certificate.subject.rfc4514_string() for certificate in loaded] == ["CN=renewed.ns.svc"]
    assert "cannot describe the serving certificate" in caplog.text
    assert "reloading the serving certificate failed; retrying" in caplog.text
