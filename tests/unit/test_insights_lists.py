"""The pure parts of FooHealth lists: options as apimachinery reads them, snapshots, pages."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from attacks.objects import foo_v1
from insights.listing import page
from insights.listoptions import LATEST, Continue, OptionsError, Read, list_options, parse_resource_version, watch_read
from insights.view import HealthView
from serving.budget import ByteBudget


@given(st.text(max_size=24))
def test_a_resource_version_is_exactly_what_go_parseuint_takes(text: str) -> None:
    go_accepts = text.isascii() and text.isdigit() and int(text) < 2**64
    try:
        value = parse_resource_version(text)
    except OptionsError as err:
        assert text not in ("", "0") and not go_accepts
        assert err.status["code"] == 400
        assert err.status["message"].startswith("invalid resource version: resourceVersion: Invalid value: ")
    else:
        assert (text in ("", "0") and value == 0) or (go_accepts and value == int(text))


@pytest.mark.parametrize("text", ["²", "٣", "１", "+1", " 1", "1_000", "0x10", "-0"])
def test_digits_python_accepts_but_go_does_not_are_refused(text: str) -> None:
    with pytest.raises(OptionsError):
        parse_resource_version(text)


@given(st.integers(min_value=1, max_value=2**62), st.text(min_size=1, max_size=40))
def test_a_continue_token_reads_back_as_written(rv: int, start: str) -> None:
    token = Continue(rv, start)
    assert Continue.decode(token.encode()) == token
    assert "=" not in token.encode()  # base64url without padding, as storage.EncodeContinue


@pytest.mark.parametrize(
    "query, read, limit",
    [
        ({}, Read(), 0),
        ({"resourceVersion": "0"}, Read(), 0),
        ({"resourceVersion": "7"}, Read(7), 0),
        ({"resourceVersion": "7", "resourceVersionMatch": "NotOlderThan"}, Read(7), 0),
        ({"resourceVersion": "7", "resourceVersionMatch": "Exact"}, Read(7, exact=True), 0),
        ({"resourceVersion": "7", "limit": "5"}, Read(7, exact=True), 5),  # the legacy case
        ({"resourceVersion": "7", "limit": "5", "resourceVersionMatch": "NotOlderThan"}, Read(7), 5),
        ({"resourceVersion": "0", "limit": "5"}, Read(), 5),
        ({"limit": "-3"}, Read(), 0),
        ({"continue": Continue(9, "ns/a\x00").encode()}, Read(9, exact=True), 0),
        ({"continue": Continue(LATEST, "ns/a\x00").encode(), "resourceVersion": "0"}, Read(), 0),
    ],
)
def test_which_state_a_list_reads(query: dict[str, str], read: Read, limit: int) -> None:
    options = list_options(query)
    assert (options.read, options.limit) == (read, limit)


def test_several_option_errors_are_one_422_with_a_cause_each() -> None:
    with pytest.raises(OptionsError) as caught:
        list_options({"resourceVersionMatch": "Newest", "continue": "x"})
    status = caught.value.status
    assert status["code"] == 422
    assert [c["message"] for c in status["details"]["causes"]] == [
        "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
        "Forbidden: resourceVersionMatch is forbidden when continue is provided",
        'Unsupported value: "Newest": supported values: "Exact", "NotOlderThan", ""',
    ]


def test_a_watch_takes_resource_version_match_only_with_send_initial_events() -> None:
    assert watch_read({"resourceVersion": "3", "sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan"})
    with pytest.raises(OptionsError) as caught:
        watch_read({"resourceVersion": "3", "resourceVersionMatch": "NotOlderThan"})
    assert "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided" in str(caught.value)


# ---- snapshots --------------------------------------------------------------------------------------


def _put(view: HealthView, name: str, replicas: int) -> None:
    foo = foo_v1(name, namespace="ns", replicas=replicas, uid=f"uid-{name}")
    view.foos.put(f"ns/{name}", foo)
    view.handlers("foos")[0](foo)


def _delete(view: HealthView, name: str) -> None:
    foo = view.foos.remove(f"ns/{name}")
    if foo is not None:
        view.handlers("foos")[2](foo)


@given(st.lists(st.tuples(st.sampled_from("abcd"), st.integers(min_value=-1, max_value=3)), max_size=30))
def test_a_snapshot_is_the_state_as_it_was_at_its_version(steps: list[tuple[str, int]]) -> None:
    view = HealthView.empty(instance=1)
    seen: dict[int, dict[str, Any]] = {view.version: dict(view.current)}
    for name, replicas in steps:
        _delete(view, name) if replicas < 0 else _put(view, name, replicas)
        seen[view.version] = dict(view.current)
    for version, state in seen.items():
        assert view.snapshot(version) == state


def test_the_history_is_bounded_by_count_age_and_budget() -> None:
    now = [0.0]
    budget = ByteBudget(64 * 1024)
    view = HealthView.empty(instance=1, history=3, history_window=10.0, clock=lambda: now[0], budget=budget)
    for replicas in range(6):
        _put(view, "a", replicas)
    assert view.oldest == view.version - 3 and view.snapshot(view.version - 4) is None
    assert budget.in_use == view.history_bytes > 0
    now[0] = 11.0
    assert view.oldest == view.version and budget.in_use == 0  # older than the window
    view.history_limit = 1000
    for replicas in range(200):
        _put(view, "a", replicas)
    assert 0 < view.history_bytes <= budget.capacity // 4  # a quarter of the budget at most
    assert view.oldest > view.version - 200


def test_a_page_starts_after_the_token_and_counts_what_remains() -> None:
    state = {f"ns/{n}": {"metadata": {"namespace": "ns", "name": n}} for n in "abcde"}
    state["other/z"] = {"metadata": {"namespace": "other", "name": "z"}}
    first = page(state, 7, list_options({"limit": "2"}), namespace="ns")
    assert [o["metadata"]["name"] for o in first.items] == ["a", "b"]
    assert first.metadata["remainingItemCount"] == 3
    token = Continue.decode(first.metadata["continue"])
    assert token == Continue(7, "ns/b\x00")
    rest = page(state, 7, list_options({"continue": first.metadata["continue"]}), namespace="ns")
    assert [o["metadata"]["name"] for o in rest.items] == ["c", "d", "e"]
    assert rest.metadata == {"resourceVersion": "7"}
