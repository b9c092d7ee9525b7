"""The project's speed targets (bench/README.md) next to what the latest results in bench/results/ measured.

    .venv/bin/python -m bench.summary

Numbers side by side, no verdicts: a slow or busy machine moves them, and that is information.
"""

from __future__ import annotations

import json
from typing import Any

from .report import RESULTS_DIR, fmt, table


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


def rows() -> list[list[str]]:
    admission = _load("admission")
    result: list[list[str]] = []
    for endpoint in ("/validate-foo", "/mutate-foo"):
        ratio: dict[str, Any] = next(
            (
                r
                for r in _get(admission, "ratios") or []
                if r["peer"] == "go-controller-runtime" and r["endpoint"] == endpoint
            ),
            {},
        )
        result.append([f"admission {endpoint}: req/s ours ÷ Go", "≥ 1.2", fmt(ratio.get("saturation_rps"), 2)])
        result.append(
            [f"admission {endpoint}: p99 ours ÷ Go (saturation)", "≤ 0.5", fmt(ratio.get("saturation_p99"), 2)]
        )
        result.append(
            [f"admission {endpoint}: p99 ours ÷ Go (fixed rate)", "≤ 0.5", fmt(ratio.get("fixed_rate_p99"), 2)]
        )
    conversion = _load("conversion")
    objects = _get(conversion, "settings", "objects")
    for case in ("to v1alpha1", "to v1"):
        seconds = _get(conversion, "direct", "ours", case, "seconds")
        result.append(
            [
                f"/convert {fmt(objects)} Foos {case} over HTTPS, ms",
                "≤ 100",
                fmt(seconds * 1000 if seconds is not None else None),
            ]
        )
    convergence = _load("convergence")
    ours = _get(convergence, "results", "ours") or {}
    seconds = _get(ours, "convergence", "seconds")
    kubectl = ours.get("kubectl_seconds")
    result.append(
        [
            f"controller: {fmt(_get(convergence, 'settings', 'foos'))} Foos converged ÷ kubectl creating "
            "as many Deployments",
            "≤ 3",
            fmt(seconds / kubectl if seconds and kubectl else None, 2),
        ]
    )
    result.append(
        [
            f"controller RSS with {fmt(_get(ours, 'quiet', 'foos'))} Foos, MiB",
            "≤ 150",
            fmt(_get(ours, "quiet", "rss_mib")),
        ]
    )
    result.append(
        [
            f"controller writes in a {fmt(_get(convergence, 'settings', 'quiet_seconds'))} s quiet window",
            "0",
            fmt(_get(ours, "quiet", "writes")),
        ]
    )
    cold = _get(_load("cold_start"), "median_seconds", "ours")
    result.append(["webhook start to /readyz, ms", "≤ 1000", fmt(cold * 1000 if cold is not None else None)])
    return result


def main(argv: list[str] | None = None) -> int:
    print("\nSpeed targets (bench/README.md) and the latest measurements (bench/results/*.json)")
    print(table(["what", "target", "measured"], rows()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
