"""Defaulting: fill what a Foo leaves out, returning a new object and never dropping fields."""

from __future__ import annotations

from typing import Any

from .names import HUB_API_VERSION, LEGACY_API_VERSION, MIN_REPLICAS

DEFAULT_IMAGE = "nginx:latest"
DEFAULT_REPLICAS = MIN_REPLICAS


def _copy_spec(obj: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]] | None:
    spec = obj.get("spec")
    if spec is None:
        spec = {}
    if not isinstance(spec, dict):
        return None  # a wrongly typed spec is validation's to report, not ours to overwrite
    out = dict(obj)
    out["spec"] = dict(spec)
    return out, out["spec"]


def default(obj: dict[str, Any], *, image: str = DEFAULT_IMAGE) -> dict[str, Any]:
    """The Foo with defaults applied: replicas 1 and, in v1, image ``image``.

    Idempotent, and copies only what it changes, so the caller's object is never mutated.
    v1alpha1 has no image field; its image is defaulted once the object is converted to v1.
    """
    copied = _copy_spec(obj)
    if copied is None:
        return obj
    out, spec = copied
    api_version = obj.get("apiVersion")
    if spec.get("replicas") is None and api_version in (HUB_API_VERSION, LEGACY_API_VERSION):
        spec["replicas"] = DEFAULT_REPLICAS
    if api_version == HUB_API_VERSION:
        deployment = spec.get("deployment")
        if deployment is None:
            deployment = {}
        if isinstance(deployment, dict) and deployment.get("image") is None:
            spec["deployment"] = {**deployment, "image": image}
    if out == obj:
        return obj
    return out
