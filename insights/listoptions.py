"""What a FooHealth read asks for: resourceVersion, resourceVersionMatch, limit and continue.

Pure, and worded as kube-apiserver words it: the ListOptions validation of apimachinery (422
Invalid, `ListOptions.meta.k8s.io "" is invalid: ...`), then the storage layer's checks (400
BadRequest: `invalid resource version: ...`, `invalid continue token: ...`). A resourceVersion is
Go's strconv.ParseUint(rv, 10, 64): ASCII decimal digits only, so `²` or `٣` (digits to Python's
str.isdigit and int) are refused like `abc`. Everything here is decided before an answer's head
is sent.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import orjson

from apimachinery.errors import CauseType, FieldError
from apimachinery.labels import go_quote, parse_int64
from apimachinery.status import Status, failure, invalid

Match = Literal["", "Exact", "NotOlderThan"]
_MATCHES: tuple[Match, ...] = ("Exact", "NotOlderThan", "")
_MAX_UINT64 = (1 << 64) - 1
_TOKEN_VERSION = "meta.k8s.io/v1"
_BASE64URL = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
# A continue token of kube-apiserver with rv -1 asks for the rest of the list at the latest
# version: what the 410 of an expired token offers.
LATEST = -1


class OptionsError(Exception):
    """The request's options are wrong: ``status`` is the answer."""

    def __init__(self, status: Status) -> None:
        super().__init__(status.get("message", ""))
        self.status = status


def _bad_request(message: str) -> OptionsError:
    return OptionsError(failure(400, message))


def parse_resource_version(value: str) -> int:
    """strconv.ParseUint(value, 10, 64); "" and "0" are 0. OptionsError with kube's 400 otherwise."""
    if value in ("", "0"):
        return 0
    if not value.isascii() or not value.isdigit():
        problem = "invalid syntax"
    elif int(value) > _MAX_UINT64:
        problem = "value out of range"
    else:
        return int(value)
    raise _bad_request(
        f"invalid resource version: resourceVersion: Invalid value: {go_quote(value)}: "
        f"strconv.ParseUint: parsing {go_quote(value)}: {problem}"
    )


@dataclass(frozen=True)
class Continue:
    """Where a paged list goes on: the first key not yet sent, in the snapshot at ``resource_version``."""

    resource_version: int  # LATEST: at whatever version is current
    start: str

    def encode(self) -> str:
        """As storage.EncodeContinue: base64url (no padding) of {"v","rv","start"}."""
        raw = orjson.dumps({"v": _TOKEN_VERSION, "rv": self.resource_version, "start": self.start})
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    @classmethod
    def decode(cls, token: str) -> Continue:
        try:
            raw = base64.b64decode(token + "=" * (-len(token) % 4), altchars=b"-_", validate=True)
        except (binascii.Error, ValueError):
            at = next((i for i, c in enumerate(token) if c not in _BASE64URL), len(token))
            raise _bad_request(
                f"invalid continue token: continue key is not valid: illegal base64 data at input byte {at}"
            ) from None
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise _bad_request("invalid continue token: continue key is not valid: not a JSON object") from None
        if not isinstance(data, dict) or data.get("v") != _TOKEN_VERSION:
            version = data.get("v", "") if isinstance(data, dict) else ""
            raise _bad_request(
                "invalid continue token: continue key is not valid: server does not recognize this encoded "
                f"version {version}"
            )
        rv, start = data.get("rv"), data.get("start")
        if not isinstance(rv, int) or isinstance(rv, bool) or rv == 0 or rv < LATEST:
            raise _bad_request(
                "invalid continue token: continue key is not valid: incorrect encoded start resourceVersion "
                "(version meta.k8s.io/v1)"
            )
        if not isinstance(start, str) or not start:
            raise _bad_request(
                "invalid continue token: continue key is not valid: encoded start key empty (version meta.k8s.io/v1)"
            )
        return cls(rv, start)


def _forbidden(detail: str) -> FieldError:
    return FieldError(CauseType.FORBIDDEN, "resourceVersionMatch", detail)


def _invalid_options(errors: list[FieldError]) -> OptionsError:
    status = invalid("", errors, kind="ListOptions", group="meta.k8s.io")
    status["details"].pop("name", None)  # apimachinery omits the empty name
    return OptionsError(status)


@dataclass(frozen=True)
class Read:
    """Which state of the FooHealths a list or get answers from.

    ``exact``: the state at ``resource_version`` exactly (410 when no longer held); otherwise
    the current state, once it is at least ``resource_version`` (0: any).
    """

    resource_version: int = 0
    exact: bool = False


@dataclass(frozen=True)
class ListOptions:
    read: Read
    limit: int = 0  # 0: everything
    continue_from: Continue | None = None


def _limit(query: Mapping[str, str]) -> int:
    raw = query.get("limit", "")
    if raw == "":
        return 0
    value = parse_int64(raw)
    if value is None:
        problem = (
            "value out of range" if raw.lstrip("+-").isascii() and raw.lstrip("+-").isdigit() else "invalid syntax"
        )
        raise _bad_request(f"strconv.ParseInt: parsing {go_quote(raw)}: {problem}")
    return max(value, 0)


def list_options(query: Mapping[str, str]) -> ListOptions:
    """A list's options, checked in kube-apiserver's order (validation, then storage's checks)."""
    limit = _limit(query)
    rv, match, token = (
        query.get("resourceVersion", ""),
        query.get("resourceVersionMatch", ""),
        query.get("continue", ""),
    )
    errors: list[FieldError] = []
    if match:
        if not rv:
            errors.append(_forbidden("resourceVersionMatch is forbidden unless resourceVersion is provided"))
        if token:
            errors.append(_forbidden("resourceVersionMatch is forbidden when continue is provided"))
        if match not in _MATCHES:
            supported = ", ".join(f'"{m}"' for m in _MATCHES)
            errors.append(
                FieldError(CauseType.NOT_SUPPORTED, "resourceVersionMatch", f"supported values: {supported}", match)
            )
        if match == "Exact" and rv == "0":
            errors.append(_forbidden('resourceVersionMatch "exact" is forbidden for resourceVersion "0"'))
    if "sendInitialEvents" in query:
        errors.append(FieldError(CauseType.FORBIDDEN, "sendInitialEvents", "sendInitialEvents is forbidden for list"))
    if errors:
        raise _invalid_options(errors)
    if token:
        continue_from = Continue.decode(token)
        if rv not in ("", "0"):
            raise _bad_request("specifying resource version is not allowed when using continue")
        if continue_from.resource_version == LATEST:
            return ListOptions(Read(), limit, continue_from)
        return ListOptions(Read(continue_from.resource_version, exact=True), limit, continue_from)
    version = parse_resource_version(rv)
    # As storage.ValidateListOptions: Exact, or (the legacy case) a version with a limit, reads
    # that version exactly; anything else reads the current state once it is at least as new.
    exact = version > 0 and (match == "Exact" or (match == "" and limit > 0))
    return ListOptions(Read(version, exact=exact), limit)


def get_read(query: Mapping[str, str]) -> Read:
    """A get's resourceVersion: "" or "0" any state, R a state at least as new as R."""
    return Read(parse_resource_version(query.get("resourceVersion", "")))


def watch_read(query: Mapping[str, str]) -> Read:
    """A watch's resourceVersion, after apimachinery's watch validation of resourceVersionMatch."""
    match, errors = query.get("resourceVersionMatch", ""), []
    if "sendInitialEvents" in query and match != "NotOlderThan":
        errors.append(_forbidden("sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"))
    if match:
        if "sendInitialEvents" not in query:
            errors.append(
                _forbidden("resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided")
            )
        if match != "NotOlderThan":
            errors.append(
                FieldError(CauseType.NOT_SUPPORTED, "resourceVersionMatch", 'supported values: "NotOlderThan"', match)
            )
        if query.get("continue"):
            errors.append(_forbidden("resourceVersionMatch is forbidden when continue is provided"))
    if errors:
        raise _invalid_options(errors)
    return get_read(query)
