"""apimachinery.nesting: the depth of a JSON text, found on its bytes, is the depth of what it parses to."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apimachinery.nesting import too_deep

# Strings full of what the scan must not mistake for structure: brackets, quotes, escapes.
_TRICKY = st.text(alphabet='{}[]"\\/ax\n\r\t\b\fé', max_size=6)
_JSON = st.recursive(
    st.none() | st.integers() | _TRICKY,
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
