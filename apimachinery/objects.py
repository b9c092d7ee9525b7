"""Any Kubernetes object as it travels (decoded JSON), and the thin read-only view of its metadata.

The wire stays a dict (the informer caches hold thousands of them); code reads it through views
(kopf's ``bodies`` pattern): no copy, no validation per event, and every field has one spelling
and one default for the whole tree. A view never raises on a malformed object: a field of the
wrong type reads as absent, which is what a cache's readers want. The Foo's own views sit on
these in fooapi.views.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# A Kubernetes object as it travels: decoded JSON, never copied into a model on the hot path.
Object = dict[str, Any]


def mapping(value: Any) -> Mapping[str, Any]:
    """``value`` when it is a JSON object, else an empty one: absent and wrongly typed read alike."""
    return value if isinstance(value, Mapping) else {}


def integer(value: Any, default: int = 0) -> int:
    """``value`` when it is a JSON integer (not a bool), else ``default``."""
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def optional_integer(value: Any) -> int | None:
    """``value`` when it is a JSON integer (not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def text(value: Any) -> str | None:
    """``value`` when it is a non-empty string, else None."""
    return value if isinstance(value, str) and value else None


def namespaced_key(namespace: str, name: str) -> str:
    """``namespace/name``: how stores, queues and indexes name a namespaced object."""
    return f"{namespace}/{name}"


class ObjectView:
    """Any object, read where all kinds agree: its ``metadata``."""

    __slots__ = ("raw",)

    def __init__(self, raw: Mapping[str, Any]) -> None:
        self.raw = raw

    @property
    def metadata(self) -> Mapping[str, Any]:
        return mapping(self.raw.get("metadata"))

    @property
    def name(self) -> str:
        return text(self.metadata.get("name")) or ""

    @property
    def namespace(self) -> str:
        return text(self.metadata.get("namespace")) or ""

    @property
    def uid(self) -> str | None:
        return text(self.metadata.get("uid"))

    @property
    def generation(self) -> int | None:
        return optional_integer(self.metadata.get("generation"))

    @property
    def resource_version(self) -> str:
        return text(self.metadata.get("resourceVersion")) or ""

    @property
    def labels(self) -> Mapping[str, Any]:
        return mapping(self.metadata.get("labels"))

    @property
    def deleting(self) -> bool:
        return bool(self.metadata.get("deletionTimestamp"))

    @property
    def owner_references(self) -> list[Mapping[str, Any]]:
        refs = self.metadata.get("ownerReferences")
        return [ref for ref in refs if isinstance(ref, Mapping)] if isinstance(refs, list) else []

    @property
    def controller_reference(self) -> Mapping[str, Any] | None:
        """The ownerReference with ``controller: true``, if any (metav1.GetControllerOf)."""
        return next((ref for ref in self.owner_references if ref.get("controller") is True), None)
