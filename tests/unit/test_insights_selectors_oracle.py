"""Differential test: insights' selector parsers against apimachinery's own, run by hack/selector-oracle.

Thousands of generated selectors, biased to the grammar (keys, values, operators, commas,
parentheses, blanks, escapes, `!`, a few odd characters), must give the same requirements — or the
same error text — from both. One Go process serves the whole run, in batches.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apimachinery.fields import parse_field_selector
from apimachinery.labels import SelectorError, parse_label_selector
from hack.plane.binaries import selector_oracle

ORACLE = selector_oracle()
if not ORACLE.is_file() and os.environ.get("CI") != "true":  # in CI a missing oracle fails below
    pytest.skip(f"selector-oracle not built ({ORACLE}): run `bash hack/build.sh`", allow_module_level=True)

BATCH = 200
EXAMPLES = 25  # x BATCH selectors of each kind


class Oracle:
    def __init__(self) -> None:
        self.process = subprocess.Popen([str(ORACLE)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, encoding="utf-8")
        self.asked = 0

    def ask(self, kind: str, selectors: list[str]) -> list[dict[str, Any]]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write("".join(json.dumps({"kind": kind, "selector": s}) + "\n" for s in selectors))
        self.process.stdin.flush()
        self.asked += len(selectors)
        return [json.loads(self.process.stdout.readline()) for _ in selectors]


@pytest.fixture(scope="module")
def oracle() -> Iterator[Oracle]:
    assert ORACLE.is_file(), f"selector-oracle not built ({ORACLE}): run `bash hack/build.sh`"
    running = Oracle()
    yield running
    assert running.process.stdin is not None
    running.process.stdin.close()
    running.process.wait(timeout=10)
    print(f"\nselector-oracle answered {running.asked} selectors")


def _sorted(requirements: list[Any]) -> list[Any]:
    return sorted(requirements, key=json.dumps)


def ours_label(selector: str) -> dict[str, Any]:
    try:
        parsed = parse_label_selector(selector)
    except SelectorError as err:
        return {"error": str(err)}
    return {"requirements": _sorted([[r.key, r.operator.value, list(r.values)] for r in parsed.requirements])}


def ours_field(selector: str) -> dict[str, Any]:
    try:
        parsed = parse_field_selector(selector)
    except SelectorError as err:
        return {"error": str(err)}
    name = parsed.requires_exact_match("metadata.name")
    return {
        "requirements": _sorted([[r.field, r.operator, [r.value]] for r in parsed.requirements]),
        "name": name or "",
        "pinned": name is not None,
    }


def theirs(answer: dict[str, Any], kind: str) -> dict[str, Any]:
    if "error" in answer:
        return {"error": answer["error"]}
    if kind == "label":
        return {"requirements": _sorted(answer["requirements"])}
    return {"requirements": _sorted(answer["requirements"]), "name": answer["name"], "pinned": answer["pinned"]}


# Odd characters: NUL (Go's lexer reads it as the end), DEL, a non-breaking space, accents,
# characters Go's %q escapes, one outside the BMP.
ODD = ["\0", "\x7f", "\x1b", "\u00a0", "é", "ß", "\u200b", "\U0001f600", '"', "'", "%", ";", "&", "|", "*", "~", "+"]
BLANKS = [" ", "  ", "\t", "\n", "\r", " \t "]
KEYS = [
    "a",
    "tier",
    "app",
    "A",
    "x9",
    "9",
    "a-b",
    "a_b",
    "a.b",
    "app.kubernetes.io/name",
    "example.com/x",
    "in",
    "notin",
    "a" * 63,
]
BAD_KEYS = ["-a", "a-", "_a", ".a", "Example.com/x", "/x", "x/", "a/b/c", "a" * 64, "a." * 130 + "a/x", "é"]
VALUES = ["", "web", "db", "1", "007", "9223372036854775807", "v_1", "x.y", "in", "notin", "a" * 63]
BAD_VALUES = ["-1", "+1", "9223372036854775808", "1.5", "a" * 64, "-web", "web-", "é"]
OPERATORS = ["=", "==", "!=", "in", "notin", ">", "<", "!", "gt", "lt", "exists", "=!", "!==", "==="]
PUNCTUATION = ["(", ")", ",", "()", "(,)", ",,", ",)", "(,", "!"]


_NOISE = "ab1-_./=!(),<> \t" + "".join(ODD)


def _fragments(rnd: random.Random, words: list[str]) -> str:
    """Grammar-shaped noise: words of the language and stray characters, in any order."""
    return "".join(
        rnd.choice(words) if rnd.random() < 0.7 else "".join(rnd.choices(_NOISE, k=rnd.randint(1, 3)))
        for _ in range(rnd.randint(0, 14))
    )


def _blank(rnd: random.Random) -> str:
    return rnd.choice(["", "", "", *BLANKS])


def _key(rnd: random.Random) -> str:
    return rnd.choice(KEYS if rnd.random() < 0.9 else BAD_KEYS)


def _value(rnd: random.Random) -> str:
    return rnd.choice(VALUES if rnd.random() < 0.9 else BAD_VALUES)


def _requirement(rnd: random.Random) -> str:
    shape = rnd.random()
    if shape < 0.2:
        return rnd.choice(["", "", "!", "! "]) + _blank(rnd) + _key(rnd)
    if shape < 0.6:
        operator = rnd.choice(["=", "==", "!="] if rnd.random() < 0.6 else OPERATORS)
        return _key(rnd) + _blank(rnd) + operator + _blank(rnd) + _value(rnd)
    values = ",".join(_blank(rnd) + _value(rnd) for _ in range(rnd.randint(0, 4)))
    return (
        _key(rnd)
        + rnd.choice(BLANKS)
        + rnd.choice(["in", "notin", "in", "notin", "In"])
        + _blank(rnd)
        + "("
        + values
        + _blank(rnd)
        + rnd.choice([")", ")", ")", ")", "", "))", "),"])
    )


def label_selector(rnd: random.Random) -> str:
    if rnd.random() < 0.2:
        return _fragments(rnd, [*KEYS, *BAD_KEYS, *VALUES, *BAD_VALUES, *OPERATORS, *PUNCTUATION, *BLANKS, *ODD])
    separator = rnd.choice([",", ",", ",", ",", ", ", " ,", ",,", " ", ""])
    return separator.join(_requirement(rnd) for _ in range(rnd.randint(1, 4)))


FIELDS = ["metadata.name", "metadata.namespace", "status.phase", "", " ", "a", "x"]
FIELD_VALUES = [
    "",
    "x",
    "allowed",
    "a\\,b",
    "a\\=b",
    "a\\\\",
    "\\",
    "\\q",
    "a,b",
    "a=b",
    "(",
    "(x",
    "y)",
    " x",
    "é",
    "a/b",
    "..",
    "%41",
]
FIELD_OPERATORS = ["=", "==", "!=", "", "!", "===", "=!"]


def field_selector(rnd: random.Random) -> str:
    if rnd.random() < 0.25:
        return _fragments(rnd, [*FIELDS, *FIELD_VALUES, *FIELD_OPERATORS, ",", "\\", "\\,", "\\=", "(", ")", *ODD])
    return rnd.choice([",", ",", ",,", ", "]).join(
        rnd.choice(FIELDS) + rnd.choice(FIELD_OPERATORS) + rnd.choice(FIELD_VALUES) for _ in range(rnd.randint(0, 4))
    )


# Hypothesis seeds a plain Random per example (cheap draws; a failure prints the selector itself):
# EXAMPLES x BATCH selectors of each kind in a few seconds, one Go process for all of them.
SETTINGS = settings(
    max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@SETTINGS
@given(rnd=st.randoms(use_true_random=True))
def test_label_selectors_parse_as_apimachinery_parses_them(oracle: Oracle, rnd: random.Random) -> None:
    selectors = [label_selector(rnd) for _ in range(BATCH)]
    for selector, answer in zip(selectors, oracle.ask("label", selectors), strict=True):
        assert ours_label(selector) == theirs(answer, "label"), repr(selector)


@SETTINGS
@given(rnd=st.randoms(use_true_random=True))
def test_field_selectors_parse_as_apimachinery_parses_them(oracle: Oracle, rnd: random.Random) -> None:
    selectors = [field_selector(rnd) for _ in range(BATCH)]
    for selector, answer in zip(selectors, oracle.ask("field", selectors), strict=True):
        assert ours_field(selector) == theirs(answer, "field"), repr(selector)


@pytest.mark.parametrize(
    "selector",
    [
        "k in (" + " " * 2000,
        "a" + "\t" * 2000 + "b",
        "x in (foo,,baz),y,z notin ()",
        "a=b\0,c",
        "a \0 garbage",
        "!a=b",
        "a in (,,)",
        "a<-1",
        "a>9223372036854775808",
        "a in (b,-c,-d)",
        "a/b/c",
        "é=a",
        "a=\u00a0",
    ],
)
def test_hand_picked_label_selectors_agree(oracle: Oracle, selector: str) -> None:
    [answer] = oracle.ask("label", [selector])
    assert ours_label(selector) == theirs(answer, "label")
