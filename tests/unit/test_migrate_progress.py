"""controller.progress: the total from remainingItemCount, time left at the pace so far, the bar."""

from __future__ import annotations

import pytest

from controller.progress import Progress, bar, describe, human_seconds, total_after_page


@pytest.mark.parametrize(
    ("done", "remaining", "more", "total"),
    [
        (500, 1500, True, 2000),  # the apiserver's count of the pages to come
        (500, None, True, None),  # not sent (e.g. a selector on the list): unknown
        (500, True, True, None),  # not a count
        (500, -1, True, None),
        (1990, None, False, 1990),  # the last page: exact
        (1990, 7, False, 1990),
    ],
)
def test_the_total_is_done_plus_what_the_apiserver_says_is_left(
    done: int, remaining: object, more: bool, total: int | None
) -> None:
    assert total_after_page(done, remaining, more) == total


def test_time_left_assumes_the_pace_so_far() -> None:
    assert Progress(done=250, total=1000, elapsed=10.0).seconds_left == 30.0
    assert Progress(done=0, total=1000, elapsed=1.0).seconds_left is None
    assert Progress(done=10, total=None, elapsed=1.0).seconds_left is None
    assert Progress(done=1200, total=1000, elapsed=1.0).seconds_left == 0.0  # more appeared meanwhile


def test_lines_and_bars_say_done_total_and_time_left() -> None:
    assert describe(Progress(250, 1000, 10.0)) == "250 of ~1000, ~30s left"
    assert describe(Progress(1000, 1000, 40.0)) == "1000 of ~1000"
    assert describe(Progress(250, None, 10.0)) == "250 so far"
    assert bar(Progress(250, 1000, 10.0), width=8) == "[##......]  25% 250 of ~1000, ~30s left"
    assert bar(Progress(250, None, 10.0), width=4) == "[????] 250 so far"


def test_durations_read_like_kubectl_ages() -> None:
    assert [human_seconds(s) for s in (4.4, 89, 90, 3599, 5400, 7322)] == [
        "4s",
        "89s",
        "1m30s",
        "59m59s",
        "1h30m",
        "2h02m",
    ]
