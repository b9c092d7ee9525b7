"""Validation: every field error of a Foo at once, in Kubernetes' shape."""

from __future__ import annotations

from typing import Any

from apimachinery.errors import FieldError, invalid, required, too_long, type_invalid

from . import name_rules
from .names import HUB_API_VERSION, LEGACY_API_VERSION, MAX_IMAGE_LENGTH, MAX_REPLICAS, MIN_REPLICAS


def dns1123_subdomain_errors(field: str, value: str) -> list[FieldError]:
    """What apimachinery's IsDNS1123Subdomain says about ``value``."""
    return [invalid(field, value, message) for message in name_rules.dns1123_subdomain(value)]


def replicas_errors(field: str, replicas: Any) -> list[FieldError]:
    """Replicas must be a whole number from 1 to 10."""
    if replicas is None:
        return []  # defaulting fills it; a missing value is not the user's mistake
    if isinstance(replicas, bool) or not isinstance(replicas, int):
        return [type_invalid(field, replicas, "must be an integer")]
    if replicas < MIN_REPLICAS:
        return [invalid(field, replicas, f"must be greater than or equal to {MIN_REPLICAS}")]
    if replicas > MAX_REPLICAS:
        return [invalid(field, replicas, f"must be less than or equal to {MAX_REPLICAS}")]
    return []


def _image_errors(field: str, image: Any) -> list[FieldError]:
    if image is None:
        return []
    if not isinstance(image, str):
        return [type_invalid(field, image, "must be a string")]
    if image == "":
        return [required(field, "image must not be empty when set")]
    if image != image.strip():
        return [invalid(field, image, "must not have leading or trailing whitespace")]
    if len(image) > MAX_IMAGE_LENGTH:
        return [too_long(field, MAX_IMAGE_LENGTH)]
    return []


def _deployment_name_errors(field: str, name: Any) -> list[FieldError]:
    if name is None or name == "":
        return [required(field)]
    if not isinstance(name, str):
        return [type_invalid(field, name, "must be a string")]
    return dns1123_subdomain_errors(field, name)


def _fields(obj: dict[str, Any]) -> tuple[str, str, Any, str | None, Any, list[FieldError]]:
    """(name path, replicas path, name, image path, image, shape errors) for either version."""
    spec = obj.get("spec")
    if spec is None:
        spec = {}
    if not isinstance(spec, dict):
        return "", "", None, None, None, [type_invalid("spec", spec, "must be an object")]
    if obj.get("apiVersion") == LEGACY_API_VERSION:
        return "spec.deploymentName", "spec.replicas", spec.get("deploymentName"), None, None, []
    deployment = spec.get("deployment")
    if deployment is None:
        deployment = {}
    if not isinstance(deployment, dict):
        return "", "", None, None, None, [type_invalid("spec.deployment", deployment, "must be an object")]
    return (
        "spec.deployment.name",
        "spec.replicas",
        deployment.get("name"),
        "spec.deployment.image",
        deployment.get("image"),
        [],
    )


def validate(new: dict[str, Any], old: dict[str, Any] | None = None) -> list[FieldError]:
    """All field errors of ``new`` (and of the change from ``old`` on update), in field order.

    Both objects must be of the same version; the webhook converts before calling.
    """
    api_version = new.get("apiVersion")
    if api_version not in (HUB_API_VERSION, LEGACY_API_VERSION):
        return [invalid("apiVersion", api_version, f"must be {HUB_API_VERSION} or {LEGACY_API_VERSION}")]
    name_path, replicas_path, name, image_path, image, errors = _fields(new)
    if errors:
        return errors
    spec = new.get("spec") or {}
    errors += _deployment_name_errors(name_path, name)
    if image_path is not None:
        errors += _image_errors(image_path, image)
    errors += replicas_errors(replicas_path, spec.get("replicas"))
    if old is not None:
        errors += _immutable_name_errors(old, name_path, name)
    return errors


def _immutable_name_errors(old: dict[str, Any], name_path: str, new_name: Any) -> list[FieldError]:
    """Once a Foo names its Deployment, renaming would orphan the old one: forbid it."""
    _, _, old_name, _, _, shape_errors = _fields(old)
    if shape_errors or not old_name or old_name == new_name:
        return []
    return [invalid(name_path, new_name, "field is immutable")]


def deprecation_warnings(obj: dict[str, Any]) -> list[str]:
    """Warnings for the user, one short line each."""
    if obj.get("apiVersion") == LEGACY_API_VERSION:
        return [f"{LEGACY_API_VERSION} Foo is deprecated; use {HUB_API_VERSION} Foo"]
    return []
