"""One nesting limit for every JSON body, checked on its bytes before anything recursive runs.

orjson parses up to 1,024 levels but writes only 255, and copying, converting, validating and
rendering recurse in Python: a body nested a few hundred deep parsed fine and then failed as a
500 with a traceback. Counted on the bytes, no tree is built for a body that is refused.
"""

from __future__ import annotations

import re
from array import array
from itertools import accumulate

from .bodies import StatusError
from .status import failure

# Deeper than any Kubernetes object needs (a Foo with managedFields: ~12 levels) and far enough
# below orjson's 255 that an answer wrapping the body (a review's status, an envelope) still renders.
NESTING_LIMIT = 128

# A JSON string, escapes included: what it holds is never structure.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"{}[]")
# Opening brackets up one level, closing ones down: as signed bytes, so accumulate sums them.
_STEP = bytes.maketrans(b"{[}]", b"\x01\x01\xff\xff")


def nesting_depth(body: bytes) -> int:
    """How deeply the arrays and objects of ``body`` nest (exact for any body that parses)."""
    brackets = _STRING.sub(b"", body).translate(None, _NOT_BRACKETS)
    if not brackets:
        return 0
    return max(accumulate(array("b", brackets.translate(_STEP))))


def check_nesting(body: bytes, limit: int = NESTING_LIMIT) -> None:
    """A 400 Status if ``body`` nests deeper than ``limit`` (two counts for the bodies that cannot)."""
    if body.count(b"{") + body.count(b"[") <= limit:
        return
    depth = nesting_depth(body)
    if depth > limit:
        raise StatusError(failure(400, f"request body is nested {depth} levels deep: the limit is {limit}"))
