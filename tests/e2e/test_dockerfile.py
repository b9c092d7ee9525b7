"""The Dockerfile works for people with Docker or Podman: built with buildah on a base made here
under the name its FROM line uses (nothing is pulled), every console script answers --version
inside the image, and it runs as the non-root user (hack/dockerfile-check.sh)."""

from __future__ import annotations

import os
import subprocess
import tomllib
from pathlib import Path

import pytest

from tests.e2e.imagebuild import cannot_build_images
from tests.unit.test_cli_pattern import console_scripts  # the completion endpoint takes no --version

REPO_ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]


@pytest.mark.timeout(1800)
def test_the_dockerfile_builds_an_image_in_which_every_console_script_prints_the_version() -> None:
    reason = cannot_build_images("the Dockerfile with buildah")
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and the Dockerfile cannot be built: {reason}", pytrace=False)
        pytest.skip(reason)
    result = subprocess.run(
        ["bash", str(REPO_ROOT / "hack" / "dockerfile-check.sh")], capture_output=True, text=True, timeout=1700
    )
    print(result.stdout)
    assert result.returncode == 0, result.stdout + result.stderr
    answers = dict(line.split(" --version: ", 1) for line in result.stdout.splitlines() if " --version: " in line)
    assert sorted(answers) == console_scripts()
    for script, answer in answers.items():
        assert answer.endswith(f" {PROJECT['version']}"), (script, answer)
    assert "user: 65532:65532" in result.stdout.splitlines()
