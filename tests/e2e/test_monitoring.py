"""The dashboard and the alerts read only metrics the processes really export.

The webhook, the insights server and the controller run as local processes against the real
plane; a Foo goes through admission and reconciliation so the labelled metrics have samples;
then each process's live /metrics is scraped and every metric a dashboard panel or an alert
queries must be there (`up` is Prometheus' own).
"""

from __future__ import annotations

import json
import sys
import urllib.request
from collections.abc import Iterator

import pytest

from hack.plane.cluster import LocalControlPlane, free_port
from hack.plane.procs import Component, wait_until
from hack.plane.product import LocalProduct
from tests.monitoring import SYNTHETIC, dashboard_queries, exported_names, metric_names, rule_queries
from tests.unit.test_chart import find, render

ALL_ON = {"metrics": {"prometheusRule": {"enabled": True}, "grafanaDashboard": {"enabled": True}}}


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return str(response.read().decode())


def _scrapable(port: int) -> bool:
    try:
        scrape(port)
        return True
    except OSError:
        return False


@pytest.fixture
def controller_and_insights(
    control_plane: LocalControlPlane, foo_operator: LocalProduct, namespace: str
) -> Iterator[dict[str, int]]:
    """Both as their own processes, plain /metrics on loopback. The controller watches only this
    test's namespace and elects itself leader there: it touches nothing another test owns."""
    ports = {"controller": free_port(), "insights": free_port()}
    argv = {
        "controller": [
            "-m",
            "controller",
            "--kubeconfig",
            str(control_plane.kubeconfig),
            "--namespace",
            namespace,
            "--leader-elect",
            "--leader-elect-namespace",
            namespace,
            "--metrics-bind-address",
            f"127.0.0.1:{ports['controller']}",
            "--health-probe-bind-address",
            f"127.0.0.1:{free_port()}",
        ],
        "insights": [
            "-m",
            "insights",
            "--kubeconfig",
            str(control_plane.kubeconfig),
            "--cert-dir",
            str(foo_operator.cert_dir),
            "--bind-address",
            "127.0.0.1",
            "--port",
            str(free_port()),
            "--metrics-bind-address",
            f"127.0.0.1:{ports['insights']}",
        ],
    }
    processes = [
        Component(
            f"{name}-monitoring", [sys.executable, *args], control_plane.logs_dir / f"{name}-monitoring-{namespace}.log"
        )
        for name, args in argv.items()
    ]
    for process in processes:
        process.start()
    try:
        for name, port in ports.items():
            wait_until(f"the {name}'s /metrics", lambda port=port: _scrapable(port), timeout=30, watch=processes)
        yield ports
    finally:
        for process in processes:
            process.stop()


def test_every_metric_the_dashboard_and_the_alerts_query_is_exported(
    control_plane: LocalControlPlane,
    foo_operator: LocalProduct,
    namespace: str,
    controller_and_insights: dict[str, int],
) -> None:
    foo = {
        "apiVersion": "samplecontroller.k8s.io/v1",
        "kind": "Foo",
        "metadata": {"name": "watched", "namespace": namespace},
        "spec": {"deployment": {"name": "watched-nginx"}, "replicas": 1},
    }
    control_plane.kubectl("apply", "-f", "-", input=json.dumps(foo))  # admission: webhook samples
    control_plane.kubectl("get", "foos.v1alpha1.samplecontroller.k8s.io", "-n", namespace)  # conversion

    def reconciled_as_leader() -> bool:
        text = scrape(controller_and_insights["controller"])
        return "leader_election_master_status{" in text and "controller_runtime_reconcile_total{" in text

    wait_until("the controller to lead and reconcile the Foo", reconciled_as_leader, timeout=60)

    live = {
        "webhook": scrape(foo_operator.metrics_port),
        **{name: scrape(port) for name, port in controller_and_insights.items()},
    }
    for name, text in live.items():
        # prometheus-client's own process and runtime collectors, in every process.
        for family in (
            "process_cpu_seconds_total",
            "process_resident_memory_bytes",
            "process_open_fds",
            "python_info",
            "python_gc_collections_total",
        ):
            assert f"\n{family}" in text, f"{name} lacks {family}"
    assert 'controller_runtime_webhook_requests_total{code="200",webhook="/mutate-foo"}' in live["webhook"]

    exported = set().union(*map(exported_names, live.values())) | SYNTHETIC
    queried = {
        "dashboard": set().union(*map(metric_names, dashboard_queries())),
        "alerts": set().union(*map(metric_names, rule_queries(find(render(ALL_ON), "PrometheusRule")))),
    }
    for where, names in queried.items():
        assert names, where
        assert not names - exported, f"the {where} queries metrics no process exports: {sorted(names - exported)}"


def test_a_scraper_asking_for_openmetrics_gets_it(foo_operator: LocalProduct) -> None:
    """prometheus-client's own handler negotiates the format, as Prometheus asks for it."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{foo_operator.metrics_port}/metrics",
        headers={"Accept": "application/openmetrics-text; version=1.0.0"},
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        body = response.read().decode()
        assert response.headers["Content-Type"].startswith("application/openmetrics-text")
    assert body.rstrip().endswith("# EOF")
