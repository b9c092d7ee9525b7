"""kubectl's ways of printing: a padded table (kubectl's tabwriter, three spaces), JSON, YAML."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import yaml  # type: ignore[import-untyped]

FORMATS = ("wide", "json", "yaml")


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Upper-case headers, left-aligned columns three spaces apart, as `kubectl get` prints."""
    lines = [[h.upper() for h in headers], *[[str(cell) for cell in row] for row in rows]]
    widths = [max(len(line[i]) for line in lines) for i in range(len(headers))]
    return (
        "\n".join(
            "   ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip() for line in lines
        )
        + "\n"
    )


def document(obj: Any, output: str) -> str:
    """``-o json`` (kubectl's four-space indent) or ``-o yaml``."""
    if output == "json":
        return json.dumps(obj, indent=4) + "\n"
    return str(yaml.safe_dump(obj, sort_keys=False))
