"""serving.limits: what a serving process sets for itself at start."""

from __future__ import annotations

import platform
import resource
from collections.abc import Iterator

import pytest

from serving.limits import give_back_freed_memory, keep_large_blocks_out_of_the_heap, raise_open_file_limit


@pytest.fixture
def low_open_file_limit() -> Iterator[int]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(256, hard), hard))
    try:
        yield hard
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_the_soft_open_file_limit_is_raised_to_the_hard_one(low_open_file_limit: int) -> None:
    # A container starts with 1024: one client holding that many connections took every descriptor.
    assert raise_open_file_limit() == low_open_file_limit
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == low_open_file_limit


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_freed_memory_is_given_back_on_glibc() -> None:
    blocks = [bytes(8000) for _ in range(1000)]
    del blocks
    assert give_back_freed_memory()


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim and mallopt are glibc's")
def test_glibc_is_found_where_no_ldconfig_is(monkeypatch: pytest.MonkeyPatch) -> None:
    # Before: found through ctypes.util.find_library, which asks ldconfig; the image has none,
    # so in every pod neither the heap trim nor the mmap threshold ever ran.
    import ctypes.util

    import serving.limits

    monkeypatch.setattr(ctypes.util, "find_library", lambda name: None)
    monkeypatch.setattr(serving.limits, "_libc", None)
    assert keep_large_blocks_out_of_the_heap()
    assert give_back_freed_memory()
