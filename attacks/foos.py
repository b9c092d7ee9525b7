"""Foos and review bodies shaped like the ones kube-apiserver really sends (metadata, managedFields, status)."""

from __future__ import annotations

import json
from typing import Any

from fooapi import HUB_API_VERSION, LEGACY_API_VERSION, convert

_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def _metadata(name: str, namespace: str, uid: str, generation: int) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": namespace,
        "uid": uid,
        "resourceVersion": str(1000 + generation),
        "generation": generation,
        "creationTimestamp": "2026-11-23T12:00:00Z",
        "labels": {"app.kubernetes.io/name": "example", "team": "bench"},
        "managedFields": [
            {
                "manager": "kubectl-client-side-apply",
                "operation": "Update",
                "apiVersion": HUB_API_VERSION,
                "time": "2026-11-23T12:00:00Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {
                    "f:metadata": {
                        "f:annotations": {".": {}, f"f:{_LAST_APPLIED}": {}},
                        "f:labels": {".": {}, "f:app.kubernetes.io/name": {}, "f:team": {}},
                    },
                    "f:spec": {".": {}, "f:deployment": {".": {}, "f:name": {}}, "f:replicas": {}},
                },
            }
        ],
    }


def new_foo(i: int = 0, *, namespace: str = "default", defaulted: bool = False) -> dict[str, Any]:
    """A v1 Foo as `kubectl apply` creates it: no image, no replicas unless ``defaulted``."""
    name = f"foo-{i:05d}"
    spec: dict[str, Any] = {"deployment": {"name": name}}
    if defaulted:
        spec = {"deployment": {"name": name, "image": "nginx:latest"}, "replicas": 1}
    foo: dict[str, Any] = {
        "apiVersion": HUB_API_VERSION,
        "kind": "Foo",
        "metadata": _metadata(name, namespace, f"00000000-0000-4000-8000-{i:012d}", 1),
        "spec": spec,
    }
    applied = {
        "apiVersion": HUB_API_VERSION,
        "kind": "Foo",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"deployment": {"name": name}},
    }
    foo["metadata"]["annotations"] = {_LAST_APPLIED: json.dumps(applied, separators=(",", ":")) + "\n"}
    return foo


def stored_foo(i: int = 0, *, namespace: str = "default") -> dict[str, Any]:
    """A v1 Foo as the apiserver stores it once defaulted and reconciled (status with conditions)."""
    foo = new_foo(i, namespace=namespace, defaulted=True)
    conditions = [
        {
            "type": kind,
            "status": "True",
            "observedGeneration": 1,
            "lastTransitionTime": "2026-11-23T12:00:05Z",
            "reason": reason,
            "message": message,
        }
        for kind, reason, message in (
            ("Ready", "DeploymentReady", "1/1 replicas ready"),
            ("Progressing", "NewReplicaSetAvailable", "rollout complete"),
        )
    ]
    foo["status"] = {
        "observedGeneration": 1,
        "replicas": 1,
        "readyReplicas": 1,
        "availableReplicas": 1,
        "conditions": conditions,
    }
    return foo


def bad_foo(i: int = 0) -> dict[str, Any]:
    """A v1 Foo with two field errors (name not a DNS subdomain, replicas above 10)."""
    foo = new_foo(i)
    foo["spec"] = {"deployment": {"name": "Not_A_DNS_Name"}, "replicas": 11}
    return foo


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


def create_review(foo: dict[str, Any]) -> dict[str, Any]:
    return admission_review(foo, name=foo["metadata"]["name"], uid="705ab4f5-6393-11e8-b7cc-42010a800002")


def conversion_of(count: int, desired: str = LEGACY_API_VERSION) -> dict[str, Any]:
    """One ConversionReview of ``count`` stored Foos, as a list at ``desired`` makes the apiserver send."""
    source = stored_foo if desired != HUB_API_VERSION else _stored_legacy
    return conversion_review([source(i) for i in range(count)], desired, uid="d5d6b40b-1a27-4ad5-b2b4-2a1d2c3c4e5f")


def _stored_legacy(i: int) -> dict[str, Any]:
    return convert(stored_foo(i), LEGACY_API_VERSION)


def dumps(body: Any) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()
