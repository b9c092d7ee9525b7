"""kubectl's JSONPath templates (``-o jsonpath=...``, ``custom-columns``), the part users write.

client-go's ``util/jsonpath`` in Python: text outside braces is printed as it is; inside, a path
(``.items[*].metadata.name``, ``['key']``, ``[0]``, ``[-1]``, ``[1:3]``, ``*``, ``..name``), a
filter (``[?(@.status.ready==true)]``, ``==`` ``!=`` ``<`` ``>`` ``<=`` ``>=``, or a bare path for
"exists"), a quoted string (``{"\\n"}``), or ``{range PATH}...{end}``. Several results of one
path are printed space-separated, maps and lists as JSON, a missing key as nothing (kubectl's
default ``--allow-missing-template-keys=true``). No library: none on PyPI follows kubectl's rules
for printing and for missing keys.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any


class JSONPathError(ValueError):
    """A template kubectl would refuse to parse; the message is kubectl's kind of one line."""


@dataclass(frozen=True)
class _Text:
    text: str


@dataclass(frozen=True)
class _Path:
    steps: tuple[str, ...]  # each a raw step: ".name", "..name", "[...]"


@dataclass(frozen=True)
class _Range:
    path: _Path
    body: tuple[_Text | _Path | _Range, ...]


_Node = _Text | _Path | _Range
_STEP = re.compile(r"\.\.[^.\[]+|\.[^.\[]*|\[(?:'[^']*'|\"[^\"]*\"|[^\]])*\]")


def parse(template: str) -> tuple[_Node, ...]:
    nodes, rest = _parse(template, 0, inside_range=False)
    if rest != len(template):  # pragma: no cover - _parse consumes everything outside a range
        raise JSONPathError(f"unexpected text at {rest} in {template!r}")
    return nodes


def _parse(template: str, at: int, *, inside_range: bool) -> tuple[tuple[_Node, ...], int]:
    nodes: list[_Node] = []
    while at < len(template):
        start = template.find("{", at)
        if start < 0:
            nodes.append(_Text(template[at:]))
            return tuple(nodes), len(template)
        if start > at:
            nodes.append(_Text(template[at:start]))
        end = _closing_brace(template, start)
        action = template[start + 1 : end].strip()
        at = end + 1
        if action == "end":
            if not inside_range:
                raise JSONPathError("not in range, nothing to end")
            return tuple(nodes), at
        if action.startswith("range "):
            body, at = _parse(template, at, inside_range=True)
            nodes.append(_Range(_path(action[len("range ") :].strip()), body))
        elif action[:1] in ('"', "'"):
            nodes.append(_Text(_string(action)))
        else:
            nodes.append(_path(action))
    if inside_range:
        raise JSONPathError("unclosed range: missing {end}")
    return tuple(nodes), at


def _closing_brace(template: str, start: int) -> int:
    quote = ""
    for i in range(start + 1, len(template)):
        c = template[i]
        if quote:
            if c == "\\":
                continue
            if c == quote and template[i - 1] != "\\":
                quote = ""
        elif c in "\"'":
            quote = c
        elif c == "}":
            return i
    raise JSONPathError(f"unclosed action in {template!r}")


def _string(action: str) -> str:
    try:
        value = json.loads(action) if action[0] == '"' else action[1:-1]
    except ValueError as err:
        raise JSONPathError(f"invalid string {action}") from err
    return str(value)


def _path(text: str) -> _Path:
    text = text.removeprefix("$").removeprefix("@")
    if text and text[0] not in ".[":
        text = "." + text
    steps, at = [], 0
    for match in _STEP.finditer(text):
        if match.start() != at:
            break
        steps.append(match.group())
        at = match.end()
    if at != len(text):
        raise JSONPathError(f"unrecognized identifier {text[at:]!r}")
    for step in steps:
        inner = step[1:-1].strip() if step.startswith("[") else ""
        if inner and inner != "*" and inner[0] not in "?'\"" and not _INDEX.fullmatch(inner):
            raise JSONPathError(f"invalid array index {inner}")
    return _Path(tuple(s for s in steps if s != "."))


_INDEX = re.compile(r"-?\d+|-?\d*:-?\d*(?::-?\d*)?")


# ----------------------------------------------------------------------------- evaluation
def _walk(values: list[Any], step: str) -> list[Any]:
    if step.startswith(".."):
        return [found for value in values for found in _descend(value, step[2:])]
    if step.startswith("."):
        return _field(values, step[1:])
    inner = step[1:-1].strip()
    if inner.startswith("?(") and inner.endswith(")"):
        return [item for value in values for item in _items(value) if _keep(item, inner[2:-1])]
    if inner[:1] in ("'", '"'):
        return _field(values, inner[1:-1])
    return [found for value in values for found in _index(value, inner)]


def _field(values: list[Any], name: str) -> list[Any]:
    if name == "*":
        return [item for value in values for item in _items(value)]
    return [value[name] for value in values if isinstance(value, dict) and name in value]


def _items(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return list(value.values())
    return list(value) if isinstance(value, list) else []


def _descend(value: Any, name: str) -> Iterator[Any]:
    if isinstance(value, dict):
        if name in value:
            yield value[name]
        for child in value.values():
            yield from _descend(child, name)
    elif isinstance(value, list):
        for child in value:
            yield from _descend(child, name)


def _index(value: Any, inner: str) -> list[Any]:
    if inner == "*":
        return _items(value)
    if not isinstance(value, list):
        return []
    try:
        if ":" in inner:
            parts = [int(p) if p.strip() else None for p in inner.split(":")]
            return list(value[slice(*parts)])
        index = int(inner)
    except ValueError as err:
        raise JSONPathError(f"invalid array index {inner}") from err
    return [value[index]] if -len(value) <= index < len(value) else []


_COMPARISON = re.compile(r"^(?P<left>.+?)\s*(?P<op>==|!=|<=|>=|<|>)\s*(?P<right>.+)$")


def _keep(item: Any, condition: str) -> bool:
    match = _COMPARISON.match(condition.strip())
    if match is None:
        return bool(evaluate_path(item, _path(condition.strip())))
    left = evaluate_path(item, _path(match["left"].strip()))
    right = _literal(match["right"].strip(), item)
    if not left:
        return False
    value = left[0]
    op = match["op"]
    try:
        if op == "==":
            return bool(value == right)
        if op == "!=":
            return bool(value != right)
        return bool({"<": value < right, ">": value > right, "<=": value <= right, ">=": value >= right}[op])
    except TypeError:
        return False


def _literal(text: str, item: Any) -> Any:
    if text[:1] in ("'", '"'):
        return text[1:-1]
    if text.startswith("@"):
        found = evaluate_path(item, _path(text))
        return found[0] if found else None
    try:
        return json.loads(text)
    except ValueError as err:
        raise JSONPathError(f"invalid filter value {text}") from err


def evaluate_path(data: Any, path: _Path) -> list[Any]:
    values = [data]
    for step in path.steps:
        values = _walk(values, step)
    return values


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def _render(nodes: tuple[_Node, ...], data: Any, shown: Callable[[str], str]) -> str:
    out: list[str] = []
    for node in nodes:
        if isinstance(node, _Text):
            out.append(node.text)
        elif isinstance(node, _Path):
            out.append(" ".join(shown(_text(v)) for v in evaluate_path(data, node)))
        else:
            out.extend(_render(node.body, item, shown) for item in evaluate_path(data, node.path))
    return "".join(out)


def _as_is(text: str) -> str:
    return text


def render(template: str, data: Any, *, shown: Callable[[str], str] = _as_is) -> str:
    """The template applied to ``data``, as `kubectl get -o jsonpath=TEMPLATE` prints it; each
    value passes through ``shown`` (the template's own text does not: the user wrote it)."""
    return _render(parse(template), data, shown)


def column(expression: str, data: Any) -> str:
    """One custom-columns cell: the path's values comma-joined, ``<none>`` when there are none."""
    if not expression.startswith("{"):
        expression = "{" + expression + "}"
    nodes = parse(expression)
    values = [v for node in nodes if isinstance(node, _Path) for v in evaluate_path(data, node)]
    return ",".join(_text(v) for v in values) if values else "<none>"
