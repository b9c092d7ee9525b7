"""Conversion between v1alpha1 (sample-controller's schema) and the v1 hub, lossless both ways.

Hub and spoke, as controller-runtime's conversion package does it: v1 is the hub and each other
version has ``to_hub`` / ``from_hub``. What v1alpha1 cannot hold (the image, v1-only status) rides
in the annotation ``CONVERSION_ANNOTATION`` on the v1alpha1 object and is taken out again on the
way back, so v1 → v1alpha1 → v1 is the identity. Only spec, status, apiVersion and that one
annotation are touched; every other field passes through as it came.

The annotation is metadata, which any writer of the main resource may set: what it holds is
input like any other field. ``to_hub`` takes back only what ``from_hub`` writes (a ConversionError
for anything else), and fooapi.admission holds what it carries to v1's rules, status included.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import orjson

from apimachinery.nesting import MAX_DEPTH, too_deep
from apimachinery.objects import Object

from .names import GROUP, HUB_API_VERSION, LEGACY_API_VERSION

CONVERSION_ANNOTATION = f"{GROUP}/conversion-data"
# Where a v1alpha1 writer's v1-only fields are, as a field path in errors (apimachinery's form for a map key).
CONVERSION_ANNOTATION_FIELD = f"metadata.annotations[{CONVERSION_ANNOTATION}]"


class ConversionError(ValueError):
    """The object cannot be converted; the message is for the user."""


def _stash_of(obj: Object) -> tuple[dict[str, Any], Object | None]:
    """Split the conversion annotation off ``obj``: (stash, metadata without it or None)."""
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        return {}, None
    annotations = metadata.get("annotations")
    if not isinstance(annotations, dict) or CONVERSION_ANNOTATION not in annotations:
        return {}, None
    rest = {k: v for k, v in annotations.items() if k != CONVERSION_ANNOTATION}
    new_metadata = dict(metadata)
    if rest:
        new_metadata["annotations"] = rest
    else:
        del new_metadata["annotations"]
    return _checked(_decode(annotations[CONVERSION_ANNOTATION])), new_metadata


def _checked(stash: Any) -> dict[str, Any]:
    """``stash`` if it has the shape ``from_hub`` writes: an object with at most ``deployment``
    (an object without ``name``, which v1alpha1 holds in ``spec.deploymentName``) and ``status``
    (an object without ``availableReplicas``, which v1alpha1 holds itself); ConversionError else.

    Anything else was written by hand: taken back, it would override what the v1alpha1 object
    says of itself (a stashed name won over ``spec.deploymentName``).
    """
    if not isinstance(stash, dict):
        raise ConversionError(f"annotation {CONVERSION_ANNOTATION} must hold a JSON object; remove it")
    for key, value in stash.items():
        kept_apart = _KEPT_APART.get(key)
        if kept_apart is None:
            raise ConversionError(
                f"annotation {CONVERSION_ANNOTATION} holds {key!r}, which conversion never writes there; remove it"
            )
        if not isinstance(value, dict) or kept_apart in value:
            raise ConversionError(
                f"annotation {CONVERSION_ANNOTATION}: {key!r} must be an object without {kept_apart!r} "
                f"(v1alpha1 holds that itself); remove the annotation"
            )
    return stash


# The stash's keys, each with the one field of it that v1alpha1 holds in its own place.
_KEPT_APART = {"deployment": "name", "status": "availableReplicas"}


def _decode(text: Any) -> Any:
    """The stash read back exactly as json reads it, at orjson's speed when that is the same thing.

    orjson reads integers beyond 64 bits as floats (lossy); json keeps them. A stash that
    ``_encode`` wrote re-encodes to its own text, and then nothing was lost: a float that was a
    big integer, an escape orjson writes differently, anything else comes out different, and
    json reads it (several times slower, which a large list read would feel on every object).
    A stash nested past the body's own limit is refused before either reads it (json recurses).
    """
    if isinstance(text, str) and too_deep(text.encode()):
        raise ConversionError(f"annotation {CONVERSION_ANNOTATION} nests deeper than {MAX_DEPTH} levels; remove it")
    try:
        value = orjson.loads(text)
        if orjson.dumps(value, option=orjson.OPT_SORT_KEYS) == text.encode():
            return value
    except (TypeError, ValueError, AttributeError):
        pass
    try:
        return json.loads(text)
    except (TypeError, ValueError, RecursionError):
        # RecursionError: brackets that never close are not too deep for ``too_deep`` (they do
        # not pair, and orjson refuses them flat), but json recurses into them before it sees so.
        raise ConversionError(f"annotation {CONVERSION_ANNOTATION} is not valid JSON; remove it") from None


def _encode(stash: dict[str, Any]) -> str:
    """Compact, key-sorted JSON. orjson, not json: this runs once per object of a list read, many
    times faster; json only for what orjson refuses (integers beyond 64 bits)."""
    try:
        return orjson.dumps(stash, option=orjson.OPT_SORT_KEYS).decode()
    except orjson.JSONEncodeError:
        return json.dumps(stash, separators=(",", ":"), sort_keys=True)


def to_hub(obj: Object) -> Object:
    """v1alpha1 → v1."""
    stash, metadata = _stash_of(obj)
    out = dict(obj)
    out["apiVersion"] = HUB_API_VERSION
    if metadata is not None:
        out["metadata"] = metadata
    spec = obj.get("spec")
    if isinstance(spec, dict):
        spec = dict(spec)
        deployment = stash.get("deployment", _MISSING)
        has_name = "deploymentName" in spec
        name = spec.pop("deploymentName", None)
        if deployment is not _MISSING or has_name:
            deployment = dict(deployment) if isinstance(deployment, dict) else {}
            if has_name:
                deployment = {"name": name, **deployment}
            spec["deployment"] = deployment
        out["spec"] = spec
    status_stash = stash.get("status")
    status = obj.get("status")
    if isinstance(status_stash, dict) and (status is None or isinstance(status, dict)):
        merged = dict(status_stash)
        if isinstance(status, dict):
            merged.update(status)  # what the v1alpha1 writer says wins over the stash
        out["status"] = merged
    return out


def from_hub(obj: Object) -> Object:
    """v1 → v1alpha1, stashing what v1alpha1 cannot hold."""
    out = dict(obj)
    out["apiVersion"] = LEGACY_API_VERSION
    stash: dict[str, Any] = {}
    spec = obj.get("spec")
    if isinstance(spec, dict) and "deployment" in spec:
        spec = dict(spec)
        deployment = spec.pop("deployment")
        if isinstance(deployment, dict):
            if "name" in deployment:
                spec["deploymentName"] = deployment["name"]
            rest = {k: v for k, v in deployment.items() if k != "name"}
            if rest or "name" not in deployment:
                stash["deployment"] = rest
        else:
            stash["deployment"] = deployment
        out["spec"] = spec
    status = obj.get("status")
    if isinstance(status, dict):
        kept = {k: v for k, v in status.items() if k == "availableReplicas"}
        rest = {k: v for k, v in status.items() if k != "availableReplicas"}
        if rest:
            stash["status"] = rest
            out["status"] = kept
    if stash:
        metadata = obj.get("metadata")
        metadata = dict(metadata) if isinstance(metadata, dict) else {}
        annotations = metadata.get("annotations")
        annotations = dict(annotations) if isinstance(annotations, dict) else {}
        annotations[CONVERSION_ANNOTATION] = _encode(stash)
        metadata["annotations"] = annotations
        out["metadata"] = metadata
    return out


_MISSING: Any = object()


def field_at_legacy(field: str) -> str:
    """Where v1alpha1 holds the v1 field ``field`` (a path of a field error): the same path where
    both versions have it, ``spec.deploymentName`` for the Deployment's name, and the annotation
    for what only v1 has (the rest of ``spec.deployment``, ``status`` but ``availableReplicas``)."""
    if field == "spec.deployment.name":
        return "spec.deploymentName"
    if field == "status.availableReplicas":
        return field
    top, _, _ = field.partition(".")
    if top == "status" or field == "spec.deployment" or field.startswith("spec.deployment."):
        return CONVERSION_ANNOTATION_FIELD
    return field


_TO_HUB: dict[str, Callable[[Object], Object]] = {LEGACY_API_VERSION: to_hub, HUB_API_VERSION: lambda o: o}
_FROM_HUB: dict[str, Callable[[Object], Object]] = {LEGACY_API_VERSION: from_hub, HUB_API_VERSION: lambda o: o}


def convert(obj: Object, desired_api_version: str) -> Object:
    """``obj`` at ``desired_api_version``, through the hub. Raises ConversionError."""
    if not isinstance(obj, dict):
        raise ConversionError("object must be a JSON object")
    source = obj.get("apiVersion")
    if source == desired_api_version:
        return obj
    up = _TO_HUB.get(source)  # type: ignore[arg-type]
    if up is None:
        raise ConversionError(f"cannot convert from apiVersion {source!r}: supported are {', '.join(_TO_HUB)}")
    down = _FROM_HUB.get(desired_api_version)
    if down is None:
        raise ConversionError(
            f"cannot convert to apiVersion {desired_api_version!r}: supported are {', '.join(_FROM_HUB)}"
        )
    return down(up(obj))
