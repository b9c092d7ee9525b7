"""kubectl's ways of printing: a padded table (kubectl's tabwriter, three spaces), JSON, YAML, names,
JSONPath templates and custom columns.

What the cluster says is a tenant's text (a Foo's image, a message, a certificate's subject): every
value printed goes through componentbase.escaping, as kubectl escapes its tables and custom columns
(printers.EscapeTerminal), and further: names and JSONPath values too, so nothing printed here
holds a control byte the plugin or its user did not write. JSON and YAML escape them themselves.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

import yaml  # type: ignore[import-untyped]

from componentbase.escaping import escape_controls

from . import jsonpath

FORMATS = ("wide", "json", "yaml", "name")
TEMPLATES = ("jsonpath=", "custom-columns=")
ALLOWED = "custom-columns,json,jsonpath,name,wide,yaml"


def output_format(value: str) -> str:
    """argparse's type for ``-o``: one of FORMATS, ``jsonpath=TEMPLATE`` or ``custom-columns=SPEC``,
    the template parsed here so a typo is a usage error (exit 2), as kubectl refuses it up front."""
    try:
        if value.startswith("jsonpath="):
            jsonpath.parse(_template(value.removeprefix("jsonpath=")))
            return value
        if value.startswith("custom-columns="):
            _columns(value.removeprefix("custom-columns="))
            return value
    except jsonpath.JSONPathError as err:
        raise argparse.ArgumentTypeError(f"error parsing {value}: {err}") from None
    if value in FORMATS:
        return value
    raise argparse.ArgumentTypeError(
        f'unable to match a printer suitable for the output format "{value}", allowed formats are: {ALLOWED}'
    )


def _template(template: str) -> str:
    # kubectl strips one pair of quotes a shell left in, and wraps a bare path in braces.
    template = template.strip()
    if len(template) > 1 and template[0] == template[-1] and template[0] in "'\"":
        template = template[1:-1]
    return template if "{" in template else "{" + template + "}"


def _columns(spec: str) -> list[tuple[str, str]]:
    columns = []
    for part in spec.split(","):
        header, sep, path = part.partition(":")
        if not sep or not header or not path:
            raise jsonpath.JSONPathError(f"expected <header>:<json-path-expr>, got {part!r}")
        jsonpath.parse("{" + path + "}" if not path.startswith("{") else path)
        columns.append((header, path))
    return columns


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Upper-case headers, left-aligned columns three spaces apart, as `kubectl get` prints."""
    lines = [[h.upper() for h in headers], *[[escape_controls(str(cell)) for cell in row] for row in rows]]
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
        # json escapes every control character but DEL (so does Go's): that one by hand.
        return json.dumps(obj, indent=4).replace("\x7f", "\\u007f") + "\n"
    return str(yaml.safe_dump(obj, sort_keys=False))


def objects(items: Sequence[Any], shown: Any, output: str, *, resource: str) -> str | None:
    """What ``-o`` prints for ``items`` (``shown``: the document, one object or a List), or None
    for the caller's own table. ``resource`` is kubectl's ``-o name`` prefix, e.g.
    ``foohealth.insights.samplecontroller.k8s.io``."""
    if output in ("json", "yaml"):
        return document(shown, output)
    if output == "name":
        return "".join(
            f"{resource}/{escape_controls(str((item.get('metadata') or {}).get('name', '')))}\n" for item in items
        )
    if output.startswith("jsonpath="):
        return jsonpath.render(_template(output.removeprefix("jsonpath=")), shown, shown=escape_controls)
    if output.startswith("custom-columns="):
        columns = _columns(output.removeprefix("custom-columns="))
        rows = [[jsonpath.column(path, item) for _, path in columns] for item in items]
        return table([header for header, _ in columns], rows)
    return None
