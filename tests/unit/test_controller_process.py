"""The controller process's edges: flags, logs, and the probe/metrics server over real HTTP."""

from __future__ import annotations

import json
import logging
import tempfile
from pathlib import Path

import aiohttp
import pytest
from prometheus_client import CollectorRegistry

from componentbase.logs import JSONFormatter
from controller.manager import _metrics_server
from controller.settings import parse
from hack.plane.cluster import free_port
from kube.metrics import metrics_for
from serving.metricsauth import MAX_CHECKS
from serving.metricsserver import MetricsOptions, MetricsServer
from serving.probes import ProbeServer


def test_defaults_are_generous_and_match_controller_runtimes_ports() -> None:
    settings = parse([])
    assert (settings.qps, settings.burst) == (1000.0, 2000)
    assert (settings.metrics.host, settings.metrics.port, settings.metrics.secure) == ("127.0.0.1", 8080, False)
    assert (settings.health_host, settings.health_port) == (None, 8081)
    assert (settings.lease_duration, settings.renew_deadline, settings.retry_period) == (15.0, 10.0, 2.0)
    assert not settings.leader_elect and settings.kubeconfig is None and settings.namespace is None


def test_every_documented_flag_is_accepted() -> None:
    settings = parse([
        "--kubeconfig", "/k", "--namespace", "ns", "--workers", "4", "--leader-elect",
        "--leader-elect-namespace", "ops", "--metrics-bind-address", "0", "--health-probe-bind-address", ":9",
        "--metrics-secure", "--metrics-cert-dir", "/certs", "--qps", "50",
        "--burst", "100", "--log-level", "debug", "--log-format", "json", "--identity", "me",
    ])  # fmt: skip
    assert settings.kubeconfig == "/k" and settings.namespace == "ns" and settings.workers == 4
    assert settings.leader_elect and settings.leader_elect_namespace == "ops" and settings.identity == "me"
    assert (settings.metrics.enabled, settings.metrics.secure, settings.metrics_cert_dir) == (False, True, "/certs")
    assert (settings.health_port, settings.qps, settings.burst) == (9, 50.0, 100)
    assert parse(["--metrics-bind-address", ":8443"]).metrics.host is None, ":port means every interface"
    assert (settings.log_level, settings.log_format) == ("debug", "json")


@pytest.mark.parametrize(
    "argv",
    [
        ["--workers", "0"],
        ["--log-format", "yaml"],
        ["--leader-elect-renew-deadline", "20"],
        ["--metrics-bind-address", "70000"],
        ["--metrics-bind-address", "localhost"],
        ["--health-probe-bind-address", ":99999"],
    ],
)
def test_nonsense_flags_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        parse(argv)


def test_json_logs_carry_the_key_as_a_field() -> None:
    record = logging.LogRecord("controller", logging.INFO, "f.py", 1, "%s: created", ("ns/foo",), None)
    record.key = "ns/foo"
    entry = json.loads(JSONFormatter().format(record))
    assert entry["msg"] == "ns/foo: created" and entry["key"] == "ns/foo" and entry["level"] == "info"


async def test_readyz_follows_the_caches_and_metrics_use_controller_runtime_names() -> None:
    synced = False
    registry = CollectorRegistry()
    metrics_for(registry).reconcile_total.labels("foo", "success").inc()
    health, metrics = free_port(), free_port()
    server = ProbeServer(lambda: (synced, "caches not synced"), "127.0.0.1", health)
    metrics_server = MetricsServer(MetricsOptions(host="127.0.0.1", port=metrics), registry)
    server.start()
    await metrics_server.start()
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{health}/healthz") as response:
                assert response.status == 200
            async with http.get(f"http://127.0.0.1:{health}/readyz") as response:
                assert response.status == 503
            synced = True
            async with http.get(f"http://127.0.0.1:{health}/readyz") as response:
                assert response.status == 200
            async with http.get(f"http://127.0.0.1:{metrics}/metrics") as response:
                text = await response.text()
        assert 'controller_runtime_reconcile_total{controller="foo",result="success"} 1.0' in text
        for name in (
            "workqueue_depth",
            "workqueue_adds_total",
            "workqueue_queue_duration_seconds",
            "workqueue_work_duration_seconds",
            "workqueue_retries_total",
            "leader_election_master_status",
            "controller_runtime_reconcile_errors_total",
            "controller_runtime_reconcile_time_seconds",
        ):
            assert f"# TYPE {name.removesuffix('_total')}" in text, name
    finally:
        await server.stop()
        await metrics_server.stop()


async def test_secure_metrics_ask_through_a_client_of_their_own(tmp_path: Path) -> None:
    """A flood of tokens at /metrics once took the controller's connections and rate (issue 34:
    an honest Foo 6 ms -> 1.76 s): the guard's reviews go through a pool of their own."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    settings = parse(["--kubeconfig", str(kubeconfig), "--metrics-secure"])
    self_signed = tempfile.TemporaryDirectory()
    try:
        server = await _metrics_server(settings, self_signed)
        guard_client = server._owned_client
        assert guard_client is not None
        assert guard_client.api.configuration.connection_pool_maxsize == MAX_CHECKS
        await server.stop()  # closes the guard's client with it
    finally:
        self_signed.cleanup()
