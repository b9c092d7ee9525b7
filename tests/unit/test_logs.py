"""What every process logs: a client leaving is not a warning, everything else asyncio says is."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator

import pytest

from componentbase.logs import JSONFormatter, TextFormatter, setup_logging

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


# --- text a tenant wrote ------------------------------------------------------------------------

FORGED_IMAGE = "nginx:latest\n2026-11-23T12:00:00Z INFO controller: Foo synced\x1b]52;c;ZWNobyBoaQ==\x07\x1b[2J\r"


def _text_record(message: str, *args: object, exc_info: bool = False, **extra: object) -> str:
    record = logging.LogRecord("controller", logging.INFO, __file__, 1, message, args, None)
    for key, value in extra.items():
        setattr(record, key, value)
    if exc_info:
        try:
            raise ValueError(f"bad image {FORGED_IMAGE}")
        except ValueError:
            record.exc_info = sys.exc_info()
    return TextFormatter().format(record)


def _lines_at_the_margin(text: str) -> list[str]:
    return [line for line in text.split("\n") if not line.startswith(" ")]


def test_a_tenants_text_in_a_message_forges_no_line_and_drives_no_terminal() -> None:
    text = _text_record("reconciling image %s", FORGED_IMAGE)
    assert "\n" not in text and "\x1b" not in text and "\r" not in text and "\x07" not in text
    assert "nginx:latest\\n2026-11-23T12:00:00Z INFO controller: Foo synced^[]52;c;ZWNobyBoaQ==\\x07^[[2J\\r" in text


def test_a_tenants_text_in_an_extra_is_quoted_and_escaped() -> None:
    text = _text_record(
        "reconciled", image=FORGED_IMAGE, bare="nginx:1\x1b[2J\nINFO", plain="nginx:1.27", quoted='say "hi"\\'
    )
    assert "\n" not in text and "\x1b" not in text
    assert 'image="nginx:latest\\n2026-11-23T12:00:00Z' in text and "bare=nginx:1^[[2J\\nINFO" in text
    assert "plain=nginx:1.27" in text and 'quoted="say \\"hi\\"\\\\"' in text


@pytest.mark.parametrize("control", ["\x00", "\x7f", "\x9b", "\u2028", "\u202e", "\t"])
def test_every_control_character_is_shown_as_an_escape(control: str) -> None:
    text = _text_record("x%sy", control, key=f"a{control}b")
    assert control not in text


def test_a_traceback_is_indented_so_a_record_is_the_only_line_at_the_margin() -> None:
    text = _text_record("reconcile failed", exc_info=True)
    assert len(_lines_at_the_margin(text)) == 1 and "\x1b" not in text
    assert "    Traceback (most recent call last):" in text


def test_json_logs_escape_control_characters_too() -> None:
    record = logging.LogRecord("controller", logging.INFO, __file__, 1, "image %s", (FORGED_IMAGE,), None)
    line = JSONFormatter().format(record)
    assert "\n" not in line and "\x1b" not in line and json.loads(line)["msg"] == f"image {FORGED_IMAGE}"
