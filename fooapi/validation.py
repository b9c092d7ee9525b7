"""Validation: every field error of a Foo at once, in Kubernetes' shape."""

from __future__ import annotations

from typing import Any

from apimachinery import name_rules
from apimachinery.errors import CauseType, FieldError, invalid, required, too_long, type_invalid

from .conversion import CONVERSION_ANNOTATION, CONVERSION_ANNOTATION_FIELD
from .images import MAX_LENGTH as IMAGE_MAX_LENGTH
from .images import reference_errors
from .names import HUB_API_VERSION, LEGACY_API_VERSION, MAX_REPLICAS, MIN_REPLICAS


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


def _image_errors(field: str, image: Any, old_image: Any) -> list[FieldError]:
    """An image reference the kubelet can parse (fooapi.images). An update that leaves the image
    as it was is not refused for it, as kube-apiserver ratchets a CRD schema's rules: a Foo stored
    before the grammar was enforced stays editable."""
    if image is None or image == old_image:
        return []
    if not isinstance(image, str):
        return [type_invalid(field, image, "must be a string")]
    messages = reference_errors(image)
    if not messages:
        return []
    if image == "":
        return [required(field, "image must not be empty when set")]
    if len(image) > IMAGE_MAX_LENGTH:
        return [too_long(field, IMAGE_MAX_LENGTH)]
    return [invalid(field, image, message) for message in messages]


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
    old_name = old_image = None
    if old is not None:
        _, _, old_name, _, old_image, old_shape_errors = _fields(old)
        if old_shape_errors:
            old_name = old_image = None
    errors += _deployment_name_errors(name_path, name)
    if image_path is not None:
        errors += _image_errors(image_path, image, old_image)
    errors += replicas_errors(replicas_path, spec.get("replicas"))
    # Once a Foo names its Deployment, renaming would orphan the old one: forbid it.
    if old_name and old_name != name:
        errors.append(invalid(name_path, name, "field is immutable"))
    if api_version == HUB_API_VERSION:
        metadata = new.get("metadata")
        annotations = metadata.get("annotations") if type(metadata) is dict else None
        if type(annotations) is dict and CONVERSION_ANNOTATION in annotations:
            errors += _conversion_annotation_errors(annotations[CONVERSION_ANNOTATION], old)
    return errors


def _conversion_annotation_errors(value: Any, old: dict[str, Any] | None) -> list[FieldError]:
    """At v1 the conversion annotation is ours alone: conversion to v1alpha1 writes it, conversion
    back takes it off, so a v1 object that carries one was written by hand, and reading it at
    v1alpha1 would hand the reader what the writer put there. One kept from before is let be."""
    metadata = old.get("metadata") if old is not None else None
    annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
    if isinstance(annotations, dict) and annotations.get(CONVERSION_ANNOTATION) == value:
        return []
    return [
        FieldError(
            CauseType.FORBIDDEN,
            CONVERSION_ANNOTATION_FIELD,
            "reserved for conversion to v1alpha1; set the v1 fields (spec, status) themselves",
        )
    ]


def deprecation_warnings(obj: dict[str, Any]) -> list[str]:
    """Warnings for the user, one short line each."""
    if obj.get("apiVersion") == LEGACY_API_VERSION:
        return [f"{LEGACY_API_VERSION} Foo is deprecated; use {HUB_API_VERSION} Foo"]
    return []
