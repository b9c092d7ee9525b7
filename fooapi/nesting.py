"""How deep a JSON text nests, found without recursion: the one nesting limit of every JSON body.

Parsing, copying, rendering and serializing a JSON value all recurse, and each breaks at its own
depth: orjson writes at most 255 levels, Python's json ~1,000, field-error rendering too. So a
body (and the conversion stash annotation, JSON inside a string) is measured on its bytes before
any of them runs, and refused past MAX_DEPTH.
"""

from __future__ import annotations

import re
from itertools import accumulate

# Foo's schema nests ~15 levels with a review around it (managedFields follow the object's
# shape), and the CRD preserves no unknown fields; 128 is far above that and below orjson's 255
# with a stash (itself at most 128 deep) placed a few levels into an object.
MAX_DEPTH = 128

_KEEP = b'{}[]"\\'
_DELETE = bytes(byte for byte in range(256) if byte not in _KEEP)
_STRING = re.compile(rb'"[^"]*"')
_STEP = [0] * 256
for _open in b"{[":
    _STEP[_open] = 1
for _close in b"}]":
    _STEP[_close] = -1


def too_deep(text: bytes, limit: int = MAX_DEPTH) -> bool:
    """True if ``text`` nests arrays and objects deeper than ``limit`` (or might: text that is
    not JSON may be overcounted, and is refused either way).

    Fewer opening brackets than the limit answers at once (every real admission review). Else
    the text is cut down to its brackets, quotes and backslashes (C loops: ~20% of orjson's parse
    time on a 15 MB review): escapes go, then the strings, then a running sum finds the depth.
    Adjacent quotes are dropped first, a whole empty string or the gap between two strings, which
    leaves the others paired, so only strings holding brackets reach the regular expression.
    """
    if text.count(b"{") + text.count(b"[") <= limit:
        return False
    reduced = text.translate(None, _DELETE)
    reduced = reduced.replace(b"\\\\", b"").replace(b'\\"', b"").replace(b"\\", b"").replace(b'""', b"")
    if b'"' in reduced:
        reduced = _STRING.sub(b"", reduced)
    return max(accumulate(map(_STEP.__getitem__, reduced)), default=0) > limit
