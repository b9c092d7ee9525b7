"""What the chart's monitoring asks Prometheus for: the queries of the PrometheusRule and of the
Grafana dashboard, and the metric names in them — for the tests that hold both to /metrics."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = REPO_ROOT / "charts" / "foo-operator" / "dashboards" / "foo-operator.json"

# Series Prometheus makes itself for every target, not the processes.
SYNTHETIC = frozenset({"up"})
_KEYWORDS = frozenset(
    {
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "bool",
        "and",
        "or",
        "unless",
        "offset",
        "inf",
        "nan",
    }
)
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENTIFIER = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers that are neither functions,
    keywords, label names (in `{...}` and `by (...)`), strings nor durations."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings (label values, regexes)
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges, subqueries
    text = _GROUPING.sub(" ", text)
    names = set()
    for match in _IDENTIFIER.finditer(text):
        rest = text[match.end() :].lstrip()
        word = match.group()
        start = match.start()
        if rest.startswith("(") or word.lower() in _KEYWORDS or (start and text[start - 1] in "$."):
            continue
        names.add(word)
    return names


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def dashboard_queries(board: dict[str, Any] | None = None) -> list[str]:
    """Every panel target's `expr`, rows' nested panels included."""
    board = dashboard() if board is None else board
    queries = []
    stack = list(board["panels"])
    while stack:
        panel = stack.pop()
        stack.extend(panel.get("panels", []))
        queries += [target["expr"] for target in panel.get("targets", [])]
    return queries


def rule_queries(prometheus_rule: dict[str, Any]) -> list[str]:
    return [rule["expr"] for group in prometheus_rule["spec"]["groups"] for rule in group["rules"]]


def exported_names(exposition: str) -> set[str]:
    """The series names a /metrics text can carry: every family it declares (`# TYPE`), with its
    type's suffixes — a labelled family with no child yet still names its metric."""
    suffixes = {
        "counter": ("_total", "_created"),
        "histogram": ("_bucket", "_sum", "_count", "_created"),
        "summary": ("_sum", "_count", "_created"),
        "gauge": ("",),
        "untyped": ("",),
        "info": ("_info",),
    }
    names = set()
    for line in exposition.splitlines():
        if line.startswith("# TYPE "):
            _, _, family, kind = line.split(" ", 3)
            family = family.removesuffix("_total") if kind == "counter" else family
            names |= {family + suffix for suffix in suffixes.get(kind, ("",))}
    return names
