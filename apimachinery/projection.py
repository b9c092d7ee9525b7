"""Keeping a bounded projection of an object: the fields a reader reads, each with a size it cannot pass.

Informer caches hold what tenants store. A projection keeps, of each object, only what our code
reads, and of each field kept at most a fixed size, so a cached object costs a constant however
large the stored one is. What a projection left out that its reader should know about is noted
under one key of the projected object (``NOTES``): a field that was over its bound and is read
(``refused``: the reader must not act on the object as if it had the field), or labels not kept
(``labelsDropped``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .errors import too_long
from .objects import Object, mapping

# The key of a projected object under which the projection notes what it left out. Not a field
# of any Kubernetes object (those are camelCase words), so it never shadows one.
NOTES = "projection.foo-operator.io"
REFUSED = "refused"  # one line: the field over its bound, in field-error words
LABELS_DROPPED = "labelsDropped"  # how many labels were not kept

# A name anywhere in an object: DNS-1123 subdomains (object names, references) are at most 253.
MAX_NAME = 253
# RFC 3339 times, resourceVersions, uids, phases, types: short by nature.
MAX_TOKEN = 64
# A condition's or an Event's reason (CamelCase) and message (human words). Events' own newer API
# (events.k8s.io/v1) holds a note to 1 KiB; longer messages are cut there.
MAX_REASON = 256
MAX_MESSAGE = 1024
# Labels a projection keeps: the first ones in key order (the order the apiserver writes them),
# at most this many and this many characters of keys and values in all.
MAX_LABELS = 32
MAX_LABEL_CHARACTERS = 4096


def cut(value: Any, limit: int) -> Any:
    """A string cut to ``limit`` characters; a number, bool or null as it is; anything else None."""
    if isinstance(value, str):
        return value[:limit]
    if value is None or isinstance(value, int | float | bool):
        return value
    return None


def pick(source: Any, limits: Mapping[str, int]) -> Object:
    """The scalar fields ``limits`` names that ``source`` has, each string cut to its limit."""
    fields = mapping(source)
    return {key: cut(fields[key], limit) for key, limit in limits.items() if key in fields}


def integers(source: Any, keys: Iterable[str]) -> Object:
    """The integer fields of ``source`` that ``keys`` names (what counts and generations are)."""
    fields = mapping(source)
    return {key: fields[key] for key in keys if isinstance(fields.get(key), int)}


def bounded_text(value: Any, limit: int, field: str) -> tuple[Any, str | None]:
    """(the value to keep, None) when ``value`` fits ``limit``; (None, why) when it does not."""
    if isinstance(value, str) and len(value) > limit:
        return None, str(too_long(field, limit))
    if isinstance(value, list | dict):
        return None, f"{field}: must be a string"
    return value, None


def bounded_labels(labels: Any) -> tuple[dict[str, str], int]:
    """(the labels kept, how many were dropped): the first in key order, up to MAX_LABELS and
    MAX_LABEL_CHARACTERS; a label that is not a string pair is dropped too."""
    source = mapping(labels)
    kept: dict[str, str] = {}
    characters = 0
    for key in sorted(source):
        value = source[key]
        if not isinstance(value, str) or len(kept) == MAX_LABELS:
            continue
        size = len(key) + len(value)
        if characters + size > MAX_LABEL_CHARACTERS:
            continue
        kept[key] = value
        characters += size
    return kept, len(source) - len(kept)


REFERENCE_FIELDS = {"apiVersion": MAX_NAME, "kind": MAX_NAME, "name": MAX_NAME, "uid": MAX_TOKEN}


def controller_reference(metadata: Mapping[str, Any]) -> Object | None:
    """The ownerReference with ``controller: true`` (metav1.GetControllerOf), its fields cut to
    their bounds: the one reference ownership needs, whatever else an object lists."""
    refs = metadata.get("ownerReferences")
    for ref in refs if isinstance(refs, list) else ():
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            return {**pick(ref, REFERENCE_FIELDS), "controller": True}
    return None


def noted(projected: Object, notes: Mapping[str, Any]) -> Object:
    """``projected`` with ``notes`` (those that say something) under NOTES."""
    said = {key: value for key, value in notes.items() if value}
    if said:
        projected[NOTES] = said
    return projected


def notes_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """What the projection of ``obj`` noted (empty for an object no projection made)."""
    return mapping(obj.get(NOTES))
