"""Label selectors read exactly as k8s.io/apimachinery/pkg/labels.Parse reads them, in linear time.

A port of Go's lexer and recursive-descent parser (labels/selector.go), token for token and error
text for error text, so a selector means here what it means to kube-apiserver. The lexer scans
each character once with single character-class patterns (nothing to backtrack), and the parser
looks at each token a bounded number of times: the cost is linear in the selector's length.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

from . import name_rules


class SelectorError(ValueError):
    """The selector does not parse; the message is for the user (400 BadRequest)."""


class _Tok(Enum):
    END = "end of string"
    CLOSE = ")"
    COMMA = ","
    NOT = "!"
    DOUBLE_EQUALS = "=="
    EQUALS = "="
    GT = ">"
    ID = "identifier"
    IN = "in"
    LT = "<"
    NOT_EQUALS = "!="
    NOT_IN = "notin"
    OPEN = "("


_SYMBOLS = {
    t.value: t
    for t in (
        _Tok.CLOSE,
        _Tok.COMMA,
        _Tok.NOT,
        _Tok.DOUBLE_EQUALS,
        _Tok.EQUALS,
        _Tok.GT,
        _Tok.LT,
        _Tok.NOT_EQUALS,
        _Tok.OPEN,
    )
}
_KEYWORDS = {"in": _Tok.IN, "notin": _Tok.NOT_IN}
_SPECIAL = frozenset("=!(),><")
# Go's Lexer.read() answers 0 both at the end and for a NUL byte: a NUL ends the token being read
# and is consumed with it; met where a token should start, it ends the selector there.
_WHITESPACE = re.compile(r"[ \t\r\n]*")
_IDENTIFIER = re.compile(r"[^ \t\r\n=!(),><\x00]+")

Token = tuple[_Tok, str]


def tokens(selector: str) -> list[Token]:
    """Lexer.Lex until the end of the string, as Parser.scan collects them."""
    found: list[Token] = []
    pos, end = 0, len(selector)
    while True:
        pos = _WHITESPACE.match(selector, pos).end()  # type: ignore[union-attr]  # `*` always matches
        if pos >= end or selector[pos] == "\0":
            found.append((_Tok.END, ""))
            return found
        if selector[pos] in _SPECIAL:
            # Longest operator first: "!=" and "==" are the only two-character symbols.
            literal = selector[pos : pos + 2] if selector[pos : pos + 2] in ("!=", "==") else selector[pos]
            pos += len(literal)
            found.append((_SYMBOLS[literal], literal))
        else:
            match = _IDENTIFIER.match(selector, pos)
            assert match is not None  # the first character is neither special, blank nor NUL
            literal, pos = match.group(), match.end()
            found.append((_KEYWORDS.get(literal, _Tok.ID), literal))
        if pos < end and selector[pos] == "\0":
            pos += 1


class Operator(str, Enum):
    """selection.Operator, spelled as Go spells it."""

    IN = "in"
    NOT_IN = "notin"
    EQUALS = "="
    DOUBLE_EQUALS = "=="
    NOT_EQUALS = "!="
    GREATER_THAN = "gt"
    LESS_THAN = "lt"
    EXISTS = "exists"
    DOES_NOT_EXIST = "!"


_BINARY = {
    _Tok.IN: Operator.IN,
    _Tok.NOT_IN: Operator.NOT_IN,
    _Tok.EQUALS: Operator.EQUALS,
    _Tok.DOUBLE_EQUALS: Operator.DOUBLE_EQUALS,
    _Tok.NOT_EQUALS: Operator.NOT_EQUALS,
    _Tok.GT: Operator.GREATER_THAN,
    _Tok.LT: Operator.LESS_THAN,
}
_BINARY_NAMES = ", ".join(
    op.value
    for op in (
        Operator.IN,
        Operator.NOT_IN,
        Operator.EQUALS,
        Operator.DOUBLE_EQUALS,
        Operator.NOT_EQUALS,
        Operator.GREATER_THAN,
        Operator.LESS_THAN,
    )
)


def parse_int64(text: str) -> int | None:
    """strconv.ParseInt(text, 10, 64): an optional sign and ASCII digits, within int64."""
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not digits or not digits.isascii() or not digits.isdigit():
        return None
    value = int(text)
    return value if -(1 << 63) <= value < (1 << 63) else None


def go_quote(text: str) -> str:
    """strconv.Quote (Go's %q), as field errors print a bad value."""
    out = ['"']
    for char in text:
        code = ord(char)
        if char in ('"', "\\"):
            out.append("\\" + char)
        elif char.isprintable():
            out.append(char)
        elif char in _GO_ESCAPES:
            out.append(_GO_ESCAPES[char])
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


_GO_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}


def _aggregate(messages: list[str]) -> str:
    """field.ErrorList.ToAggregate().Error(): one message alone, several deduplicated in brackets."""
    unique = list(dict.fromkeys(messages))
    return unique[0] if len(unique) == 1 else f"[{', '.join(unique)}]"


@dataclass(frozen=True)
class Requirement:
    """One `key op values` term; values are sorted and unique, as sets.String.List() gives them."""

    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Requirement.Matches."""
        op = self.operator
        if op is Operator.EXISTS:
            return self.key in labels
        if op is Operator.DOES_NOT_EXIST:
            return self.key not in labels
        value = labels.get(self.key)
        if op in (Operator.NOT_IN, Operator.NOT_EQUALS):
            return value is None or value not in self.values
        if value is None:
            return False
        if op in (Operator.GREATER_THAN, Operator.LESS_THAN):
            have, bound = parse_int64(value), parse_int64(self.values[0])
            if have is None or bound is None:
                return False
            return have > bound if op is Operator.GREATER_THAN else have < bound
        return value in self.values


def new_requirement(key: str, op: Operator, values: list[str]) -> Requirement:
    """labels.NewRequirement for what the parser can produce (the key is already validated)."""
    errors = []
    ordered = sorted(set(values))
    if op in (Operator.GREATER_THAN, Operator.LESS_THAN):
        errors += [
            f"values[{i}]: Invalid value: {go_quote(v)}: for 'Gt', 'Lt' operators, the value must be an integer"
            for i, v in enumerate(ordered)
            if parse_int64(v) is None
        ]
    for i, value in enumerate(ordered):
        if problems := name_rules.label_value(value):
            errors.append(f"values[{i}][{key}]: Invalid value: {go_quote(value)}: {'; '.join(problems)}")
    if errors:
        raise SelectorError(_aggregate(errors))
    return Requirement(key, op, tuple(ordered))


class _Parser:
    """labels.Parser: the same methods, the same lookahead contexts, the same messages."""

    def __init__(self, selector: str) -> None:
        self.items = tokens(selector)
        self.position = 0

    def lookahead(self, values: bool) -> Token:
        return self._in_context(self.items[min(self.position, len(self.items) - 1)], values)

    def consume(self, values: bool) -> Token:
        item = self.lookahead(values)
        self.position += 1
        return item

    @staticmethod
    def _in_context(item: Token, values: bool) -> Token:
        # 'in' and 'notin' are values where values are expected: `x in (in)`.
        return (_Tok.ID, item[1]) if values and item[0] in (_Tok.IN, _Tok.NOT_IN) else item

    def parse(self) -> list[Requirement]:
        requirements: list[Requirement] = []
        while True:
            tok, literal = self.lookahead(values=True)
            if tok in (_Tok.ID, _Tok.NOT):
                try:
                    requirements.append(self.requirement())
                except SelectorError as err:
                    raise SelectorError(f"unable to parse requirement: {err}") from None
                tok, literal = self.consume(values=True)
                if tok is _Tok.END:
                    return requirements
                if tok is not _Tok.COMMA:
                    raise SelectorError(f"found '{literal}', expected: ',' or 'end of string'")
                after, literal = self.lookahead(values=True)
                if after not in (_Tok.ID, _Tok.NOT):
                    raise SelectorError(f"found '{literal}', expected: identifier after ','")
            elif tok is _Tok.END:
                return requirements
            else:
                raise SelectorError(f"found '{literal}', expected: !, identifier, or 'end of string'")

    def requirement(self) -> Requirement:
        key, op = self.key_and_inferred_operator()
        if op is not None:
            return new_requirement(key, op, [])
        op = self.operator()
        values = self.value_set() if op in (Operator.IN, Operator.NOT_IN) else self.exact_value()
        return new_requirement(key, op, values)

    def key_and_inferred_operator(self) -> tuple[str, Operator | None]:
        op = None
        tok, literal = self.consume(values=True)
        if tok is _Tok.NOT:
            op = Operator.DOES_NOT_EXIST
            tok, literal = self.consume(values=True)
        if tok is not _Tok.ID:
            raise SelectorError(f"found '{literal}', expected: identifier")
        if problems := name_rules.qualified_name(literal):
            # Go validates with a nil field path here, which prints as "<nil>".
            raise SelectorError(f"<nil>: Invalid value: {go_quote(literal)}: {'; '.join(problems)}")
        if op is None and self.lookahead(values=True)[0] in (_Tok.END, _Tok.COMMA):
            op = Operator.EXISTS
        return literal, op

    def operator(self) -> Operator:
        tok, literal = self.consume(values=False)
        if tok not in _BINARY:
            raise SelectorError(f"found '{literal}', expected: {_BINARY_NAMES}")
        return _BINARY[tok]

    def value_set(self) -> list[str]:
        tok, literal = self.consume(values=True)
        if tok is not _Tok.OPEN:
            raise SelectorError(f"found '{literal}' expected: '('")
        tok, literal = self.lookahead(values=True)
        if tok in (_Tok.ID, _Tok.COMMA):
            values = self.identifiers()
            if self.consume(values=True)[0] is not _Tok.CLOSE:
                raise SelectorError(f"found '{literal}', expected: ')'")
            return values
        if tok is _Tok.CLOSE:  # "()" is the set of the empty string
            self.consume(values=True)
            return [""]
        raise SelectorError(f"found '{literal}', expected: ',', ')' or identifier")

    def identifiers(self) -> list[str]:
        """A comma-separated list of possibly empty values, up to (not including) ')'."""
        values: list[str] = []
        while True:
            tok, literal = self.consume(values=True)
            if tok is _Tok.ID:
                values.append(literal)
                after, literal = self.lookahead(values=True)
                if after is _Tok.COMMA:
                    continue
                if after is _Tok.CLOSE:
                    return values
                raise SelectorError(f"found '{literal}', expected: ',' or ')'")
            if tok is _Tok.COMMA:  # "(," ",," and ",)" each stand for the empty value
                if not values:
                    values.append("")
                after = self.lookahead(values=True)[0]
                if after is _Tok.CLOSE:
                    values.append("")
                    return values
                if after is _Tok.COMMA:
                    self.consume(values=True)
                    values.append("")
                continue
            raise SelectorError(f"found '{literal}', expected: ',', or identifier")

    def exact_value(self) -> list[str]:
        if self.lookahead(values=True)[0] in (_Tok.END, _Tok.COMMA):
            return [""]
        tok, literal = self.consume(values=True)
        if tok is _Tok.ID:
            return [literal]
        raise SelectorError(f"found '{literal}', expected: identifier")


@dataclass(frozen=True)
class LabelSelector:
    """Requirements, all of which must hold (sorted by key, as Go sorts them)."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)


def parse_label_selector(selector: str) -> LabelSelector:
    """labels.Parse: the requirements of ``selector``, or SelectorError with Go's message."""
    requirements = _Parser(selector).parse()
    return LabelSelector(tuple(sorted(requirements, key=lambda r: r.key)))
