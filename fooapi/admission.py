"""The Foo admission rules: glue between apimachinery's AdmissionReview codec and fooapi's pure default/validate."""

from __future__ import annotations

from typing import Any

from apimachinery.admission import AdmissionRequest, Outcome, allowed, denied, json_patch, misrouted, patched
from apimachinery.status import failure, invalid

from .conversion import ConversionError, convert
from .defaults import default
from .names import API_VERSIONS, CRD_NAME, GROUP, KIND
from .validation import deprecation_warnings, replicas_errors, validate

_WRITES = ("CREATE", "UPDATE")


def _foo_or_denial(request: AdmissionRequest, obj: Any, what: str = "object") -> Outcome | None:
    if not isinstance(obj, dict):
        return denied(failure(400, f"request.{what} must be a Foo object"))
    if obj.get("apiVersion") not in API_VERSIONS or obj.get("kind") != KIND:
        return denied(
            failure(
                400,
                f"request.{what} must be a Foo of {' or '.join(API_VERSIONS)}, "
                f"got kind {obj.get('kind')!r} of apiVersion {obj.get('apiVersion')!r}",
            )
        )
    return None


def _name(request: AdmissionRequest, obj: dict[str, Any]) -> str:
    metadata = obj.get("metadata")
    if request.name:
        return request.name
    if isinstance(metadata, dict):
        return str(metadata.get("name") or metadata.get("generateName") or "")
    return ""


def _unless_a_foo_write(request: AdmissionRequest) -> Outcome | None:
    """The answer to anything but a write of a well-formed Foo (both hooks route alike); None for one.

    Misrouted requests are refused, foos/scale is validated, other operations are allowed.
    """
    if request.resource != CRD_NAME:
        return misrouted(request, CRD_NAME)
    if request.sub_resource == "scale":
        return _validate_scale(request)
    if request.sub_resource:
        return misrouted(request, CRD_NAME)
    if request.operation not in _WRITES:
        return allowed()
    return _foo_or_denial(request, request.object)


def mutate_foo(request: AdmissionRequest, *, image: str) -> Outcome:
    """Fill defaults (replicas, image) with the smallest patch; nothing to fill, no patch.

    A Foo that validation would refuse is refused here already, with the same Status: mutating
    webhooks run before the apiserver checks the CRD schema, whose bounds would otherwise answer
    first, one generic message per field instead of ours. foos/scale likewise.
    """
    answered = _unless_a_foo_write(request)
    if answered is not None:
        return answered
    defaulted = default(request.object, image=image)
    denial = _invalid_or_none(request, defaulted)
    if denial is not None:
        return denial
    return patched(json_patch(request.object, defaulted))


def _in_requested_version(request: AdmissionRequest, obj: dict[str, Any]) -> dict[str, Any]:
    """With matchPolicy Equivalent we see v1; errors read best in the version the user sent."""
    wanted = f"{GROUP}/{request.request_version}"
    if wanted == obj.get("apiVersion") or wanted not in API_VERSIONS:
        return obj
    try:
        return convert(obj, wanted)
    except ConversionError:
        return obj


def validate_foo(request: AdmissionRequest) -> Outcome:
    """All field errors at once as 422 Invalid, plus a warning for deprecated versions."""
    answered = _unless_a_foo_write(request)
    if answered is not None:
        return answered
    denial = _invalid_or_none(request, request.object)
    if denial is not None:
        return denial
    return allowed(deprecation_warnings({"apiVersion": f"{GROUP}/{request.request_version}"}))


def _invalid_or_none(request: AdmissionRequest, obj: dict[str, Any]) -> Outcome | None:
    """Every field error of ``obj`` (and of the change from oldObject) as one 422, or None."""
    old = None
    if request.operation == "UPDATE":
        problem = _foo_or_denial(request, request.old_object, "oldObject")
        if problem is not None:
            return problem
        old = _in_requested_version(request, request.old_object)
    new = _in_requested_version(request, obj)
    errors = validate(new, old)
    if not errors:
        return None
    warnings = deprecation_warnings({"apiVersion": f"{GROUP}/{request.request_version}"})
    return denied(invalid(_name(request, new), errors, kind=KIND, group=GROUP), warnings)


def _validate_scale(request: AdmissionRequest) -> Outcome:
    """`kubectl scale` writes through foos/scale; the replicas bounds hold there too."""
    if request.operation != "UPDATE":
        return allowed()
    scale = request.object
    spec = scale.get("spec") if isinstance(scale, dict) else None
    if not isinstance(spec, dict):
        return denied(failure(400, "request.object must be a Scale with a spec"))
    errors = replicas_errors("spec.replicas", spec.get("replicas"))
    if errors:
        return denied(invalid(request.name, errors, kind=KIND, group=GROUP))
    return allowed()
