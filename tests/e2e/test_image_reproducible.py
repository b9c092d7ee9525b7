"""One commit, one image: `hack/image.sh` (what `make release` builds the image with) gives the same
digest every time it builds the same sources, so anyone can check a release against its commit
(docs/install.md, "Making a release")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.imagebuild import cannot_build_images

REPO_ROOT = Path(__file__).resolve().parents[2]


def _build(out_dir: Path, epoch: str) -> dict[str, str]:
    env = {**os.environ, "PYTHON": sys.executable, "IMAGE_OUT_DIR": str(out_dir), "SOURCE_DATE_EPOCH": epoch}
    result = subprocess.run(
        ["bash", str(REPO_ROOT / "hack" / "image.sh"), "--force"], capture_output=True, text=True, env=env, timeout=1200
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    meta: dict[str, str] = json.loads((out_dir / "image.json").read_text())
    return meta


@pytest.mark.timeout(2400)
def test_the_image_built_twice_from_one_commit_has_one_digest(tmp_path: Path) -> None:
    reason = cannot_build_images("the image")
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and the image cannot be built: {reason}", pytrace=False)
        pytest.skip(reason)
    epoch = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "log", "-1", "--format=%ct"], capture_output=True, text=True, check=True
    ).stdout.strip()
    first, second = _build(tmp_path / "first", epoch), _build(tmp_path / "second", epoch)
    assert first["digest"] == second["digest"], (first, second)
    assert Path(first["archive"]).read_bytes() == Path(second["archive"]).read_bytes()
