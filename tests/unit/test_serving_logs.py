"""What every process logs: a client leaving is not a warning, everything else asyncio says is."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from serving.logs import setup_logging

ASYNCIO = logging.getLogger("asyncio")


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level, filters = root.handlers[:], root.level, ASYNCIO.filters[:]
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    ASYNCIO.filters[:] = filters


def test_writes_after_a_tls_client_left_are_not_logged(capsys: pytest.CaptureFixture[str]) -> None:
    # Before: one warning per write to a TLS connection the client had begun closing: 4,816
    # lines from one attack mix, each saying only that a client went away.
    setup_logging()
    for _ in range(100):
        ASYNCIO.warning("SSL connection is closed")
        ASYNCIO.warning("socket.send() raised exception.")
    assert capsys.readouterr().err == ""


def test_asyncios_other_warnings_are_still_logged(capsys: pytest.CaptureFixture[str]) -> None:
    setup_logging()
    ASYNCIO.warning("Executing %s took %.3f seconds", "<Task>", 0.5)
    assert "WARNING asyncio: Executing <Task> took 0.500 seconds" in capsys.readouterr().err


def test_setting_up_twice_filters_once() -> None:
    setup_logging()
    setup_logging()
    assert len(ASYNCIO.filters) == 1
