"""What a review costs is counted, not timed, and stays where it was recorded.

A slow or busy machine moves no count, so these fail only when the code's cost moved:
instructions per review on the in-process path within 5% of review_costs.json, and no page
fault per review over TLS (tests/component/review_costs.py says how each is counted). A change
that moves a figure on purpose records it again (``python -m tests.component.review_costs
--record``) and says why in its commit.
"""

from __future__ import annotations

import os
import shutil

import pytest

from bench.load import ensure_wrk
from tests.component.review_costs import TOLERANCE, count_instructions, count_page_faults, fingerprint, load_figures

_ON_CI = os.environ.get("CI") == "true"


def _needs(tool: str) -> None:
    if shutil.which(tool) is None:
        message = f"{tool} is not installed (apt-get install -y {tool})"
        if _ON_CI:
            pytest.fail(message)
        pytest.skip(message)


def test_instructions_per_review_stay_within_five_percent_of_the_recorded_figures() -> None:
    _needs("valgrind")
    figures = load_figures()
    if figures["counted_with"] != fingerprint():
        message = (
            f"the figures were counted with {figures['counted_with']}, this is {fingerprint()}: "
            "make venv installs the versions of constraints.txt"
        )
        if _ON_CI:
            pytest.fail(message)
        pytest.skip(message)
    counted = count_instructions()
    moved = {
        endpoint: f"{counted[endpoint]:,.0f} where {recorded:,} were recorded ({counted[endpoint] / recorded - 1:+.1%})"
        for endpoint, recorded in figures["instructions_per_review"].items()
        if abs(counted[endpoint] / recorded - 1) > TOLERANCE
    }
    assert not moved, f"instructions per review moved past {TOLERANCE:.0%}: {moved}"


def test_a_review_over_tls_maps_no_memory_of_its_own() -> None:
    """4dc2f08's regression: uvloop's TLS layer read into a fresh 256 KiB block above glibc's
    mmap threshold, an mmap, a page fault and an munmap per review (2 faults per review here)."""
    try:
        ensure_wrk()
    except SystemExit as missing:
        if _ON_CI:
            pytest.fail(str(missing))
        pytest.skip(str(missing))
    faults = count_page_faults()
    assert all(per_review < 0.05 for per_review in faults.values()), f"page faults per review: {faults}"
