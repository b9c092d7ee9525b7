"""artifacthub.io/changes from CHANGELOG.md: one change per entry, of its section's kind, in order."""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

import pytest
import yaml

from hack.artifacthub import KINDS, changes, changes_annotation
from hack.release import PAST_RELEASES, REPO_ROOT, ReleaseError, changelog_section

from .test_chart import CHART, run_helm

SECTION = """Intro prose, not a change.

### Added

- One line.
- Two lines,
  continued here.

### Fixed

- `--flag` answers in one line.
"""


def test_each_entry_is_one_change_of_its_headings_kind_on_one_line() -> None:
    assert changes(SECTION) == [
        {"kind": "added", "description": "One line."},
        {"kind": "added", "description": "Two lines, continued here."},
        {"kind": "fixed", "description": "`--flag` answers in one line."},
    ]


def test_a_heading_keep_a_changelog_does_not_know_is_refused() -> None:
    with pytest.raises(ReleaseError, match="'### Improved' is not a Keep a Changelog kind"):
        changes("### Improved\n\n- Faster.\n")


@pytest.mark.parametrize("version", sorted(PAST_RELEASES))
def test_every_entry_of_a_released_section_is_listed_with_a_known_kind(version: str) -> None:
    section = changelog_section(version, REPO_ROOT)
    listed = yaml.safe_load(changes_annotation(version))
    assert len(listed) == len(re.findall(r"^- ", section, re.M))
    assert {change["kind"] for change in listed} <= set(KINDS.values())
    assert all(change["description"] and "\n" not in change["description"] for change in listed)


def test_a_chart_yaml_carrying_the_annotation_lints_clean() -> None:
    with tempfile.TemporaryDirectory(prefix="chart-changes-") as scratch:
        chart = Path(scratch) / "foo-operator"
        shutil.copytree(CHART, chart)
        meta = yaml.safe_load((chart / "Chart.yaml").read_text())
        meta["annotations"]["artifacthub.io/changes"] = changes_annotation("0.2.0")
        (chart / "Chart.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))
        result = run_helm("lint", "--strict", str(chart))
        assert result.returncode == 0, result.stdout + result.stderr
