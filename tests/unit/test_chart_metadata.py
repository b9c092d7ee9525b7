"""What Chart.yaml tells Helm, Artifact Hub and a user about the chart: where it comes from, who
keeps it, its license (shipped in the package), its icon, its CRD and examples of it.

Every URL that points into this repository names a file that is in it, and what Chart.yaml says
about the CRD is what fooapi and examples/ say: none of it can drift on its own.
"""

from __future__ import annotations

import re
import tarfile
import tempfile
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

import pytest
import yaml

from fooapi import CRD_NAME, GROUP, KIND
from fooapi.names import HUB_VERSION

from .test_chart import CHART, REPO_ROOT, run_helm

PROJECT = "https://github.com/foo-operator/foo-operator"
# A URL of a file on the default branch: blob (a page) or raw (the file itself).
IN_REPOSITORY = re.compile(
    r"^(?:https://github\.com/foo-operator/foo-operator/(?:blob|tree)/main/"
    r"|https://raw\.githubusercontent\.com/foo-operator/foo-operator/main/)(?P<path>.+)$"
)


def chart() -> dict[str, Any]:
    meta: dict[str, Any] = yaml.safe_load((CHART / "Chart.yaml").read_text())
    return meta


def annotation(key: str) -> Any:
    return yaml.safe_load(chart()["annotations"][key])


def file_in_repository(url: str) -> Path:
    match = IN_REPOSITORY.match(url)
    assert match, f"{url} does not point into {PROJECT}'s main branch"
    return REPO_ROOT / match.group("path")


def test_home_sources_and_maintainers_are_this_project_not_sample_controller() -> None:
    meta = chart()
    assert meta["home"] == PROJECT
    assert meta["sources"][0] == PROJECT
    assert all(url.startswith(PROJECT) for url in meta["sources"]), meta["sources"]
    assert [m["url"] for m in meta["maintainers"]] == [PROJECT]
    assert all(m["name"] for m in meta["maintainers"])


def test_every_url_into_this_repository_names_a_file_that_is_in_it() -> None:
    meta = chart()
    urls = [meta["icon"], *meta["sources"][1:], *(link["url"] for link in annotation("artifacthub.io/links"))]
    for url in urls:
        assert file_in_repository(url).exists(), url


def test_the_icon_is_an_svg_of_our_own() -> None:
    icon = file_in_repository(chart()["icon"])
    assert icon.suffix == ".svg"
    root = ElementTree.parse(icon).getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    assert root.get("viewBox") == "0 0 256 256", "square, as Artifact Hub shows it"


def test_the_license_is_in_the_chart_and_is_the_projects() -> None:
    assert (CHART / "LICENSE").read_bytes() == (REPO_ROOT / "LICENSE").read_bytes()
    assert annotation("artifacthub.io/license") == "Apache-2.0"
    assert "Apache License" in (REPO_ROOT / "LICENSE").read_text()[:200]


def test_helm_package_ships_the_license_and_the_readme() -> None:
    with tempfile.TemporaryDirectory(prefix="chart-package-") as out:
        result = run_helm("package", str(CHART), "--destination", out)
        assert result.returncode == 0, result.stderr
        (archive,) = Path(out).glob("*.tgz")
        with tarfile.open(archive) as tar:
            names = set(tar.getnames())
    assert {"foo-operator/LICENSE", "foo-operator/README.md", "foo-operator/values.schema.json"} <= names


def test_the_crd_annotation_is_the_crd_the_chart_installs() -> None:
    (crd,) = annotation("artifacthub.io/crds")
    assert (crd["kind"], crd["name"], crd["version"]) == (KIND, CRD_NAME, HUB_VERSION)
    assert crd["displayName"] and crd["description"]


def test_the_crd_examples_are_the_repositorys_examples() -> None:
    examples = [
        yaml.safe_load((REPO_ROOT / "examples" / name).read_text()) for name in ("foo.yaml", "foo-v1alpha1.yaml")
    ]
    assert annotation("artifacthub.io/crdsExamples") == examples
    for example in examples:
        assert example["apiVersion"].split("/")[0] == GROUP and example["kind"] == KIND


@pytest.mark.parametrize("key", ["artifacthub.io/images", "artifacthub.io/changes"])
def test_what_the_release_writes_when_it_packages_is_not_in_the_source(key: str) -> None:
    """The image digest and the release's changes exist only once a release is built."""
    assert key not in chart()["annotations"]
