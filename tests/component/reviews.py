"""Builders of AdmissionReview and ConversionReview bodies as the kube-apiserver sends them."""

from __future__ import annotations

import base64
import json
from typing import Any


def admission_review(
    obj: Any,
    *,
    operation: str = "CREATE",
    old: Any = None,
    uid: str = "uid-1",
    version: str = "v1",
    request_version: str | None = None,
    sub_resource: str = "",
    group: str = "samplecontroller.k8s.io",
    resource: str = "foos",
    kind: str = "Foo",
    name: str = "example",
) -> dict[str, Any]:
    request: dict[str, Any] = {
        "uid": uid,
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": resource},
        "requestKind": {"group": group, "version": request_version or version, "kind": kind},
        "name": name,
        "namespace": "default",
        "operation": operation,
        "userInfo": {"username": "admin"},
        "object": obj,
        "dryRun": False,
    }
    if sub_resource:
        request["subResource"] = sub_resource
    if old is not None:
        request["oldObject"] = old
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def conversion_review(objects: list[Any], desired: str, uid: str = "conv-1") -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {"uid": uid, "desiredAPIVersion": desired, "objects": objects},
    }


def decoded_patch(response: dict[str, Any]) -> list[dict[str, Any]]:
    return json.loads(base64.b64decode(response["patch"]))
