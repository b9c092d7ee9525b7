"""The ConversionReview protocol (apiextensions.k8s.io/v1) around fooapi.convert."""

from __future__ import annotations

from typing import Any

from apimachinery.errors import MAX_MESSAGE_CHARS, cut
from apimachinery.review import review_request
from fooapi import API_VERSIONS, KIND, ConversionError, convert

CONVERSION_API_VERSION = "apiextensions.k8s.io/v1"


def _response(uid: str, converted: list[Any] | None, message: str | None) -> dict[str, Any]:
    response: dict[str, Any] = {"uid": uid}
    if message is None:
        response["convertedObjects"] = converted
        response["result"] = {"status": "Success"}
    else:
        response["convertedObjects"] = []
        # Cut: a message names the caller's values (a name, a kind), and must not grow with them.
        response["result"] = {"status": "Failure", "message": cut(message, MAX_MESSAGE_CHARS)}
    return {"apiVersion": CONVERSION_API_VERSION, "kind": "ConversionReview", "response": response}


def decode_uid(body: Any) -> str:
    """The request uid, or ValueError: without it there is no review to answer."""
    return review_request(body, "ConversionReview", CONVERSION_API_VERSION)[1]


def _where(index: int, obj: Any) -> str:
    metadata = obj.get("metadata") if isinstance(obj, dict) else None
    if isinstance(metadata, dict) and metadata.get("name"):
        return f"object {index} ({metadata.get('namespace', '')}/{metadata['name']})"
    return f"object {index}"


def review(body: dict[str, Any]) -> dict[str, Any]:
    """Convert every object of a decoded review, same count and order; a failure names the object."""
    uid = decode_uid(body)
    request = body["request"]
    desired = request.get("desiredAPIVersion")
    objects = request.get("objects")
    if desired not in API_VERSIONS:
        return _response(uid, None, f"cannot convert to {desired!r}: supported are {', '.join(API_VERSIONS)}")
    if not isinstance(objects, list):
        return _response(uid, None, "request.objects must be a list")
    converted: list[Any] = []
    append = converted.append
    for index, obj in enumerate(objects):
        try:
            if obj.get("kind") != KIND:
                raise ConversionError(f"kind must be {KIND}, got {obj.get('kind')!r}")
            append(convert(obj, desired))
        except ConversionError as err:
            return _response(uid, None, f"{_where(index, obj)}: {err}")
        except AttributeError:
            return _response(uid, None, f"{_where(index, obj)}: must be a JSON object")
        except (TypeError, ValueError) as err:
            # An object shaped in a way no rule foresaw is still the caller's input, not our crash.
            return _response(uid, None, f"{_where(index, obj)}: cannot be converted: {err}")
    return _response(uid, converted, None)
