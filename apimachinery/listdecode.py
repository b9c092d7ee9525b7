"""Decode a list answer's items one at a time while its body arrives, so a page is never held whole.

A page of 500 objects a tenant made 1.35 MiB each is 675 MiB of JSON; parsed whole, several times
that. ``ListDecoder`` is fed the body as it streams and hands out each item as soon as its last
byte is in, so the caller projects it (``kube.informer``'s transform) before the next one is
decoded: what is held is the undecoded tail of the body, one raw item and the projections.

The stdlib's C scanner does the work (``json.JSONDecoder.raw_decode``): it decodes a value
starting at an offset and says where it ended, which is all a streaming list needs. An item still
arriving fails to decode; it is tried again only once the text after its start has doubled (or
the body has ended), so a large item costs at most about three decodes, never one per chunk.
docs/architecture.md ("Tenants") has the numbers that chose it over ijson and a whole parse.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterator
from json.decoder import JSONDecodeError
from typing import Any

from apimachinery.objects import Object

# No item of a list is larger: kube-apiserver refuses request bodies over 3 MiB and etcd objects
# over 1.5 MiB by default. Text past this without an item's end is a broken answer, not a wait.
MAX_ITEM_CHARACTERS = 8 * 1024 * 1024
# Decoded text already handed out is cut off the buffer once this much of it has piled up.
_COMPACT_AT = 64 * 1024
_WHITESPACE = re.compile(r"[ \t\n\r]*")
_decode_value = json.JSONDecoder().raw_decode


class ListDecodeError(ValueError):
    """The answer is not a JSON object with an ``items`` array, or an item never ends."""


class ListDecoder:
    """Feed the body's bytes with ``feed`` and iterate what it yields, the last time with ``end``;
    then ``head`` is the list without its items (``kind``, ``apiVersion``, ``metadata``), in
    whatever order the server wrote its keys (kube-apiserver writes a CRD's list with ``items``
    before ``metadata``, a built-in kind's with it after).
    """

    def __init__(self, items_key: str = "items", *, max_item_characters: int = MAX_ITEM_CHARACTERS) -> None:
        self.items_key = items_key
        self.max_item_characters = max_item_characters
        self.items = 0  # handed out so far
        self._utf8 = codecs.getincrementaldecoder("utf-8")()
        self._text = ""
        self._at = 0
        self._state = _OPEN
        self._comma = False  # a "," comes before the next member or item
        self._key = ""
        self._head: Object = {}
        self._tried = 0  # text after the cursor when the value there last failed to decode
        self._ended = False

    def feed(self, data: bytes, *, end: bool = False) -> Iterator[Object]:
        """The items whose last byte is in ``data`` (or before it), one at a time; ``end`` once
        the body is over (``data`` may then be empty), which also checks that the list was whole."""
        self._text += self._utf8.decode(data, end)
        self._ended = end
        return self._drain()

    @property
    def head(self) -> Object:
        """The list without its items (read after the ``end`` feed is drained)."""
        if self._state != _CLOSED:
            raise ListDecodeError("the list answer has not ended")
        return self._head

    def _drain(self) -> Iterator[Object]:
        while (step := self._step()) is not _MORE:
            if step is not _PROGRESS:
                yield step
        if self._at >= _COMPACT_AT:
            self._text, self._at = self._text[self._at :], 0
        if self._ended:
            if self._state != _CLOSED:
                raise ListDecodeError("the list answer ended before its JSON object did")
            if _past_whitespace(self._text, self._at) != len(self._text):
                raise ListDecodeError("the list answer has text after its JSON object")

    def _step(self) -> Any:
        """Take one step: an item, _PROGRESS for anything else, _MORE when the text has run out."""
        self._at = _past_whitespace(self._text, self._at)
        if self._state == _CLOSED or self._at == len(self._text):
            return _MORE
        char = self._text[self._at]
        if self._state == _OPEN:
            self._expect(char, "{", _KEY)
        elif self._state in (_KEY, _ITEM) and char == ("}" if self._state == _KEY else "]"):
            self._at += 1
            self._state, self._comma = (_CLOSED, False) if self._state == _KEY else (_KEY, True)
        elif self._comma:
            self._expect(char, ",", self._state)
            self._comma = False
        elif self._state == _KEY:
            if char != '"':
                self._expect(char, '"', _KEY)
            key = self._decode()  # a JSON string: the cursor is on its quote
            if key is _MORE:
                return _MORE
            self._key, self._state = key, _COLON
        elif self._state == _COLON:
            self._expect(char, ":", _ITEMS if self._key == self.items_key else _VALUE)
        elif self._state == _ITEMS:
            self._expect(char, "[", _ITEM)
        elif self._state == _VALUE:
            value = self._decode()
            if value is _MORE:
                return _MORE
            self._head[self._key] = value
            self._state, self._comma = _KEY, True
        else:  # _ITEM
            item = self._decode()
            if item is _MORE:
                return _MORE
            if not isinstance(item, dict):
                raise ListDecodeError(f"item {self.items} of the list answer is not a JSON object")
            self.items += 1
            self._comma = True
            return item
        return _PROGRESS

    def _expect(self, char: str, wanted: str, then: str) -> None:
        if char != wanted:
            raise ListDecodeError(f"the list answer has {char!r} at character {self._at} where {wanted!r} belongs")
        self._at += 1
        self._state = then

    def _decode(self) -> Any:
        """The value at the cursor, or _MORE while it is still arriving."""
        available = len(self._text) - self._at
        if available < 2 * self._tried and not self._ended:
            return _MORE
        try:
            value, end = _decode_value(self._text, self._at)
        except JSONDecodeError as err:
            if self._ended:
                raise ListDecodeError(f"the list answer is not JSON: {err}") from None
            if available > self.max_item_characters:
                raise ListDecodeError(
                    f"a value in the list answer runs past {self.max_item_characters} characters"
                ) from None
            self._tried = available
            return _MORE
        if isinstance(value, int | float) and not self._ended and self._text[end : end + 1] in _MAY_GO_ON:
            self._tried = available  # a number the next chunk may go on with ("1" of "1.5e3")
            return _MORE
        self._at, self._tried = end, 0
        return value


def _past_whitespace(text: str, at: int) -> int:
    match = _WHITESPACE.match(text, at)
    return match.end() if match else at


_OPEN, _KEY, _COLON, _VALUE, _ITEMS, _ITEM, _CLOSED = "open", "key", "colon", "value", "items", "item", "closed"
_MORE: Any = object()
_MAY_GO_ON = ("", ".", "e", "E", "+", "-", *"0123456789")
_PROGRESS: Any = object()
