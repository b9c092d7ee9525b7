"""Where a kind's objects live on the apiserver (schema.GroupVersionResource and its REST path)."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote


@dataclass(frozen=True)
class Resource:
    """A REST resource: where its objects live on the apiserver."""

    group: str
    version: str
    plural: str
    kind: str = ""
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        """``/apis/<g>/<v>[/namespaces/<ns>]/<plural>[/<name>[/<sub>]]`` (``/api/v1`` for core)."""
        parts = [f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"]
        if namespace is not None and self.namespaced:
            parts.append(f"namespaces/{quote(namespace, safe='')}")
        parts.append(self.plural)
        if name is not None:
            parts.append(quote(name, safe=""))
            if subresource:
                parts.append(subresource)
        return "/".join(parts)
