"""bench.profile: how py-spy's collapsed stacks become shares of the samples."""

from pathlib import Path

import pytest

from bench.profile import read_py_spy

# py-spy's raw format: one stack per line, outermost frame first, then the sample count.
RAW = """\
run (runners.py:118);serve (webhook/app.py:140);loads (serving/http.py:20) 3
run (runners.py:118);serve (webhook/app.py:140);_bounded_slowly (webhook/app.py:200) 1
run (runners.py:118) 4
"""


def test_own_time_goes_to_the_innermost_frame_and_inclusive_time_to_every_frame_on_the_stack(tmp_path: Path) -> None:
    raw = tmp_path / "stacks.txt"
    raw.write_text(RAW)
    result = read_py_spy(raw, top=10)
    own = {f["function"]: f["share"] for f in result["functions"]}
    inclusive = {f["function"]: f["share"] for f in result["inclusive"]}
    assert result["samples"] == 8
    assert own == {"runners.py:run": 0.5, "http.py:loads": 0.375, "app.py:_bounded_slowly": 0.125}
    assert inclusive["runners.py:run"] == 1.0
    assert inclusive["app.py:serve"] == pytest.approx(0.5)
    assert result["packages"]["serving"] == pytest.approx(0.375)
