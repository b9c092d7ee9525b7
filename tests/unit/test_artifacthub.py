"""artifacthub.io/changes from CHANGELOG.md: one change per entry, of its section's kind, in order."""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

import pytest
import yaml

from hack.release.artifacthub import KINDS, ChangelogError, changes, changes_annotation
from hack.release.pipeline import PAST_RELEASES, REPO_ROOT, changelog_section, with_annotation

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
    with pytest.raises(ChangelogError, match="'### Improved' is not a Keep a Changelog kind"):
        changes("### Improved\n\n- Faster.\n")


@pytest.mark.parametrize("version", sorted(PAST_RELEASES))
def test_every_entry_of_a_released_section_is_listed_with_a_known_kind(version: str) -> None:
    section = changelog_section(version, REPO_ROOT)
    listed = yaml.safe_load(changes_annotation(section))
    assert len(listed) == len(re.findall(r"^- ", section, re.M))
    assert {change["kind"] for change in listed} <= set(KINDS.values())
    assert all(change["description"] and "\n" not in change["description"] for change in listed)


def test_the_chart_yaml_the_release_packages_carries_the_changes_and_lints_clean() -> None:
    """hack/release/pipeline.py's build_chart writes it so (beside the image): the annotation parses back to
    the list, every other key of Chart.yaml stays, and helm lints the chart."""
    annotation = changes_annotation(changelog_section("0.2.0", REPO_ROOT))
    with tempfile.TemporaryDirectory(prefix="chart-changes-") as scratch:
        chart = Path(scratch) / "foo-operator"
        shutil.copytree(CHART, chart)
        source = (chart / "Chart.yaml").read_text()
        (chart / "Chart.yaml").write_text(with_annotation(source, "artifacthub.io/changes", annotation))
        meta = yaml.safe_load((chart / "Chart.yaml").read_text())
        result = run_helm("lint", "--strict", str(chart))
        assert result.returncode == 0, result.stdout + result.stderr
    assert yaml.safe_load(meta["annotations"]["artifacthub.io/changes"]) == yaml.safe_load(annotation)
    before = yaml.safe_load(source)
    assert {k: v for k, v in meta["annotations"].items() if k != "artifacthub.io/changes"} == before["annotations"]
    assert {k: v for k, v in meta.items() if k != "annotations"} == {
        k: v for k, v in before.items() if k != "annotations"
    }
