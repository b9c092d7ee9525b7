"""Label and field selectors, parsed the way apimachinery's labels/fields packages read them."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

Obj = dict[str, Any]
Predicate = Callable[[Obj], bool]

_OPERATOR = re.compile(r"\s*(==|=|!=|\s+notin\s+|\s+in\s+)\s*")
_SET = re.compile(r"^\(\s*(.*?)\s*\)$")


class SelectorError(ValueError):
    """The selector does not parse; the message is for the user (400 BadRequest)."""


def _split_terms(selector: str) -> list[str]:
    """Split on commas that are not inside a `( ... )` set."""
    terms: list[str] = []
    current: list[str] = []
    depth = 0
    for char in selector:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            terms.append("".join(current))
            current = []
        else:
            current.append(char)
    terms.append("".join(current))
    return [t.strip() for t in terms if t.strip()]


def _label_term(term: str) -> Callable[[Mapping[str, str]], bool]:
    if term.startswith("!"):
        key = term[1:].strip()
        _check_key(key, term)
        return lambda labels: key not in labels
    match = _OPERATOR.search(term)
    if match is None:
        _check_key(term, term)
        return lambda labels: term in labels
    key, op, rest = term[: match.start()].strip(), match.group(1).strip(), term[match.end():].strip()
    _check_key(key, term)
    if op in ("in", "notin"):
        values_match = _SET.match(rest)
        if values_match is None:
            raise SelectorError(f"unable to parse requirement: {term!r}: values must be a parenthesized list")
        values = {v.strip() for v in values_match.group(1).split(",") if v.strip()}
        if op == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    if "," in rest or "(" in rest or " " in rest:
        raise SelectorError(f"unable to parse requirement: {term!r}")
    if op == "!=":
        return lambda labels: labels.get(key) != rest
    return lambda labels: key in labels and labels[key] == rest


def _check_key(key: str, term: str) -> None:
    if not key or not re.fullmatch(r"([a-z0-9A-Z.\-]+/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?", key):
        raise SelectorError(f"unable to parse requirement: invalid label key {key!r} in {term!r}")


def label_selector(selector: str) -> Predicate:
    """A predicate over objects for `a=b,c!=d,e in (f,g),!h`."""
    tests = [_label_term(term) for term in _split_terms(selector)]

    def matches(obj: Obj) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(test(labels) for test in tests)

    return matches


# The fields every apiserver supports for every resource.
FIELDS: dict[str, Callable[[Obj], str]] = {
    "metadata.name": lambda o: str((o.get("metadata") or {}).get("name", "")),
    "metadata.namespace": lambda o: str((o.get("metadata") or {}).get("namespace", "")),
}


def _field_test(getter: Callable[[Obj], str], value: str, *, equal: bool) -> Predicate:
    return lambda obj: (getter(obj) == value) is equal


def field_selector(selector: str) -> tuple[Predicate, str | None]:
    """A predicate for `metadata.name=x,metadata.namespace!=y`, and the name it pins, if any."""
    tests: list[Predicate] = []
    exact_name: str | None = None
    for term in _split_terms(selector):
        for op in ("!=", "==", "="):
            if op in term:
                field, _, value = (part.strip() for part in term.partition(op))
                break
        else:
            raise SelectorError(f"invalid selector: {term!r}; can't understand {term!r}")
        getter = FIELDS.get(field)
        if getter is None:
            raise SelectorError(f'field label not supported: {field}')
        tests.append(_field_test(getter, value, equal=op != "!="))
        if op != "!=" and field == "metadata.name":
            exact_name = value
    return (lambda obj: all(test(obj) for test in tests)), exact_name
