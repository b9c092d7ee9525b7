"""metav1.Status objects: the one shape every Kubernetes error takes on the wire."""

from __future__ import annotations

from typing import Any, TypedDict

from apimachinery.errors import MAX_MESSAGE_CHARS, MAX_SHOWN_CHARS, FieldError, cut, invalid_message


class StatusCause(TypedDict, total=False):
    reason: str
    message: str
    field: str


class StatusDetails(TypedDict, total=False):
    name: str
    group: str
    kind: str
    causes: list[StatusCause]
    retryAfterSeconds: int


class Status(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: dict[str, Any]
    status: str
    message: str
    reason: str
    details: StatusDetails
    code: int


# What kube-apiserver says of a path it does not serve and of a method a path does not take
# (apierrors.NewGenericServerResponse): every port of ours says the same.
NOT_FOUND = "the server could not find the requested resource"
NOT_ALLOWED = "the server does not allow this method on the requested resource"

# The reason Kubernetes gives for each HTTP code it answers with (apimachinery's StatusReason).
REASON_BY_CODE = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def failure(code: int, message: str, *, reason: str | None = None, details: StatusDetails | None = None) -> Status:
    """A Failure Status with the reason Kubernetes uses for ``code`` unless one is given; its
    message cut past MAX_MESSAGE_CHARS, so no answer grows with what a caller sent."""
    status: Status = {
        "apiVersion": "v1",
        "kind": "Status",
        "metadata": {},
        "status": "Failure",
        "message": cut(message, MAX_MESSAGE_CHARS),
        "reason": reason or REASON_BY_CODE.get(code, "Unknown"),
        "code": code,
    }
    if details:
        status["details"] = details
    return status


def causes(errors: list[FieldError]) -> list[StatusCause]:
    return [{"reason": e.type.value, "message": e.body(), "field": e.field} for e in errors]


def invalid(name: str, errors: list[FieldError], *, kind: str, group: str) -> Status:
    """422 Invalid with one cause per field error, as apierrors.NewInvalid builds it."""
    return failure(
        422,
        invalid_message(name, errors, kind=kind, group=group),
        details={"name": cut(name, MAX_SHOWN_CHARS), "group": group, "kind": kind, "causes": causes(errors)},
    )


def success() -> Status:
    return {"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Success", "code": 200}
