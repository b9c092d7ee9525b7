"""The project's speed targets (bench/README.md) next to what the latest results in bench/results/ measured.

    .venv/bin/python -m bench.summary

Numbers side by side, no verdicts: a slow or busy machine moves them, and that is information.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from .report import RESULTS_DIR, fmt, ratio, table


def _load(name: str) -> dict[str, Any] | None:
    path = RESULTS_DIR / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _get(document: dict[str, Any] | None, *keys: Any) -> Any:
    value: Any = document
    for key in keys:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


Loader = Callable[[str], dict[str, Any] | None]


def _go_ratios(admission: dict[str, Any] | None, endpoint: str) -> dict[str, Any]:
    """bench.admission's ratios of ours to the Go peer for ``endpoint`` ({} when not measured)."""
    return next(
        (
            r
            for r in _get(admission, "ratios") or []
            if r["peer"] == "go-controller-runtime" and r["endpoint"] == endpoint
        ),
        {},
    )


def _admission_rows(admission: dict[str, Any] | None) -> list[list[str]]:
    result = []
    for endpoint, name in (("/validate-foo", "validate"), ("/mutate-foo", "mutate")):
        ratios = _go_ratios(admission, endpoint)
        result += [
            [f"{name}, one core, saturation: req/s ours ÷ Go", "≥ 1.2", fmt(ratios.get("saturation_rps"), 2)],
            [f"{name}, one core, saturation: p99 ours ÷ Go", "≤ 0.5", fmt(ratios.get("saturation_p99"), 2)],
            [f"{name}, one core, saturation: CPU per review ours ÷ Go", "< 1.0", fmt(ratios.get("cpu_per_request"), 2)],
        ]
    rate = _get(admission, "settings", "rate") or 1000.0  # the rate until one is measured
    for endpoint, name in (("/validate-foo", "validate"), ("/mutate-foo", "mutate")):
        p99 = _get(admission, "results", "ours", endpoint, "fixed_rate", "p99_ms")
        result.append([f"{name}: p99 at a fixed {fmt(rate)} req/s, ms", "≤ 3", fmt(p99, 2)])
    return result


def _conversion_rows(conversion: dict[str, Any] | None, admission: dict[str, Any] | None) -> list[list[str]]:
    objects = _get(conversion, "settings", "objects") or 10_000
    result = []
    for case in ("to v1alpha1", "to v1"):
        ours = _get(conversion, "direct", "ours", case, "seconds")
        go = _get(conversion, "direct", "go-controller-runtime", case, "seconds")
        result.append(
            [f"{fmt(objects)}-Foo conversion {case} over HTTPS: time ours ÷ Go", "≤ 0.25", fmt(ratio(ours, go), 2)]
        )
    result.append(
        [
            "per-object conversion reviews (list read through kube-apiserver): Foos/s ours ÷ Go",
            "≥ 1.2",
            fmt(_get(conversion, "apiserver", "conversion_rate_ours_to_go"), 2),
        ]
    )
    # kube-apiserver offers HTTP/2 only to a webhook at a loopback URL; through a Service (the chart's
    # way, and every Go webhook's in a cluster) it speaks HTTP/1.1 to both: the comparison a user meets.
    result.append(
        [
            "same, the Go peer over HTTP/1.1 (as a Service reaches it): Foos/s ours ÷ Go",
            "(≥ 1.2)",
            fmt(_get(conversion, "apiserver", "conversion_rate_ours_to_go_http1"), 2),
        ]
    )
    result.append(
        [
            "/convert of one object, one core, saturation: req/s ours ÷ Go",
            "≥ 1.2",
            fmt(_go_ratios(admission, "/convert").get("saturation_rps"), 2),
        ]
    )
    return result


def _controller_rows(convergence: dict[str, Any] | None) -> list[list[str]]:
    ours = _get(convergence, "results", "ours") or {}
    seconds = _get(ours, "convergence", "seconds")
    kubectl = ours.get("kubectl_seconds")
    return [
        [
            f"controller: {fmt(_get(convergence, 'settings', 'foos'))} Foos converged ÷ kubectl creating "
            "as many Deployments",
            "≤ 3",
            fmt(seconds / kubectl if seconds and kubectl else None, 2),
        ],
        [
            f"controller RSS with {fmt(_get(ours, 'quiet', 'foos'))} Foos, MiB",
            "≤ 150",
            fmt(_get(ours, "quiet", "rss_mib")),
        ],
        [
            f"controller writes in a {fmt(_get(convergence, 'settings', 'quiet_seconds'))} s quiet window",
            "0",
            fmt(_get(ours, "quiet", "writes")),
        ],
    ]


def _workers_cell(workers: dict[str, Any] | None) -> str:
    """The measured ratio, and what CPU per review projects on two free cores when recorded."""
    measured = fmt(_get(workers, "ratio"), 2)
    projected = _get(workers, "projected_ratio")
    return measured if projected is None else f"{measured} (CPU/review projects {fmt(projected, 2)} on 2 free cores)"


def rows(load: Loader = _load) -> list[list[str]]:
    """The targets table: what, target, measured (a ratio ours ÷ Go's unless a unit is named)."""
    admission = load("admission")
    cold = _get(load("cold_start"), "median_seconds", "ours")
    return [
        *_admission_rows(admission),
        ["2 workers on 2 cores ÷ 1 worker, req/s", "≥ 1.8", _workers_cell(load("workers"))],
        [
            "creates/s through kube-apiserver, our webhooks ÷ Go's",
            "≥ 1.0",
            fmt(_get(load("admission_overhead"), "ratio_ours_to_go"), 2),
        ],
        *_conversion_rows(load("conversion"), admission),
        ["webhook start to /readyz, ms", "≤ 150", fmt(cold * 1000 if cold is not None else None)],
        *_controller_rows(load("convergence")),
    ]


def main(argv: list[str] | None = None) -> int:
    print("\nSpeed targets (bench/README.md) and the latest measurements (bench/results/*.json)")
    print(table(["what", "target", "measured"], rows()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
