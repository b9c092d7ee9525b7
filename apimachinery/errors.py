"""Field errors in Kubernetes' shape (k8s.io/apimachinery/pkg/util/validation/field)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum
from typing import Any

import orjson


class CauseType(str, Enum):
    """The `reason` of a Status cause, exactly as Kubernetes spells it."""

    REQUIRED = "FieldValueRequired"
    INVALID = "FieldValueInvalid"
    NOT_SUPPORTED = "FieldValueNotSupported"
    DUPLICATE = "FieldValueDuplicate"
    FORBIDDEN = "FieldValueForbidden"
    TOO_LONG = "FieldValueTooLong"
    TYPE_INVALID = "FieldValueTypeInvalid"


_PREFIX = {
    CauseType.REQUIRED: "Required value",
    CauseType.INVALID: "Invalid value",
    CauseType.NOT_SUPPORTED: "Unsupported value",
    CauseType.DUPLICATE: "Duplicate value",
    CauseType.FORBIDDEN: "Forbidden",
    CauseType.TOO_LONG: "Too long",
    CauseType.TYPE_INVALID: "Invalid value",
}

# Types whose message shows the offending value, as Kubernetes' ErrorBody does.
_SHOWS_VALUE = {CauseType.INVALID, CauseType.NOT_SUPPORTED, CauseType.DUPLICATE, CauseType.TYPE_INVALID}

_NO_VALUE = object()

# The longest string value a field error shows: past it the value is cut, as apimachinery's
# TooLong leaves a too-long value out ("<value omitted>"), so that an error answer does not grow
# with the request (a 3 MiB name was shown in full four times, escaped twice: a 36 MiB answer).
# 256 shows any value of a length Kubernetes accepts in a name (253) in full.
MAX_SHOWN_CHARS = 256
# The longest message a Status carries: a few field errors, each with its value cut, fit.
MAX_MESSAGE_CHARS = 4096


def cut(text: str, limit: int) -> str:
    """``text``, or its first ``limit`` characters and how many more there were."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters)"


def shown(text: str) -> str:
    """A caller's string as a message shows it: quoted, and cut past MAX_SHOWN_CHARS."""
    if len(text) <= MAX_SHOWN_CHARS:
        return _quoted(text)
    return f"{_quoted(text[:MAX_SHOWN_CHARS])}... ({len(text) - MAX_SHOWN_CHARS} more characters)"


def _quoted(text: str) -> str:
    """``json.dumps(text, ensure_ascii=False)``, the same characters at a seventh of its cost
    (an invalid review quotes three values; json builds an encoder for each)."""
    try:
        return orjson.dumps(text).decode()
    except orjson.JSONEncodeError:  # a lone surrogate, which orjson will not write
        return json.dumps(text, ensure_ascii=False)


def _render_value(value: Any) -> str:
    """Render a bad value like Go's %#v would for JSON-ish values: strings quoted, long ones cut."""
    if isinstance(value, str):
        return shown(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    text = json.dumps(value, ensure_ascii=False, default=str, sort_keys=True)
    # A huge value would drown the message the user needs to read.
    return text if len(text) <= 80 else text[:77] + "..."


@dataclass(frozen=True)
class FieldError:
    """One problem with one field: what kind, where, the bad value and why."""

    type: CauseType
    field: str
    detail: str = ""
    value: Any = _NO_VALUE

    def body(self) -> str:
        """The message without the field path (Kubernetes' ErrorBody)."""
        text = _PREFIX[self.type]
        if self.type in _SHOWS_VALUE and self.value is not _NO_VALUE:
            text = f"{text}: {_render_value(self.value)}"
        if self.detail:
            text = f"{text}: {self.detail}"
        return text

    def __str__(self) -> str:
        return f"{self.field}: {self.body()}"


def required(field: str, detail: str = "") -> FieldError:
    return FieldError(CauseType.REQUIRED, field, detail)


def invalid(field: str, value: Any, detail: str) -> FieldError:
    return FieldError(CauseType.INVALID, field, detail, value)


def type_invalid(field: str, value: Any, detail: str) -> FieldError:
    return FieldError(CauseType.TYPE_INVALID, field, detail, value)


def too_long(field: str, limit: int) -> FieldError:
    return FieldError(CauseType.TOO_LONG, field, f"must have at most {limit} bytes")


def aggregate_message(errors: list[FieldError]) -> str:
    """`a` for one error, `[a, b]` for several, like apimachinery's aggregate."""
    if len(errors) == 1:
        return str(errors[0])
    return "[" + ", ".join(str(e) for e in errors) + "]"


def invalid_message(name: str, errors: list[FieldError], *, kind: str, group: str) -> str:
    """`Foo.samplecontroller.k8s.io "x" is invalid: ...` — what apierrors.NewInvalid says."""
    qualified = f"{kind}.{group}" if group else kind
    return f"{qualified} {shown(name)} is invalid: {aggregate_message(errors)}"
