"""bench.cold_start --imports: how `python -X importtime` lines become the start-up breakdown."""

from __future__ import annotations

import os

import pytest

from bench.cold_start import import_times, package_self_times, process_cpu

# What a start writes to its log: importtime's lines (children before their parent), a log record.
LOG = """\
==> 02:43:59 starting: python -X importtime -c ...
import time: self [us] | cumulative | imported package
import time:      1500 |       1500 |       aiohttp.helpers
import time:      2000 |       3500 |     aiohttp
import time:       800 |        800 |   fooapi.names
import time:       700 |       1500 | fooapi
import time:       300 |        300 | serving.cli
import time:       250 |        250 | webhook
2026-11-25T02:43:59Z INFO serving.lifecycle: serving server=webhook
"""


def test_every_import_line_is_read_with_its_self_and_cumulative_milliseconds() -> None:
    assert import_times(LOG) == [
        ("aiohttp.helpers", 1.5, 1.5),
        ("aiohttp", 2.0, 3.5),
        ("fooapi.names", 0.8, 0.8),
        ("fooapi", 0.7, 1.5),
        ("serving.cli", 0.3, 0.3),
        ("webhook", 0.25, 0.25),
    ]


def test_self_times_add_up_per_package_with_the_product_and_everything_as_lines_of_their_own() -> None:
    totals = package_self_times(import_times(LOG))
    assert totals["aiohttp"] == pytest.approx(3.5)
    assert totals["fooapi"] == pytest.approx(1.5)
    assert totals["= foo-operator's own"] == pytest.approx(1.5 + 0.3 + 0.25)
    assert totals["= every import"] == pytest.approx(5.55)


def test_a_process_cpu_is_read_from_proc() -> None:
    used = process_cpu(os.getpid())
    assert 0 < used < sum(os.times()[:2]) + 1
