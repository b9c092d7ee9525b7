"""The AdmissionReview protocol (admission.k8s.io/v1), written once: decode, outcomes, encode.

Handlers only decide: they get an ``AdmissionRequest`` and return an ``Outcome`` made by one of
``allowed``, ``patched``, ``denied`` or ``invalid`` (controller-runtime's response constructors).
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import orjson

from apimachinery.status import Status, failure

from .review import review_request

ADMISSION_API_VERSION = "admission.k8s.io/v1"
# The largest review body taken: it carries object and oldObject, each up to the apiserver's 3 MiB
# request limit (an AdmissionReview; a FooReview is made the same way).
REVIEW_BODY_LIMIT = 8 << 20  # 8 MiB
OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")


class AdmissionRequest(NamedTuple):
    """The parts of ``AdmissionReview.request`` that rules read.

    A NamedTuple, not a frozen dataclass: as immutable, and made several times faster (a frozen
    dataclass sets each of its 14 fields through object.__setattr__), once per review.
    """

    uid: str
    operation: str
    group: str
    version: str
    kind: str
    resource: str
    sub_resource: str
    request_version: str
    name: str
    namespace: str
    object: Any
    old_object: Any
    dry_run: bool
    raw: dict[str, Any]


@dataclass(frozen=True)
class Outcome:
    allowed: bool
    status: Status | None = None
    patch: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def code(self) -> int:
        return 200 if self.allowed else (self.status or {}).get("code", 403)


def allowed(warnings: list[str] | None = None) -> Outcome:
    return Outcome(True, warnings=warnings or [])


def patched(patch: list[dict[str, Any]], warnings: list[str] | None = None) -> Outcome:
    """Allowed with a JSONPatch; an empty patch is plain ``allowed`` (no patch sent at all)."""
    return Outcome(True, patch=patch, warnings=warnings or [])


def denied(status: Status, warnings: list[str] | None = None) -> Outcome:
    return Outcome(False, status=status, warnings=warnings or [])


def _text(value: Any, what: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"request.{what} must be a string")
    return value


def _gvx(value: Any, what: str, last: str) -> tuple[str, str, str]:
    """(group, version, kind-or-resource) of a GroupVersionKind/Resource field."""
    if not isinstance(value, dict):
        raise ValueError(f"request.{what} must be an object with group, version and {last}")
    group, version, name = value.get("group"), value.get("version"), value.get(last)
    if type(group) is str and type(version) is str and type(name) is str:
        return group, version, name  # what the apiserver sends; the field names are built only for an error
    return (
        _text(group, f"{what}.group"),
        _text(version, f"{what}.version"),
        _text(name, f"{what}.{last}"),
    )


def decode(body: Any) -> AdmissionRequest:
    """An AdmissionRequest, or ValueError with a message for the caller."""
    request, uid = review_request(body, "AdmissionReview", ADMISSION_API_VERSION)
    operation = request.get("operation")
    if operation not in OPERATIONS:
        raise ValueError(f"request.operation must be one of {', '.join(OPERATIONS)}, got {operation!r}")
    group, version, kind = _gvx(request.get("kind"), "kind", "kind")
    resource_group, _, resource = _gvx(request.get("resource"), "resource", "resource")
    request_kind = request.get("requestKind")
    request_version = _gvx(request_kind, "requestKind", "kind")[1] if request_kind is not None else version
    return AdmissionRequest(
        uid=uid,
        operation=operation,
        group=group,
        version=version,
        kind=kind,
        resource=f"{resource}.{resource_group}" if resource_group else resource,
        sub_resource=_text(request.get("subResource"), "subResource"),
        request_version=request_version or version,
        name=_text(request.get("name"), "name"),
        namespace=_text(request.get("namespace"), "namespace"),
        object=request.get("object"),
        old_object=request.get("oldObject"),
        dry_run=bool(request.get("dryRun")),
        raw=request,
    )


def encode(uid: str, outcome: Outcome) -> dict[str, Any]:
    """The AdmissionReview answering request ``uid``."""
    response: dict[str, Any] = {"uid": uid, "allowed": outcome.allowed}
    if outcome.status is not None:
        response["status"] = outcome.status
    if outcome.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(orjson.dumps(outcome.patch)).decode()
    if outcome.warnings:
        response["warnings"] = outcome.warnings
    return {"apiVersion": ADMISSION_API_VERSION, "kind": "AdmissionReview", "response": response}


def misrouted(request: AdmissionRequest, expected: str) -> Outcome:
    """A review for a resource this webhook does not own: a configuration bug, said plainly."""
    got = request.resource + (f"/{request.sub_resource}" if request.sub_resource else "")
    return denied(failure(400, f"this webhook admits {expected}, not {got}: check the webhook configuration's rules"))


# An admission rule: what to answer a review. Synchronous: its CPU work never waits.
Rule = Callable[[AdmissionRequest], Outcome]


def _pointer(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def json_patch(original: Any, modified: Any, path: str = "") -> list[dict[str, Any]]:
    """The smallest add/replace/remove JSONPatch turning ``original`` into ``modified``.

    Objects are diffed key by key (so fields the webhook does not know are never touched);
    anything else that differs is replaced whole. Written here rather than taken from the
    ``jsonpatch`` package because that one diffs lists into move/copy operations and is several
    times slower on this hot path.
    """
    if original == modified:
        return []
    if not (isinstance(original, dict) and isinstance(modified, dict)):
        return [{"op": "replace", "path": path, "value": modified}]
    ops: list[dict[str, Any]] = []
    for key in original:
        if key not in modified:
            ops.append({"op": "remove", "path": f"{path}/{_pointer(key)}"})
    for key, value in modified.items():
        child = f"{path}/{_pointer(key)}"
        if key not in original:
            ops.append({"op": "add", "path": child, "value": value})
        else:
            ops.extend(json_patch(original[key], value, child))
    return ops
