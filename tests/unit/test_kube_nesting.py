"""kube.nesting: the depth of a JSON body, counted on its bytes before anything parses it."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kube.bodies import StatusError
from kube.nesting import NESTING_LIMIT, check_nesting, nesting_depth

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | st.text(alphabet='[]{}"\\ab,:'),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(alphabet='[]{}"\\a'), children, max_size=3)
    ),
    max_leaves=30,
)


def _depth(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


@given(JSON)
def test_the_depth_counted_on_the_bytes_is_the_depth_of_the_parsed_tree(value: object) -> None:
    assert nesting_depth(orjson.dumps(value)) == _depth(value)


@pytest.mark.parametrize(
    ("body", "depth"),
    [
        (b"1", 0),
        (b"{}", 1),
        (b'{"a": [1, {"b": []}]}', 4),
        (b'{"a": "[[[{{{"}', 1),  # brackets inside strings are text
        (b'{"a\\"[": ["\\\\", "]]"]}', 2),  # escaped quotes and backslashes end strings where JSON does
    ],
)
def test_brackets_count_only_outside_strings(body: bytes, depth: int) -> None:
    assert nesting_depth(body) == depth


def test_a_body_nested_past_the_limit_is_a_400_status_naming_both_numbers() -> None:
    check_nesting(b"[" * NESTING_LIMIT + b"]" * NESTING_LIMIT)
    with pytest.raises(StatusError) as raised:
        check_nesting(b"[" * 300 + b"]" * 300)
    assert raised.value.status["code"] == 400
    assert raised.value.status["message"] == f"request body is nested 300 levels deep: the limit is {NESTING_LIMIT}"
