"""apimachinery.nesting: the depth of a JSON text, found on its bytes, and of a parsed value, found by
orjson writing it, is the depth of what it parses to; every body past the limit is refused."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apimachinery.bodies import StatusError, parse_json
from apimachinery.nesting import MAX_DEPTH, nests_too_deep, too_deep

# Strings full of what the scan must not mistake for structure: brackets, quotes, escapes.
_TRICKY = st.text(alphabet='{}[]"\\/ax\n\r\t\b\fé', max_size=6)
_JSON = st.recursive(
    st.none() | st.integers(min_value=-(2**63), max_value=2**64 - 1) | _TRICKY,  # what orjson parses
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TRICKY, inner, max_size=3),
    max_leaves=30,
)


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


@given(_JSON, st.integers(min_value=0, max_value=8), st.booleans(), st.booleans())
def test_a_text_is_too_deep_exactly_when_its_value_nests_past_the_limit(
    value: Any, limit: int, ascii_only: bool, escaped_slashes: bool
) -> None:
    # Every escape JSON has: \\, \", \n, \t, \b, \f, \u00e9, and \/ (which json.dumps never writes).
    written = json.dumps(value, ensure_ascii=ascii_only)
    text = (written.replace("/", "\\/") if escaped_slashes else written).encode()
    assert too_deep(text, limit) == (_depth(value) > limit)


def test_brackets_inside_strings_do_not_count() -> None:
    assert not too_deep(json.dumps(["[" * 500, "{" * 500]).encode())


@pytest.mark.parametrize("escape", ["\\\\", '\\"', "\\/", "\\b", "\\f", "\\n", "\\r", "\\t", "\\u00e9", "\\u00bf"])
def test_a_string_ending_in_an_escape_ends_there(escape: str) -> None:
    # Read as escaping the quote after it, the escape would make one string of the first string,
    # the deep array and the start of the second: depth 1 where there are 5.
    text = f'["a{escape}",[[[[0]]]],"b{escape}"]'.encode()
    assert not too_deep(text, 5) and too_deep(text, 4)


@given(_JSON, st.integers(min_value=0, max_value=8))
def test_a_parsed_value_is_too_deep_exactly_when_it_nests_past_the_limit(value: Any, limit: int) -> None:
    assert nests_too_deep(value, limit) == (_depth(value) > limit)


def _nested(depth: int, *, arrays: bool) -> bytes:
    return b"[" * depth + b"0" + b"]" * depth if arrays else b'{"a":' * depth + b"0" + b"}" * depth


@pytest.mark.parametrize("arrays", [True, False], ids=["arrays", "objects"])
def test_a_body_at_the_limit_parses_and_one_level_more_is_refused(arrays: bool) -> None:
    assert parse_json(_nested(MAX_DEPTH, arrays=arrays)) is not None
    with pytest.raises(StatusError, match=f"nests arrays and objects deeper than {MAX_DEPTH} levels"):
        parse_json(_nested(MAX_DEPTH + 1, arrays=arrays))


@pytest.mark.parametrize("depth", [300, 1_024, 5_000])
def test_a_body_nested_past_what_orjson_parses_is_refused_for_its_nesting(depth: int) -> None:
    # orjson refuses past 1,024 levels itself; the answer still names the nesting, not the syntax.
    with pytest.raises(StatusError, match="deeper than 128 levels"):
        parse_json(b'{"objects":[' + _nested(depth, arrays=True) + b"]}")


def test_a_body_that_is_not_json_says_so_however_many_brackets_it_opens() -> None:
    with pytest.raises(StatusError, match="not valid JSON"):
        parse_json(b"[" * 200 + b"nope")
