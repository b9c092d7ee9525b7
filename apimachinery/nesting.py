"""How deep JSON nests, found without recursion: the one nesting limit of every JSON body.

Copying, rendering and serializing a JSON value all recurse, and each breaks at its own depth:
orjson writes at most 254 levels, Python's json ~1,000, field-error rendering too. orjson's
parse does not recurse past its own 1,024 levels. So a body is parsed, and its value measured
(``nests_too_deep``) before anything else touches it; a text that is not parsed first (the
conversion stash annotation, JSON inside a string; a body orjson refused) is measured on its
bytes (``too_deep``). Both refuse past MAX_DEPTH.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

# Foo's schema nests ~15 levels with a review around it (managedFields follow the object's
# shape), and the CRD preserves no unknown fields; 128 is far above that and below orjson's 254
# with a stash (itself at most 128 deep) placed a few levels into an object.
MAX_DEPTH = 128

# What the scan keeps of a text: brackets, quotes, backslashes, and every letter an escape can
# name, as one mark (an escape's backslash and what it escapes then stay side by side, which is all
# the scan needs of them); every other byte goes. A real review keeps about a third of its bytes.
_ESCAPED = b"/bfnrtu"
_MARK = b"e"
_MARKED = bytes.maketrans(_ESCAPED, _MARK * len(_ESCAPED))
_DELETE = bytes(byte for byte in range(256) if byte not in b'{}[]"\\' + _ESCAPED)
_STRING = re.compile(rb'"[^"]*"')
_PARENS = bytes.maketrans(b"{[}]", b"(())")


def too_deep(text: bytes, limit: int = MAX_DEPTH, *, opens: int | None = None) -> bool:
    """True if ``text`` nests arrays and objects deeper than ``limit`` (or might: text that is
    not JSON may be overcounted, and is refused either way).

    ``opens``: at least how many ``{`` and ``[`` the text holds, if counted already.
    Fewer opening brackets than the limit answers at once (every real admission review). Else
    the text is cut down to its brackets, quotes and escapes, then the escapes go, then the
    strings, then pairs of brackets are dropped, innermost first: C loops all, so the check costs a
    fraction of orjson's own parse. Cut down first, because the escapes cost per match, not per
    byte: on a third of the text, a 10,000-Foo ConversionReview's 260,000 escaped quotes (kubectl's
    last-applied-configuration) go in under half the time (bench/README, "Admission back ahead of
    Go").
    Adjacent quotes are dropped first, a whole empty string or the gap between two strings, which
    leaves the others paired, so only strings holding brackets reach the regular expression.
    """
    if opens is None:
        opens = text.count(b"{") + text.count(b"[")
    if opens <= limit:
        return False
    reduced = text.translate(_MARKED, _DELETE)
    # Escaped backslashes, then escaped quotes, go first: after an escaped backslash, a quote
    # ends its string. What backslashes are left escape a letter; they go with the letters.
    reduced = reduced.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, b"\\" + _MARK).replace(b'""', b"")
    if b'"' in reduced:
        reduced = _STRING.sub(b"", reduced)
    # Each pass drops the innermost pairs everywhere at once: what nests at most ``limit`` deep
    # is gone after ``limit`` passes (a real review after ~12, each on what the last left).
    # Brackets that no pass can pair are not JSON: orjson refuses them without recursing.
    reduced = reduced.translate(_PARENS)
    for _ in range(limit):
        shorter = reduced.replace(b"()", b"")
        if len(shorter) == len(reduced):
            return False
        reduced = shorter
    return bool(reduced)


def _deepest_orjson_writes() -> int:
    """How many arrays orjson writes nested before it gives up (254 for orjson 3.x), found by
    trying, so a release that moves its limit cannot move ours."""
    shallow, deep = 1, 4096  # writes, refuses
    while deep - shallow > 1:
        middle = (shallow + deep) // 2
        value: Any = 0
        for _ in range(middle):
            value = [value]
        try:
            orjson.dumps(value)
        except orjson.JSONEncodeError:
            deep = middle
        else:
            shallow = middle
    return shallow


_ORJSON_WRITES = _deepest_orjson_writes()
assert _ORJSON_WRITES > MAX_DEPTH, "orjson must write what the limit lets through"


def nests_too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    """True if a parsed JSON value nests arrays and objects deeper than ``limit``.

    orjson writes the value inside as many arrays as leave room for exactly ``limit`` levels of
    its own, and gives up, without recursing further, where it would need more. Writing is ~3×
    cheaper than scanning the text (a 10,000-Foo ConversionReview: 14 vs 43 ms; bench/README,
    "Admission back ahead of Go"). Only values parsed by orjson (or of its types) are measured.
    """
    wrapped = value
    for _ in range(_ORJSON_WRITES - limit):
        wrapped = [wrapped]
    try:
        orjson.dumps(wrapped)
    except orjson.JSONEncodeError:
        return True
    return False
