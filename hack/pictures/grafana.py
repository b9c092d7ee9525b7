"""The chart's Grafana dashboard read as data: its panels, their queries, their places on the grid.

Pure functions only (no I/O but reading the JSON), for `make dashboard` (hack/pictures/dashboard.py), which
evaluates each panel's queries with Prometheus' HTTP API over a local run and draws the panels
where Grafana would put them.
"""

from __future__ import annotations

import json
import logging
import math
import re
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "charts" / "foo-operator" / "dashboards" / "foo-operator.json"

GRID_COLUMNS = 24  # Grafana's grid: 24 columns; a height unit is 30 px, a column 1/24 of the width
_VARIABLE = re.compile(r"\$\{(\w+)\}|\$(\w+)")
_LEGEND_LABEL = re.compile(r"\{\{\s*(\w+)\s*\}\}")


class UnknownVariable(ValueError):
    """A query names a variable we have no value for: evaluating it anyway would draw a lie."""


@dataclass(frozen=True)
class GridPos:
    x: int
    y: int
    w: int
    h: int


@dataclass(frozen=True)
class Target:
    expr: str
    legend: str


@dataclass(frozen=True)
class Panel:
    title: str
    type: str  # "row", "timeseries", "stat", ...
    grid: GridPos
    targets: tuple[Target, ...]
    unit: str

    @property
    def is_row(self) -> bool:
        return self.type == "row"


def load_panels(path: Path = DASHBOARD) -> list[Panel]:
    return panels(json.loads(path.read_text()))


def panels(dashboard: Mapping[str, Any]) -> list[Panel]:
    """Every panel in grid order; a collapsed row's own panels follow it, as Grafana lays them out
    when the row is opened."""
    found: list[Panel] = []
    for raw in dashboard.get("panels", []):
        found.append(_panel(raw))
        found.extend(_panel(inner) for inner in raw.get("panels", []))
    return sorted(found, key=lambda p: (p.grid.y, p.grid.x))


def _panel(raw: Mapping[str, Any]) -> Panel:
    grid = raw["gridPos"]
    return Panel(
        title=str(raw.get("title", "")),
        type=str(raw.get("type", "")),
        grid=GridPos(x=int(grid["x"]), y=int(grid["y"]), w=int(grid["w"]), h=int(grid["h"])),
        targets=tuple(
            Target(expr=str(t["expr"]), legend=str(t.get("legendFormat", ""))) for t in raw.get("targets", [])
        ),
        unit=str(raw.get("fieldConfig", {}).get("defaults", {}).get("unit", "short")),
    )


# -- variables -------------------------------------------------------------------------------
def rate_interval(step_seconds: float, scrape_interval_seconds: float) -> float:
    """Grafana's ``$__rate_interval``: max($__interval + scrape interval, 4 × scrape interval), so
    a rate() window always holds at least four scrapes."""
    return max(step_seconds + scrape_interval_seconds, 4 * scrape_interval_seconds)


def duration(seconds: float) -> str:
    """A PromQL duration: whole seconds, rounded up (PromQL takes ``8s``, not ``7.5s``)."""
    return f"{math.ceil(seconds)}s"


def substitute(expr: str, values: Mapping[str, str]) -> str:
    """``$name`` and ``${name}`` replaced by ``values[name]``; any other variable is an error."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name not in values:
            raise UnknownVariable(f"no value for ${name} in {expr!r}")
        return values[name]

    return _VARIABLE.sub(replace, expr)


def variables(namespace: str, step_seconds: float, scrape_interval_seconds: float) -> dict[str, str]:
    """What the dashboard's queries use, as Grafana would fill them for this range and step."""
    return {
        "namespace": namespace,
        "__interval": duration(step_seconds),
        "__rate_interval": duration(rate_interval(step_seconds, scrape_interval_seconds)),
    }


# -- Prometheus' HTTP API --------------------------------------------------------------------
def query_range_url(base_url: str, expr: str, start: float, end: float, step: float) -> str:
    """GET /api/v1/query_range for ``expr`` from ``start`` to ``end`` (Unix seconds) every ``step``."""
    query = urllib.parse.urlencode({"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"})
    return f"{base_url.rstrip('/')}/api/v1/query_range?{query}"


@dataclass(frozen=True)
class Series:
    name: str  # the target's legend, filled from the series' labels
    times: tuple[float, ...]
    values: tuple[float, ...]


def legend(template: str, labels: Mapping[str, str]) -> str:
    """Grafana's legend format: ``{{label}}`` becomes the label's value (empty when absent)."""
    return _LEGEND_LABEL.sub(lambda m: labels.get(m.group(1), ""), template).strip()


def matrix_series(response: Mapping[str, Any], legend_format: str) -> list[Series]:
    """The series of a query_range answer; NaN points (e.g. 0/0 in a ratio) are left out, as
    Grafana leaves a gap; a series with no point left is no series."""
    if response.get("status") != "success":
        raise ValueError(f"Prometheus answered {response.get('errorType')}: {response.get('error')}")
    data = response["data"]
    if data.get("resultType") != "matrix":
        raise ValueError(f"expected a matrix, got {data.get('resultType')}")
    found = []
    for result in data["result"]:
        points = [(float(t), float(v)) for t, v in result["values"] if not math.isnan(float(v))]
        if points:
            times, values = zip(*points, strict=True)
            found.append(Series(legend(legend_format, result["metric"]), tuple(times), tuple(values)))
    return found


# -- layout ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Box:
    """Where a panel goes in the figure: fractions of its width and height, from the bottom left
    (matplotlib's axes coordinates)."""

    left: float
    bottom: float
    width: float
    height: float


def grid_height(all_panels: Sequence[Panel]) -> int:
    """Height of the whole dashboard in grid units."""
    return max((p.grid.y + p.grid.h for p in all_panels), default=0)


def figure_box(grid: GridPos, total_height: int) -> Box:
    """Grafana's grid (x, y from the top left, in columns and height units) as figure fractions."""
    return Box(
        left=grid.x / GRID_COLUMNS,
        bottom=1 - (grid.y + grid.h) / total_height,
        width=grid.w / GRID_COLUMNS,
        height=grid.h / total_height,
    )


# -- units -----------------------------------------------------------------------------------
def format_value(value: float, unit: str) -> str:
    """A value as Grafana would print it for the panel's unit (the few units the dashboard uses)."""
    if unit == "percentunit":
        return f"{value * 100:.3g}%"
    if unit == "bytes":
        for suffix, power in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
            if abs(value) >= 2**power:
                return f"{value / 2**power:.3g} {suffix}"
        return f"{value:.3g} B"
    if unit == "s":
        steps: tuple[tuple[str, float], ...] = (("days", 86400), ("h", 3600), ("min", 60), ("s", 1), ("ms", 1e-3))
        for suffix, size in (*steps, ("µs", 1e-6)):
            if abs(value) >= size:
                return f"{value / size:.3g} {suffix}"
        return "0 s" if value == 0 else f"{value * 1e9:.3g} ns"
    suffix = {"reqps": " req/s", "ops": " ops/s"}.get(unit, "")
    return f"{value:.3g}{suffix}"
