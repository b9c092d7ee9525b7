"""Field selectors read exactly as k8s.io/apimachinery/pkg/fields.ParseSelector reads them.

Terms split on unescaped commas, sorted, each split at its first operator (`!=`, `==`, `=`); the
value unescapes `\\,` `\\=` `\\\\` and refuses any other escape or a bare `,` or `=`. No blank is
trimmed: `metadata.name = x` names the field "metadata.name " as it does for kube-apiserver.
One pass over each character: linear in the selector's length.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .labels import SelectorError

FieldOperator = Literal["=", "!="]


@dataclass(frozen=True)
class FieldRequirement:
    field: str
    operator: FieldOperator
    value: str


def split_terms(selector: str) -> list[str]:
    """fields.splitTerms: split on commas a backslash does not escape (the backslash stays)."""
    terms: list[str] = []
    start, escaped = 0, False
    for i, char in enumerate(selector):
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == ",":
            terms.append(selector[start:i])
            start = i + 1
    terms.append(selector[start:])
    return terms


def split_term(term: str) -> tuple[str, str, str] | None:
    """fields.splitTerm: (field, operator, raw value) at the first operator, or None without one."""
    at = term.find("=")
    if at < 0:
        return None
    if at > 0 and term[at - 1] == "!":
        return term[: at - 1], "!=", term[at + 1 :]
    if term[at + 1 : at + 2] == "=":
        return term[:at], "==", term[at + 2 :]
    return term[:at], "=", term[at + 1 :]


def unescape_value(value: str) -> str:
    """fields.UnescapeValue."""
    if not any(c in value for c in "\\,="):
        return value
    out: list[str] = []
    escaped = False
    for char in value:
        if escaped:
            if char not in "\\,=":
                raise SelectorError(f"invalid field selector: invalid escape sequence: \\{char}")
            out.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char in ",=":
            # Go prints the rune with %v: its code point, not the character.
            raise SelectorError(f"invalid field selector: unescaped character in value: {ord(char)}")
        else:
            out.append(char)
    if escaped:
        raise SelectorError("invalid field selector: invalid escape sequence: \\")
    return "".join(out)


@dataclass(frozen=True)
class FieldSelector:
    """Requirements in the order Go keeps them (terms sorted as strings), all of which must hold."""

    requirements: tuple[FieldRequirement, ...] = ()

    def requires_exact_match(self, field: str) -> str | None:
        """Selector.RequiresExactMatch: the value the first `field=value` term pins, if any."""
        return next((r.value for r in self.requirements if r.field == field and r.operator == "="), None)


def parse_field_selector(selector: str) -> FieldSelector:
    """fields.ParseSelector: the requirements of ``selector``, or SelectorError with Go's message."""
    requirements = []
    for term in sorted(split_terms(selector)):
        if not term:
            continue
        parts = split_term(term)
        if parts is None:
            raise SelectorError(f"invalid selector: '{selector}'; can't understand '{term}'")
        field, operator, raw = parts
        value = unescape_value(raw)
        if field or value:  # "=" alone transforms into Everything() and drops out
            requirements.append(FieldRequirement(field, "!=" if operator == "!=" else "=", value))
    return FieldSelector(tuple(requirements))
