"""What PyPI and a platform team's tooling read from pyproject: SPDX licence, readme, URLs, trove."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_licence_is_an_spdx_expression_that_setuptools_can_write() -> None:
    assert PROJECT["project"]["license"] == "Apache-2.0"  # PEP 639, not {text = ...}
    assert "Apache License" in (ROOT / "LICENSE").read_text()
    assert any(r.startswith("setuptools>=77") for r in PROJECT["build-system"]["requires"])
    assert not any(c.startswith("License ::") for c in PROJECT["project"]["classifiers"])  # PEP 639 forbids both


def test_the_project_has_a_readme_urls_keywords_and_classifiers() -> None:
    project = PROJECT["project"]
    assert (ROOT / project["readme"]).is_file()
    assert {"Homepage", "Documentation", "Source", "Issues", "Changelog"} <= set(project["urls"])
    assert all(url.startswith("https://") for url in project["urls"].values())
    assert "kubernetes" in project["keywords"] and "kubectl-plugin" in project["keywords"]
    python = [c for c in project["classifiers"] if c.startswith("Programming Language :: Python :: 3.")]
    assert python and min(python) == "Programming Language :: Python :: 3.11"  # requires-python's floor
    assert project["requires-python"] == ">=3.11"
