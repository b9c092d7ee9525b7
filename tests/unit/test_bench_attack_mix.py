"""The attack mix's pure parts: a pod's memory summed over its process tree, and the hostile bodies."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from attacks.harness import status_of
from attacks.webhook import deep_bodies, gzip_bomb, invalid_name_review
from bench import memcg, proctree
from bench.attack_mix import _runs, _tracebacks, source_env


def test_parent_is_read_after_a_command_name_with_spaces_and_parentheses() -> None:
    assert proctree.parent_of_stat("4242 (python -m (x)) S 17 4242 4242 0 -1") == 17


def test_rss_of_a_status_text_is_its_vmrss_and_a_zombie_has_none() -> None:
    assert proctree.rss_kib_of_status("Name:\tpython\nVmHWM:\t 9000 kB\nVmRSS:\t 5120 kB\n") == 5120
    assert proctree.rss_kib_of_status("Name:\tpython\nState:\tZ (zombie)\n") == 0


def test_descendants_are_the_root_its_children_and_their_children_only() -> None:
    parents = {1: 0, 10: 1, 11: 10, 12: 10, 13: 11, 20: 1, 21: 20}
    assert proctree.descendants(10, parents) == {10, 11, 12, 13}
    assert proctree.descendants(13, parents) == {13}


def test_a_supervisor_and_its_workers_are_summed(tmp_path: Path) -> None:
    for pid, parent, rss in ((100, 1, 40_960), (101, 100, 81_920), (102, 100, 20_480), (200, 1, 999_999)):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(f"{pid} (python) S {parent} 0 0")
        (tmp_path / str(pid) / "status").write_text(f"VmRSS:\t{rss} kB\n")
    pids = proctree.tree(100, tmp_path)
    assert pids == {100, 101, 102}
    assert proctree.rss_mib(pids, tmp_path) == 140.0
    assert proctree.rss_mib({*pids, 4_000_000}, tmp_path) == 140.0  # a process that ended counts 0


def test_the_live_tree_of_this_process_holds_its_child() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert {os.getpid(), child.pid} <= proctree.tree(os.getpid())
        assert proctree.rss_mib({child.pid}) > 1
    finally:
        child.kill()
        child.wait()


def test_tracebacks_are_counted_from_the_latest_start_only(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(
        "==> 10:00:00 starting: python -m webhook\nTraceback (most recent call last):\n  old\n"
        "==> 10:01:00 starting: python -m webhook\nfine\n"
        '{"exc_info": "Traceback (most recent call last):\\n  File x\\nRecursionError"}\n'
    )
    found = _tracebacks(log)
    assert len(found) == 1 and "RecursionError" in found[0]


def test_each_finding_runs_alone_before_the_mix() -> None:
    assert _runs((1, 3), each=True) == [(1,), (3,), (1, 3)]
    assert _runs((1, 3), each=False) == [(1, 3)]
    assert _runs((5,), each=True) == [(5,)]


def test_a_source_checkout_runs_its_own_packages_not_this_ones(tmp_path: Path) -> None:
    (tmp_path / "webhook").mkdir()
    (tmp_path / "webhook" / "__init__.py").write_text("")
    here = Path(__file__).resolve().parents[2]  # this checkout: the working directory and the venv's
    found = subprocess.run(
        [sys.executable, "-c", "import webhook; print(webhook.__file__)"],
        env=source_env(tmp_path),
        cwd=here,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert Path(found) == tmp_path.resolve() / "webhook" / "__init__.py"
    assert source_env(None) is None


@pytest.mark.parametrize(
    ("line", "status"), [(b"HTTP/1.1 413 Request Entity Too Large", "413"), (b"", "closed"), (b"junk", "closed")]
)
def test_status_of_a_status_line(line: bytes, status: str) -> None:
    assert status_of(line) == status


def test_the_gzip_bomb_is_small_and_inflates_to_a_conversion_review() -> None:
    bomb = gzip_bomb(4)
    assert len(bomb) < 20_000
    review = orjson.loads(gzip.decompress(bomb))
    assert review["kind"] == "ConversionReview" and len(review["request"]["padding"]) > 1_000_000


def test_the_invalid_name_review_is_about_the_size_asked() -> None:
    body = invalid_name_review(1 << 20)
    assert (1 << 20) - 20 < len(body) <= 1 << 20
    assert orjson.loads(body)["request"]["object"]["spec"]["deployment"]["name"].startswith("Bad_Name.")


def test_deep_bodies_are_json_nested_past_the_depths_of_the_findings() -> None:
    (_, value), (_, stash), (_, deep_object) = deep_bodies()
    assert value.count(b"[") >= 990 and b"__deep__" not in value
    assert stash.count(b"[") >= 100_000
    assert deep_object.count(b'{"a":') == 300 and b"__deep__" not in deep_object


def test_oom_kills_are_read_from_a_v1_oom_control() -> None:
    assert memcg.parse_oom_kills("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n") == 3
    assert memcg.parse_oom_kills("oom_kill_disable 0\nunder_oom 0\n") == 0
