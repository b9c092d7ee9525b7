"""Artifact Hub's `artifacthub.io/changes` for a release: CHANGELOG.md's section for its version,
entry by entry, as Artifact Hub lists them on the chart's page.

CHANGELOG.md follows Keep a Changelog: a section per version, a `### Added`/`Changed`/... heading
per kind of change, one `- ` entry per change (continued on indented lines). Artifact Hub takes a
list of `{kind, description}` with the same six kinds in lower case. The release writes it into
the packaged Chart.yaml beside the image's digest (hack/release/pipeline.py); the source Chart.yaml never
carries it, so it cannot go stale between releases.
"""

from __future__ import annotations

import yaml


class ChangelogError(ValueError):
    """CHANGELOG.md says something Artifact Hub's list cannot; the message is the user's one line."""


# Keep a Changelog's headings -> Artifact Hub's kinds (https://artifacthub.io/docs/topics/annotations/helm/).
KINDS = {
    "Added": "added",
    "Changed": "changed",
    "Deprecated": "deprecated",
    "Removed": "removed",
    "Fixed": "fixed",
    "Security": "security",
}


def changes(section: str) -> list[dict[str, str]]:
    """Each entry of a CHANGELOG section as `{kind, description}`, the entry on one line."""
    found: list[dict[str, str]] = []
    kind = ""
    entry: list[str] = []

    def close() -> None:
        if entry:
            found.append({"kind": kind, "description": " ".join(entry)})
            entry.clear()

    for line in section.splitlines():
        if line.startswith("### "):
            close()
            heading = line[4:].strip()
            if heading not in KINDS:
                raise ChangelogError(
                    f"CHANGELOG.md: '### {heading}' is not a Keep a Changelog kind ({', '.join(KINDS)})"
                )
            kind = KINDS[heading]
        elif line.startswith("- ") and kind:
            close()
            entry.append(line[2:].strip())
        elif entry and line.startswith("  ") and line.strip():
            entry.append(line.strip())
        else:
            close()  # a blank line or the section's prose ends an entry
    close()
    return found


def changes_annotation(section: str) -> str:
    """The value of `artifacthub.io/changes` for a CHANGELOG section (hack.release.pipeline.changelog_section)."""
    return str(yaml.safe_dump(changes(section), sort_keys=False, allow_unicode=True, width=1 << 20))
