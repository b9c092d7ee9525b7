"""`helm upgrade --reuse-values` from an older chart, as the templates see it: refused in one line
that names the upgrade that works, before any template reads a value the old chart did not have.

--reuse-values replaces the new chart's defaults with the old chart's values (Helm's
`reuseValues`: `chart.Values = oldVals`). Here that is a copy of the chart whose values.yaml lacks
what the older charts lacked; tests/e2e/test_chart_upgrades.py runs the real upgrades from every
past release with Helm 3 and Helm 4, the documented command and this refusal.
"""

from __future__ import annotations

import copy
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from .test_chart import CHART, run_helm

DEFAULTS: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
REFUSAL = "they come from an older chart, as `helm upgrade --reuse-values` keeps them"
ADVICE = "Upgrade with --reset-then-reuse-values (Helm >= 3.14), or with -f and the values you set"


def render_with_chart_values(values: dict[str, Any]) -> tuple[int, str]:
    """`helm template` of the chart with `values` as its own values.yaml (what --reuse-values does)."""
    with tempfile.TemporaryDirectory(prefix="chart-reused-values-") as scratch:
        chart = Path(scratch) / "foo-operator"
        shutil.copytree(CHART, chart)
        (chart / "values.yaml").write_text(yaml.safe_dump(values))
        result = run_helm("template", "foo-operator", str(chart), "--namespace", "foo-system")
        return result.returncode, result.stderr


def without(values: dict[str, Any], *paths: str) -> dict[str, Any]:
    out = copy.deepcopy(values)
    for path in paths:
        *parents, key = path.split(".")
        node = out
        for parent in parents:
            node = node[parent]
        del node[key]
    return out


@pytest.mark.parametrize(
    ("lacking", "named"),
    [
        # 0.2.0's values lack these three (and 0.1.0's 64 keys more).
        (("webhook.healthPort", "insights.healthPort", "image.architectures"), "webhook.healthPort"),
        (("migrateStorage", "webhook.healthPort"), "webhook.healthPort"),
    ],
)
def test_values_of_an_older_chart_are_refused_naming_what_they_lack_and_the_upgrade_that_works(
    lacking: tuple[str, ...], named: str
) -> None:
    code, stderr = render_with_chart_values(without(DEFAULTS, *lacking))
    assert code != 0
    assert f"the values lack {named}, which this chart" in stderr
    assert REFUSAL in stderr and ADVICE in stderr
    assert "nil pointer" not in stderr


def test_this_charts_own_values_pass_the_check() -> None:
    code, stderr = render_with_chart_values(DEFAULTS)
    assert code == 0, stderr


def test_values_without_image_architectures_render_as_the_default_does() -> None:
    """0.2.0's values lack only image.architectures: the templates take values.yaml's default for it,
    so `--reuse-values` from 0.2.0 gives what a fresh install does (and a null, which Helm turns into
    an absent key, does too; `[]` is how to drop the constraint)."""
    with tempfile.TemporaryDirectory(prefix="chart-defaults-") as scratch:
        chart = Path(scratch) / "foo-operator"
        shutil.copytree(CHART, chart)
        renders = []
        for values in (DEFAULTS, without(DEFAULTS, "image.architectures")):
            (chart / "values.yaml").write_text(yaml.safe_dump(values))
            result = run_helm("template", "foo-operator", str(chart), "--namespace", "foo-system")
            assert result.returncode == 0, result.stderr
            renders.append(re.sub(r"(caBundle|ca\.crt|tls\.crt|tls\.key): \S+", r"\1: <generated>", result.stdout))
    assert renders[0] == renders[1]
