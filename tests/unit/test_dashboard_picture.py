"""`make dashboard`'s pure parts: the dashboard JSON read as panels, Grafana's variables filled as
Grafana fills them, the query_range request, the answer read back, and the grid laid on a figure."""

from __future__ import annotations

import itertools
import re
import urllib.parse
from pathlib import Path

import pytest

from hack.pictures.dashboard import EMPTY_FOR_A_REASON, Target, prometheus_config
from hack.pictures.grafana import (
    GridPos,
    Panel,
    UnknownVariable,
    figure_box,
    format_value,
    grid_height,
    legend,
    load_panels,
    matrix_series,
    panels,
    query_range_url,
    rate_interval,
    substitute,
    variables,
)
from hack.plane.binaries import MissingBinaryError, find_binaries
from hack.plane.product import OWN_NAMESPACE


def test_every_query_of_the_chart_dashboard_is_filled_with_no_variable_left() -> None:
    values = variables("foo-system", step_seconds=2, scrape_interval_seconds=2)
    queried = [t for p in load_panels() for t in p.targets]
    assert queried
    for target in queried:
        assert "$" not in substitute(target.expr, values)


def test_a_variable_is_written_either_way_and_a_dollar_in_a_regex_is_no_variable() -> None:
    values = {"namespace": "foo-system", "__rate_interval": "8s"}
    expr = 'rate(x{namespace="$namespace", ns2="${namespace}", job=~".+-metrics$"}[$__rate_interval])'
    assert substitute(expr, values) == 'rate(x{namespace="foo-system", ns2="foo-system", job=~".+-metrics$"}[8s])'


def test_a_variable_without_a_value_is_refused_rather_than_drawn_wrong() -> None:
    with pytest.raises(UnknownVariable, match=r"\$cluster"):
        substitute('up{cluster="$cluster"}', {"namespace": "x"})


@pytest.mark.parametrize(
    ("step", "scrape", "expected"),
    [(2, 2, 8), (15, 2, 17), (1, 15, 60), (60, 15, 75)],
)
def test_rate_interval_is_grafanas_at_least_four_scrapes(step: float, scrape: float, expected: float) -> None:
    assert rate_interval(step, scrape) == expected


def test_intervals_are_whole_seconds_rounded_up() -> None:
    assert variables("ns", step_seconds=7.5, scrape_interval_seconds=2) == {
        "namespace": "ns",
        "__interval": "8s",
        "__rate_interval": "10s",  # 7.5 + 2
    }


def test_the_query_range_request_carries_the_query_range_and_step() -> None:
    url = query_range_url("http://127.0.0.1:9090/", 'sum by (code) (rate(x{a="b"}[8s]))', 1000.0, 1150.5, 2)
    parsed = urllib.parse.urlsplit(url)
    assert (parsed.scheme, parsed.netloc, parsed.path) == ("http", "127.0.0.1:9090", "/api/v1/query_range")
    assert urllib.parse.parse_qs(parsed.query) == {
        "query": ['sum by (code) (rate(x{a="b"}[8s]))'],
        "start": ["1000.000"],
        "end": ["1150.500"],
        "step": ["2"],
    }


def test_legends_fill_labels_and_leave_missing_ones_empty() -> None:
    assert legend("{{webhook}} {{code}}", {"webhook": "/mutate-foo", "code": "200"}) == "/mutate-foo 200"
    assert legend("p99 {{ webhook }}", {}) == "p99"


def _answer(*results: tuple[dict[str, str], list[tuple[float, str]]]) -> dict[str, object]:
    return {
        "status": "success",
        "data": {"resultType": "matrix", "result": [{"metric": m, "values": v} for m, v in results]},
    }


def test_a_matrix_answer_becomes_named_series_with_nan_points_left_out() -> None:
    answer = _answer(
        ({"result": "success"}, [(1000, "1"), (1002, "NaN"), (1004, "2.5")]),
        ({"result": "error"}, [(1000, "NaN")]),  # only 0/0: no series, as Grafana draws none
    )
    [only] = matrix_series(answer, "{{result}}")
    assert (only.name, only.times, only.values) == ("success", (1000.0, 1004.0), (1.0, 2.5))


def test_an_error_answer_is_an_error_not_an_empty_panel() -> None:
    with pytest.raises(ValueError, match="bad_data"):
        matrix_series({"status": "error", "errorType": "bad_data", "error": "parse error"}, "")


def test_the_grid_maps_onto_the_figure_from_the_top_left() -> None:
    top_row = figure_box(GridPos(x=0, y=0, w=24, h=1), total_height=10)
    assert (top_row.left, top_row.bottom, top_row.width, top_row.height) == (0, 0.9, 1, 0.1)
    bottom_right = figure_box(GridPos(x=12, y=2, w=12, h=8), total_height=10)
    assert (bottom_right.left, bottom_right.bottom, bottom_right.width, bottom_right.height) == (0.5, 0, 0.5, 0.8)


def test_the_chart_dashboards_panels_tile_the_figure_without_overlapping() -> None:
    found = load_panels()
    height = grid_height(found)
    boxes = [figure_box(p.grid, height) for p in found]
    for box in boxes:
        assert 0 <= box.left and box.left + box.width <= 1 and 0 <= box.bottom and box.bottom + box.height <= 1
    for a, b in itertools.combinations(boxes, 2):
        overlap_x = min(a.left + a.width, b.left + b.width) - max(a.left, b.left)
        overlap_y = min(a.bottom + a.height, b.bottom + b.height) - max(a.bottom, b.bottom)
        assert overlap_x <= 1e-9 or overlap_y <= 1e-9, (a, b)


def test_a_collapsed_rows_panels_are_drawn_under_it_in_grid_order() -> None:
    dashboard = {
        "panels": [
            {"type": "timeseries", "title": "late", "gridPos": {"x": 0, "y": 9, "w": 24, "h": 8}},
            {
                "type": "row",
                "title": "folded",
                "collapsed": True,
                "gridPos": {"x": 0, "y": 0, "w": 24, "h": 1},
                "panels": [
                    {
                        "type": "stat",
                        "title": "inside",
                        "gridPos": {"x": 0, "y": 1, "w": 12, "h": 8},
                        "targets": [{"expr": "up", "legendFormat": "{{job}}"}],
                        "fieldConfig": {"defaults": {"unit": "s"}},
                    }
                ],
            },
        ]
    }
    found = panels(dashboard)
    assert [(p.title, p.is_row) for p in found] == [("folded", True), ("inside", False), ("late", False)]
    assert found[1] == Panel("inside", "stat", GridPos(0, 1, 12, 8), found[1].targets, "s")
    assert found[2].unit == "short"  # Grafana's default when a panel names none


@pytest.mark.parametrize(
    ("value", "unit", "shown"),
    [
        (0.0123, "percentunit", "1.23%"),
        (52_428_800, "bytes", "50 MiB"),
        (31_449_600, "s", "364 days"),
        (0.0042, "s", "4.2 ms"),
        (0, "s", "0 s"),
        (12.5, "reqps", "12.5 req/s"),
        (3, "short", "3"),
    ],
)
def test_values_read_as_grafana_prints_them(value: float, unit: str, shown: str) -> None:
    assert format_value(value, unit) == shown


def test_prometheus_scrapes_each_process_under_the_job_and_labels_the_dashboard_selects(tmp_path: Path) -> None:
    token = tmp_path / "token"
    targets = [
        Target("webhook", 1001, tmp_path / "ca.crt"),
        Target("insights", 1002, tmp_path / "ca.crt"),
        Target("controller", 1003, None),
    ]
    config = prometheus_config(targets, token, scrape_interval=2)
    assert config["global"] == {"scrape_interval": "2s", "scrape_timeout": "2s"}
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert jobs["foo-operator-webhook-metrics"]["tls_config"] == {"ca_file": str(tmp_path / "ca.crt")}
    assert jobs["foo-operator-controller-metrics"]["tls_config"] == {"insecure_skip_verify": True}
    for job in jobs.values():
        assert job["scheme"] == "https" and job["authorization"] == {"credentials_file": str(token)}
        [static] = job["static_configs"]
        assert static["labels"]["namespace"] == OWN_NAMESPACE
    # Every job matcher in the dashboard selects at least one of these jobs.
    matchers = {m for p in load_panels() for t in p.targets for m in re.findall(r'job=~"([^"]+)"', t.expr)}
    assert matchers
    for matcher in matchers:
        assert any(re.fullmatch(matcher, name) for name in jobs), matcher


def test_every_panel_allowed_to_stay_empty_is_a_panel_of_the_dashboard_with_a_reason() -> None:
    titles = {p.title for p in load_panels() if not p.is_row}
    assert set(EMPTY_FOR_A_REASON) <= titles
    assert all(reason for reason in EMPTY_FOR_A_REASON.values())


@pytest.mark.parametrize(
    ("missing", "hint"),
    [
        ("prometheus", "run `bash hack/build.sh prometheus` first"),
        ("sample_controller_crd", "run `bash hack/build.sh sample-controller` first"),
        ("etcd", "run `bash hack/build.sh` first"),
    ],
)
def test_a_binary_not_built_names_the_build_target_that_makes_it(tmp_path: Path, missing: str, hint: str) -> None:
    with pytest.raises(MissingBinaryError, match=re.escape(hint)):
        find_binaries({"FOO_OPERATOR_CACHE": str(tmp_path)}).require(missing)
