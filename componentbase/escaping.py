"""Text a tenant wrote, made inert before it reaches a log line or a terminal.

A Foo's fields, a Status message from the apiserver, a certificate's subject: any of them may
hold a newline (a forged log line), a carriage return (a line overwritten in place) or an escape
sequence (OSC 52 writes the reader's clipboard, CSI 2J clears the screen). kubectl replaces ESC
with ``^[`` and CR with ``\\r`` in what it prints (cli-runtime's printers.EscapeTerminal, after
CVE-2021-25743); we do the same, and also show every other C0 and C1 control, DEL, the Unicode
line and paragraph separators and the bidirectional overrides ("Trojan Source") as escapes, so a
line we print holds no control byte we did not write.
"""

from __future__ import annotations

import re

_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
# kubectl's own two (ESC, CR), then the usual names.
_NAMED = {"\x1b": "^[", "\r": "\\r", "\n": "\\n", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_controls(text: str) -> str:
    """``text`` with every control character shown as an escape; the text itself when it has none
    (one regular-expression search: what nearly every call costs)."""
    if _UNSAFE.search(text) is None:
        return text
    return _UNSAFE.sub(_escape, text)
