"""The chart's Kubernetes versions: a floor the matrix proves (hack/versions.env), and no ceiling.

`make test` runs the full e2e suite on K8S_VERSION and the smoke set on each of K8S_SMOKE_VERSIONS;
Chart.yaml's kubeVersion starts at the oldest of them and the chart README's table lists them all.
A ceiling would refuse to render the day a cluster reaches the next minor (GitOps tools render with
the cluster's version), so there is none: the newest served minor is in the matrix instead.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from hack.plane.binaries import versions
from hack.plane.kube_versions import minor_of, smoke_versions
from tests.unit.test_chart import run_helm

CHART = Path(__file__).resolve().parents[2] / "charts" / "foo-operator"


def matrix() -> list[str]:
    return sorted({versions({})["K8S_VERSION"], *smoke_versions()}, key=minor_of)


def readme_table() -> dict[str, str]:
    """Version -> what the README says was run on it, from "## Supported Kubernetes versions"."""
    text = (CHART / "README.md").read_text()
    section = text.split("## Supported Kubernetes versions", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, str] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and re.fullmatch(r"v1\.\d+\.\d+", cells[0]):
            rows[cells[0]] = cells[1]
    return rows


def test_kube_version_is_the_oldest_minor_of_the_matrix_and_no_ceiling() -> None:
    kube_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["kubeVersion"]
    assert kube_version == f">=1.{minor_of(matrix()[0])}.0-0"


def test_the_readme_table_lists_every_version_of_the_matrix_and_how_it_was_proven() -> None:
    rows = readme_table()
    assert sorted(rows, key=minor_of) == matrix()
    assert "full e2e suite" in rows[versions({})["K8S_VERSION"]]
    for version in smoke_versions():
        assert "smoke set" in rows[version]


def test_the_default_version_is_not_also_in_the_smoke_matrix() -> None:
    assert versions({})["K8S_VERSION"] not in smoke_versions()


@pytest.mark.parametrize("kube_version", ["1.27.0", "1.37.9", "1.38.0", "1.40.0-rc.1", "2.0.0"])
def test_helm_renders_for_the_floor_and_every_newer_cluster(kube_version: str) -> None:
    result = run_helm("template", "foo-operator", str(CHART), "--kube-version", kube_version)
    assert result.returncode == 0, result.stderr


def test_helm_refuses_a_cluster_older_than_the_floor() -> None:
    result = run_helm("template", "foo-operator", str(CHART), "--kube-version", "1.26.15")
    assert result.returncode != 0
    assert "chart requires kubeVersion: >=1.27.0-0 which is incompatible with Kubernetes v1.26.15" in result.stderr
