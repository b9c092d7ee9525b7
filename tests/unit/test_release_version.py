"""One version for everything a release ships: pyproject.toml's, and everything that follows it."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from hack.release.pipeline import (
    PAST_RELEASES,
    REPO_ROOT,
    ReleaseError,
    changelog_section,
    chart_versions,
    project_version,
)
from tests.unit.test_cli_pattern import console_scripts  # the completion endpoint takes no --version

VERSION = project_version()


def test_the_chart_version_and_app_version_are_the_project_version() -> None:
    assert chart_versions() == (VERSION, VERSION)


@pytest.mark.parametrize("script", console_scripts())
def test_every_console_script_prints_the_project_version(script: str) -> None:
    # The installed distribution's metadata, which `make venv` refreshes whenever pyproject.toml changes.
    exe = Path(sys.executable).parent / script
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.strip().endswith(f" {VERSION}"), out


def test_the_plain_manifests_run_the_image_tagged_with_the_project_version() -> None:
    docs = [d for d in yaml.safe_load_all((REPO_ROOT / "deploy" / "foo-operator.yaml").read_text()) if d]
    images = {
        c["image"] for d in docs if d["kind"] == "Deployment" for c in d["spec"]["template"]["spec"]["containers"]
    }
    assert images == {f"ghcr.io/foo-operator/foo-operator:{VERSION}"}


def test_the_changelog_has_a_dated_section_for_the_version() -> None:
    heading = f"## [{VERSION}] - "
    assert heading in (REPO_ROOT / "CHANGELOG.md").read_text()
    assert changelog_section(VERSION).strip()


def test_release_notes_are_the_changelog_section_alone() -> None:
    notes = changelog_section("0.1.0")
    assert notes.startswith("The first version")
    assert "## [" not in notes and "]: https://" not in notes


def test_a_version_without_a_changelog_section_cannot_be_released() -> None:
    with pytest.raises(ReleaseError, match=r"no '## \[9.9.9\]' section"):
        changelog_section("9.9.9")


def test_every_past_release_names_a_commit_of_this_history() -> None:
    for version, commit in PAST_RELEASES.items():
        tree = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "show", f"{commit}:pyproject.toml"], capture_output=True, text=True
        )
        if tree.returncode != 0:
            pytest.skip(f"a shallow clone: {commit} is not here")
        assert tomllib.loads(tree.stdout)["project"]["version"] == version
