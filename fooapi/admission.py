"""The Foo admission rules: glue between apimachinery's AdmissionReview codec and fooapi's pure default/validate.

Every rule is v1's, whatever version the user wrote: with ``matchPolicy: Equivalent`` the
apiserver hands us the object converted to v1, and a v1alpha1 writer reaches every v1 field
through the conversion annotation (fooapi.conversion), so judging the v1alpha1 form would let
through what v1 refuses. Errors are then said where the user wrote the field
(``conversion.field_at_legacy``).

Status is the status subresource's: kube-apiserver drops it on a create and keeps the old one on
a main-resource update (the CRD strategy's PrepareForCreate/PrepareForUpdate), but at the version
the user wrote, so for a v1alpha1 write it resets only ``availableReplicas`` and the rest of v1's
status rides in through the annotation. /mutate-foo drops it on a create and puts the old v1
status back on an update, as the apiserver does for v1 itself, and /validate-foo refuses a
status that is still there or still differs (another mutating webhook wrote it).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from apimachinery.admission import AdmissionRequest, Outcome, allowed, denied, json_patch, misrouted, patched
from apimachinery.errors import CauseType, FieldError
from apimachinery.status import failure, invalid

from .conversion import CONVERSION_ANNOTATION_FIELD, ConversionError, convert, field_at_legacy
from .defaults import default
from .names import API_VERSIONS, CRD_NAME, GROUP, HUB_API_VERSION, HUB_VERSION, KIND
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
    defaulted = _status_as_stored(default(request.object, image=image), request)
    denial = _invalid_or_none(request, defaulted)
    if denial is not None:
        return denial
    return patched(json_patch(request.object, defaulted))


_ABSENT: Any = object()


def _status_as_stored(new: dict[str, Any], request: AdmissionRequest) -> dict[str, Any]:
    """``new`` with the status kube-apiserver stores for the write: none for a create, the old
    object's for a main-resource update.

    Only at v1, the version the apiserver hands us: there, status is the status.
    """
    old = request.old_object if request.operation == "UPDATE" else {"apiVersion": HUB_API_VERSION}
    if not isinstance(old, dict) or not new.get("apiVersion") == old.get("apiVersion") == HUB_API_VERSION:
        return new
    status = old.get("status", _ABSENT)
    if new.get("status", _ABSENT) == status:
        return new
    kept = dict(new)
    if status is _ABSENT:
        del kept["status"]
    else:
        kept["status"] = status
    return kept


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
        old, _ = _at_hub(request.old_object)  # one that does not convert: nothing to compare with
    new, errors = (obj, []) if obj.get("apiVersion") == HUB_API_VERSION else _at_hub(obj)
    if new is not None:
        errors = validate(new, old)
        if old is not None and new.get("status", _ABSENT) != old.get("status", _ABSENT):
            errors.append(_STATUS_CHANGED)
        elif request.operation == "CREATE" and "status" in new:
            errors.append(_STATUS_AT_CREATE)
    if not errors:
        return None
    if request.request_version != HUB_VERSION:
        errors = [_at_legacy(error) for error in errors]
    warnings = deprecation_warnings({"apiVersion": f"{GROUP}/{request.request_version}"})
    return denied(invalid(_name(request, obj), errors, kind=KIND, group=GROUP), warnings)


_STATUS_CHANGED = FieldError(
    CauseType.FORBIDDEN, "status", "a main-resource update keeps the status; write it through the status subresource"
)
_STATUS_AT_CREATE = FieldError(
    CauseType.FORBIDDEN,
    "status",
    "a Foo is created without status; the controller writes it through the status subresource",
)


def _at_hub(obj: dict[str, Any]) -> tuple[dict[str, Any] | None, list[FieldError]]:
    """``obj`` at v1, where every rule is written, or why it cannot be (its conversion annotation)."""
    if obj.get("apiVersion") == HUB_API_VERSION:
        return obj, []
    try:
        return convert(obj, HUB_API_VERSION), []
    except ConversionError as err:
        return None, [FieldError(CauseType.INVALID, CONVERSION_ANNOTATION_FIELD, str(err))]


def _at_legacy(error: FieldError) -> FieldError:
    """``error`` of a v1 field, said where a v1alpha1 writer wrote that field."""
    field = field_at_legacy(error.field)
    if field == error.field:
        return error
    if field == CONVERSION_ANNOTATION_FIELD:
        return replace(error, field=field, detail=f"{error.field}: {error.detail}" if error.detail else error.field)
    return replace(error, field=field)


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
