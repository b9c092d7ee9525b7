"""What every review the apiserver sends shares: a kind, an apiVersion, and a request with a uid."""

from __future__ import annotations

from typing import Any


def review_request(body: Any, kind: str, api_version: str) -> tuple[dict[str, Any], str]:
    """(request, uid) of a ``kind`` review, or ValueError saying what the caller got wrong."""
    if not isinstance(body, dict):
        raise ValueError(f"body must be a JSON object holding a {kind}")
    if body.get("kind") != kind or body.get("apiVersion") != api_version:
        raise ValueError(
            f"expected kind {kind} of apiVersion {api_version}, "
            f"got kind {body.get('kind')!r} of apiVersion {body.get('apiVersion')!r}"
        )
    request = body.get("request")
    if not isinstance(request, dict):
        raise ValueError(f"{kind} has no request object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise ValueError("request.uid is missing: it must be echoed in the response")
    return request, uid
