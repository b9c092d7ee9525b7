"""bench.summary: the targets table of issue #17, one row per target, read from the results files."""

from typing import Any

from bench.summary import rows
from bench.workers import projected_ratio


def _ratios(endpoint: str, rps: float, p99: float, cpu: float) -> dict[str, Any]:
    return {
        "peer": "go-controller-runtime",
        "endpoint": endpoint,
        "saturation_rps": rps,
        "saturation_p99": p99,
        "fixed_rate_p99": 1.0,
        "cpu_per_request": cpu,
    }


RESULTS: dict[str, dict[str, Any]] = {
    "admission": {
        "settings": {"rate": 1000.0},
        "ratios": [
            _ratios("/validate-foo", 1.25, 0.4, 0.9),
            _ratios("/mutate-foo", 1.5, 0.3, 0.8),
            _ratios("/convert", 1.3, 0.5, 0.7),
        ],
        "results": {
            "ours": {
                "/validate-foo": {"fixed_rate": {"p99_ms": 2.5}},
                "/mutate-foo": {"fixed_rate": {"p99_ms": 2.75}},
            }
        },
    },
    "workers": {"rps": {"1": 4000.0, "2": 7600.0}, "ratio": 1.9},
    "admission_overhead": {"ratio_ours_to_go": 1.05},
    "conversion": {
        "settings": {"objects": 10_000},
        "direct": {
            "ours": {"to v1alpha1": {"seconds": 0.2}, "to v1": {"seconds": 0.3}},
            "go-controller-runtime": {"to v1alpha1": {"seconds": 0.8}, "to v1": {"seconds": 1.0}},
        },
        "apiserver": {"conversion_rate_ours_to_go": 1.4, "conversion_rate_ours_to_go_http1": 1.1},
    },
    "cold_start": {"median_seconds": {"ours": 0.12}},
}


def _table(results: dict[str, dict[str, Any]]) -> dict[str, tuple[str, str]]:
    return {what: (target, measured) for what, target, measured in rows(results.get)}


def test_each_target_of_the_issue_is_a_row_next_to_its_measurement() -> None:
    table = _table(RESULTS)
    assert table["validate, one core, saturation: req/s ours ÷ Go"] == ("≥ 1.2", "1.25")
    assert table["validate, one core, saturation: p99 ours ÷ Go"] == ("≤ 0.5", "0.40")
    assert table["mutate, one core, saturation: CPU per review ours ÷ Go"] == ("< 1.0", "0.80")
    assert table["validate: p99 at a fixed 1,000 req/s, ms"] == ("≤ 3", "2.50")
    assert table["2 workers on 2 cores ÷ 1 worker, req/s"] == ("≥ 1.8", "1.90")
    assert table["creates/s through kube-apiserver, our webhooks ÷ Go's"] == ("≥ 1.0", "1.05")
    assert table["10,000-Foo conversion to v1alpha1 over HTTPS: time ours ÷ Go"] == ("≤ 0.25", "0.25")
    assert table["10,000-Foo conversion to v1 over HTTPS: time ours ÷ Go"] == ("≤ 0.25", "0.30")
    assert table["per-object conversion reviews (list read through kube-apiserver): Foos/s ours ÷ Go"] == (
        "≥ 1.2",
        "1.40",
    )
    assert table["same, the Go peer over HTTP/1.1 (as a Service reaches it): Foos/s ours ÷ Go"] == ("(≥ 1.2)", "1.10")
    assert table["/convert of one object, one core, saturation: req/s ours ÷ Go"] == ("≥ 1.2", "1.30")
    assert table["webhook start to /readyz, ms"] == ("≤ 150", "120")


def test_without_results_every_row_is_still_printed_with_nothing_measured() -> None:
    table = rows(lambda name: None)
    assert len(table) == 19
    assert {measured for _, _, measured in table} == {"-"}


def test_a_missing_workers_file_leaves_only_its_row_unmeasured() -> None:
    results = {name: doc for name, doc in RESULTS.items() if name != "workers"}
    table = _table(results)
    assert table["2 workers on 2 cores ÷ 1 worker, req/s"] == ("≥ 1.8", "-")
    assert table["creates/s through kube-apiserver, our webhooks ÷ Go's"] == ("≥ 1.0", "1.05")


def test_the_workers_row_adds_what_cpu_per_review_projects_on_free_cores() -> None:
    results = {**RESULTS, "workers": {"ratio": 1.45, "projected_ratio": 1.96}}
    assert _table(results)["2 workers on 2 cores ÷ 1 worker, req/s"] == (
        "≥ 1.8",
        "1.45 (CPU/review projects 1.96 on 2 free cores)",
    )


def test_two_workers_costing_what_one_costs_per_review_project_twice_the_rate() -> None:
    assert projected_ratio(215.0, 215.0) == 2.0
    assert projected_ratio(200.0, 250.0) == 1.6
    assert projected_ratio(0.0, 250.0) is None
