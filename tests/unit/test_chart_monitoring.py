"""Prometheus and Grafana around the chart: ServiceMonitors, the PrometheusRule (checked and
unit-tested by Prometheus' own promtool) and the dashboard ConfigMap."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from hack.binaries import find_binaries
from tests.monitoring import DASHBOARD, dashboard, dashboard_queries, metric_names, rule_queries

from .test_chart import CHART, NAMESPACE, RELEASE, find, helm_with_values, render, render_error

PROMTOOL_TESTS = Path(__file__).parent / "promtool" / "alerts.test.yaml"
ALL_ON = {
    "metrics": {
        "serviceMonitor": {"enabled": True},
        "prometheusRule": {"enabled": True},
        "grafanaDashboard": {"enabled": True},
    }
}


def promtool() -> Path:
    """The promtool `hack/build.sh` builds; a missing one skips, except under CI=true."""
    path = find_binaries().promtool
    if not path.is_file():
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and promtool is not built ({path}): run `bash hack/build.sh`", pytrace=False)
        pytest.skip(f"promtool is not built ({path}): run `bash hack/build.sh`")
    return path


def rules_file(objects: list[dict[str, Any]], directory: Path) -> Path:
    """The PrometheusRule's spec as the rule file Prometheus itself would load."""
    path = directory / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": find(objects, "PrometheusRule")["spec"]["groups"]}))
    return path


def run_promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(promtool()), *args], capture_output=True, text=True, timeout=120)


# ----------------------------------------------------------------------------- off by default
def test_nothing_for_prometheus_or_grafana_unless_asked() -> None:
    kinds = {o["kind"] for o in render()}
    assert not kinds & {"ServiceMonitor", "PrometheusRule", "ConfigMap"}


@pytest.mark.parametrize("secure", [True, False], ids=["secure", "plain"])
def test_helm_lint_strict_is_clean_with_all_of_it_on(secure: bool) -> None:
    values = {"metrics": {**ALL_ON["metrics"], "secure": secure}}
    result = helm_with_values("lint", values, str(CHART), "--strict", "--namespace", NAMESPACE)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout, result.stdout


# ----------------------------------------------------------------------------- ServiceMonitors
@pytest.mark.parametrize("secure", [True, False], ids=["secure", "plain"])
def test_a_service_monitor_scrapes_each_metrics_service_by_its_port(secure: bool) -> None:
    objects = render({"metrics": {"secure": secure, "serviceMonitor": {"enabled": True, "labels": {"release": "kps"}}}})
    services = {
        o["metadata"]["name"]: o
        for o in objects
        if o["kind"] == "Service" and o["metadata"]["name"].endswith("-metrics")
    }
    monitors = [o for o in objects if o["kind"] == "ServiceMonitor"]
    assert (
        sorted(m["metadata"]["name"] for m in monitors)
        == sorted(services)
        == [f"{RELEASE}-controller-metrics", f"{RELEASE}-insights-metrics", f"{RELEASE}-webhook-metrics"]
    )
    for monitor in monitors:
        service = services[monitor["metadata"]["name"]]
        assert monitor["metadata"]["labels"]["release"] == "kps"
        assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
        selector = monitor["spec"]["selector"]["matchLabels"]
        assert selector.items() <= service["metadata"]["labels"].items(), "it must select its Service"
        (endpoint,) = monitor["spec"]["endpoints"]
        assert endpoint["port"] in [port["name"] for port in service["spec"]["ports"]]
        if secure:
            assert endpoint["scheme"] == "https" and endpoint["bearerTokenFile"].endswith("/token")
            assert endpoint["tlsConfig"] == {"insecureSkipVerify": True}
        else:
            assert endpoint["scheme"] == "http" and "bearerTokenFile" not in endpoint


def test_service_monitors_follow_the_components_installed() -> None:
    objects = render(
        {
            "insights": {"enabled": False},
            "controller": {"enabled": False},
            "metrics": {"serviceMonitor": {"enabled": True}},
        }
    )
    assert [o["metadata"]["name"] for o in objects if o["kind"] == "ServiceMonitor"] == [f"{RELEASE}-webhook-metrics"]


def test_a_service_monitor_without_metrics_services_is_refused() -> None:
    error = render_error({"metrics": {"service": {"enabled": False}, "serviceMonitor": {"enabled": True}}})
    assert "metrics.serviceMonitor.enabled needs metrics.service.enabled" in error


def test_monitoring_values_are_checked_by_the_schema() -> None:
    error = render_error({"metrics": {"prometheusRule": {"webhookErrorRatio": 2}}})
    assert "at '/metrics/prometheusRule/webhookErrorRatio'" in error
    error = render_error({"metrics": {"serviceMonitor": {"interval": "often"}}})
    assert "at '/metrics/serviceMonitor/interval'" in error


# ----------------------------------------------------------------------------- the dashboard
def test_the_dashboard_config_map_carries_the_repository_json_and_the_sidecar_label() -> None:
    objects = render(
        {
            "metrics": {
                "grafanaDashboard": {
                    "enabled": True,
                    "namespace": "monitoring",
                    "annotations": {"grafana_folder": "Operators"},
                }
            }
        }
    )
    config_map = find(objects, "ConfigMap", f"{RELEASE}-dashboard")
    assert config_map["metadata"]["namespace"] == "monitoring"
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["annotations"] == {"grafana_folder": "Operators"}
    assert json.loads(config_map["data"]["foo-operator.json"]) == json.loads(DASHBOARD.read_text())


def test_the_dashboard_asks_prometheus_only_through_its_datasource_variable() -> None:
    board = dashboard()
    assert board["uid"] == "foo-operator"
    assert [v["name"] for v in board["templating"]["list"]] == ["datasource", "namespace"]
    queries = dashboard_queries(board)
    assert len(queries) >= 15
    for query in queries:
        assert 'namespace="$namespace"' in query, query
        assert metric_names(query), f"no metric in {query!r}"


# ----------------------------------------------------------------------------- the alerts
def test_every_alert_names_a_severity_and_says_what_is_wrong() -> None:
    rule = find(render(ALL_ON), "PrometheusRule")
    alerts = [r for group in rule["spec"]["groups"] for r in group["rules"]]
    assert [a["alert"] for a in alerts] == [
        "FooOperatorTargetDown",
        "FooOperatorCertificateExpiresSoon",
        "FooOperatorWebhookErrors",
        "FooOperatorWebhookSlow",
        "FooOperatorReconcileErrors",
        "FooOperatorWorkqueueBacklog",
        "FooOperatorNoLeader",
    ]
    for alert in alerts:
        assert alert["labels"]["severity"] in ("warning", "critical")
        assert alert["annotations"]["summary"] and alert["annotations"]["description"]


def test_controller_alerts_only_with_a_controller_and_leader_alert_only_with_election() -> None:
    def alerts(values: dict[str, Any]) -> list[str]:
        rule = find(render({"metrics": {"prometheusRule": {"enabled": True}}, **values}), "PrometheusRule")
        return [r["alert"] for group in rule["spec"]["groups"] for r in group["rules"]]

    assert "FooOperatorNoLeader" not in alerts({"controller": {"leaderElection": {"enabled": False}}})
    without = alerts({"controller": {"enabled": False}})
    assert not {"FooOperatorReconcileErrors", "FooOperatorWorkqueueBacklog", "FooOperatorNoLeader"} & set(without)


@pytest.mark.parametrize(
    "values",
    [{}, {"controller": {"enabled": False}, "insights": {"enabled": False}}],
    ids=["everything", "webhook-only"],
)
def test_promtool_accepts_the_rules(values: dict[str, Any], tmp_path: Path) -> None:
    path = rules_file(render({**ALL_ON, **values}), tmp_path)
    result = run_promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_unit_tests_fire_each_alert_on_the_series_that_matter(tmp_path: Path) -> None:
    rules_file(render(ALL_ON), tmp_path)
    shutil.copy(PROMTOOL_TESTS, tmp_path / PROMTOOL_TESTS.name)
    result = run_promtool("test", "rules", str(tmp_path / PROMTOOL_TESTS.name))
    assert result.returncode == 0, result.stdout + result.stderr


def test_rule_queries_name_only_metrics_the_dashboard_knows_too() -> None:
    """One vocabulary: every metric an alert reads is on the dashboard, where the on-call looks."""
    on_dashboard = set().union(*map(metric_names, dashboard_queries()))
    in_rules = set().union(*map(metric_names, rule_queries(find(render(ALL_ON), "PrometheusRule"))))
    assert in_rules - on_dashboard == {"up"}
