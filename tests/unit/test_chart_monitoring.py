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

from certs.rotation import CA_BUNDLE
from hack.plane.binaries import find_binaries
from tests.monitoring import DASHBOARD, dashboard, dashboard_queries, metric_names, rule_queries

from .test_chart import CHART, NAMESPACE, PEM_CA, RELEASE, find, helm_with_values, mode_values, render, render_error

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
            assert "insecureSkipVerify" not in endpoint["tlsConfig"]
        else:
            assert endpoint["scheme"] == "http" and "bearerTokenFile" not in endpoint


def _endpoints(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        o["metadata"]["name"].removeprefix(f"{RELEASE}-").removesuffix("-metrics"): o["spec"]["endpoints"][0]
        for o in objects
        if o["kind"] == "ServiceMonitor"
    }


@pytest.mark.parametrize(
    ("mode", "key"),
    [
        ("generated", "ca.crt"),
        ("certManager", "ca.crt"),
        # The rotator's Secret: ca.crt is the issuing CA alone, switched with tls.crt in one write
        # that reaches the pods a kubelet sync later; the bundle trusts old and new meanwhile.
        ("rotator", CA_BUNDLE),
    ],
)
def test_the_scrape_verifies_each_metrics_certificate_against_the_serving_secrets_ca(mode: str, key: str) -> None:
    objects = render({"tls": {"mode": mode}, "metrics": {"serviceMonitor": {"enabled": True}}})
    secret = f"{RELEASE}-webhook-generated-tls" if mode == "generated" else f"{RELEASE}-webhook-tls"
    ca = {"secret": {"name": secret, "key": key}}
    service = {"webhook": f"{RELEASE}-webhook", "insights": f"{RELEASE}-insights", "controller": f"{RELEASE}-webhook"}
    for component, endpoint in _endpoints(objects).items():
        assert endpoint["tlsConfig"] == {"ca": ca, "serverName": f"{service[component]}.{NAMESPACE}.svc"}
    # The controller serves the serving pair (certificate and key only) on its metrics port then.
    controller = find(objects, "Deployment", f"{RELEASE}-controller")["spec"]["template"]["spec"]
    assert "--metrics-cert-dir=/etc/foo-operator/tls" in controller["containers"][0]["args"]
    (tls,) = [v for v in controller["volumes"] if v["name"] == "tls"]
    assert [item["key"] for item in tls["secret"]["items"]] == ["tls.crt", "tls.key"]


def test_with_an_existing_secret_the_scrape_verifies_against_the_ca_you_gave() -> None:
    objects = render({**mode_values("existingSecret"), "metrics": {"serviceMonitor": {"enabled": True}}})
    config_map = find(objects, "ConfigMap", f"{RELEASE}-metrics-ca")
    assert config_map["data"]["ca.crt"].strip() == PEM_CA.strip()
    for endpoint in _endpoints(objects).values():
        assert endpoint["tlsConfig"]["ca"] == {"configMap": {"name": f"{RELEASE}-metrics-ca", "key": "ca.crt"}}


def test_your_tls_config_is_used_as_it_is_and_the_controller_keeps_its_own_pair() -> None:
    mine = {"insecureSkipVerify": True}
    objects = render({"metrics": {"serviceMonitor": {"enabled": True, "tlsConfig": mine}}})
    assert all(endpoint["tlsConfig"] == mine for endpoint in _endpoints(objects).values())
    args = find(objects, "Deployment", f"{RELEASE}-controller")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not any(arg.startswith("--metrics-cert-dir") for arg in args)


def test_the_bearer_token_may_come_from_a_secret_instead_of_a_token_file() -> None:
    authorization = {"secretName": "prometheus-token", "secretKey": "jwt"}
    objects = render({"metrics": {"serviceMonitor": {"enabled": True, "authorization": authorization}}})
    for endpoint in _endpoints(objects).values():
        assert "bearerTokenFile" not in endpoint
        assert endpoint["authorization"] == {
            "type": "Bearer",
            "credentials": {"name": "prometheus-token", "key": "jwt"},
        }


def test_the_chart_can_make_a_scraper_that_may_only_read_metrics_and_its_token_secret() -> None:
    objects = render({"metrics": {"serviceMonitor": {"enabled": True, "authorization": {"createTokenSecret": True}}}})
    name = f"{RELEASE}-metrics-scraper"
    secret = find(objects, "Secret", name)
    assert secret["type"] == "kubernetes.io/service-account-token"
    assert secret["metadata"]["annotations"] == {"kubernetes.io/service-account.name": name}
    assert find(objects, "ServiceAccount", name)["automountServiceAccountToken"] is False
    binding = find(objects, "ClusterRoleBinding", name)
    assert binding["roleRef"]["name"] == f"{RELEASE}-metrics-reader"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}]
    for endpoint in _endpoints(objects).values():
        assert endpoint["authorization"]["credentials"] == {"name": name, "key": "token"}


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


def test_every_alert_links_its_own_runbook_section_in_the_troubleshooting_guide() -> None:
    rule = find(render(ALL_ON), "PrometheusRule")
    guide = (Path(__file__).parents[2] / "docs" / "troubleshooting.md").read_text()
    # GitHub's anchor of a heading: lower case; this guide's alert headings are the bare names.
    anchors = {line.removeprefix("### ").strip().lower() for line in guide.splitlines() if line.startswith("### ")}
    for alert in (r for group in rule["spec"]["groups"] for r in group["rules"]):
        page, _, anchor = alert["annotations"]["runbook_url"].partition("#")
        assert page.endswith("/docs/troubleshooting.md") and page.startswith("https://"), alert["alert"]
        assert anchor == alert["alert"].lower() and anchor in anchors, alert["alert"]


def test_the_runbook_page_is_a_value() -> None:
    rule = find(
        render({"metrics": {"prometheusRule": {"enabled": True, "runbookURL": "https://wiki.example/foo"}}}),
        "PrometheusRule",
    )
    urls = {r["annotations"]["runbook_url"] for group in rule["spec"]["groups"] for r in group["rules"]}
    assert urls and all(url.startswith("https://wiki.example/foo#foooperator") for url in urls)


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
