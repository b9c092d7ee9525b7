"""Logging set-up shared by every process: plain text for people, JSON for log pipelines.

A text record is one line, the only one that starts at the left margin: what a tenant wrote
(a Foo's image, a message, any extra) reaches it with its control characters escaped
(componentbase.escaping), and a traceback's lines follow indented, so no text can start a line that
reads as a record of its own. JSON escapes control characters by itself.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Literal

from .escaping import escape_controls

LogFormat = Literal["text", "json"]

# Attributes every LogRecord has; anything else came from ``extra=`` and is printed as key=value.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}


def _extras(record: logging.LogRecord) -> dict[str, object]:
    if record.name == "aiohttp.access":
        return {}  # its message already says it all; its extras repeat the message
    return {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}


def _logfmt_value(value: object) -> str:
    """logfmt: bare when it can be, else quoted with ``\\`` and ``"`` escaped; controls always escaped."""
    text = str(value)
    if text == "" or any(c in text for c in ' ="\\'):
        return '"' + escape_controls(text.replace("\\", "\\\\").replace('"', '\\"')) + '"'
    return escape_controls(text)


# Before each line of a traceback: the record's first line is the only one at the left margin.
_CONTINUATION = "\n    "


class TextFormatter(logging.Formatter):
    """`2026-11-23T12:00:00Z INFO webhook: serving addr=0.0.0.0:9443` — readable at 3 a.m."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record.created))
        line = f"{stamp} {record.levelname} {escape_controls(record.name)}: {escape_controls(record.getMessage())}"
        extras = _extras(record)
        if extras:
            line += " " + " ".join(f"{escape_controls(k)}={_logfmt_value(v)}" for k, v in extras.items())
        if record.exc_info:
            trace = self.formatException(record.exc_info).split("\n")
            line += "".join(_CONTINUATION + escape_controls(text) for text in trace)
        return line


class JSONFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": record.created,
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            **_extras(record),
        }
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


# What asyncio warns of once a client has gone: each write after its TLS connection began closing
# is one line (4,816 of them from one attack mix's aborted Tables), though all it means is that
# the client left, which a server is always ready for.
_CLIENT_GONE = frozenset({"SSL connection is closed", "socket.send() raised exception."})


def _not_a_client_gone(record: logging.LogRecord) -> bool:
    return record.getMessage() not in _CLIENT_GONE


def setup_logging(level: str = "info", fmt: LogFormat = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JSONFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # aiohttp's access log is one line per request: useful only when asked for at debug.
    logging.getLogger("aiohttp.access").setLevel(logging.DEBUG if level.lower() == "debug" else logging.WARNING)
    asyncio_log = logging.getLogger("asyncio")
    if _not_a_client_gone not in asyncio_log.filters:
        asyncio_log.addFilter(_not_a_client_gone)
