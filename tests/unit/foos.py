"""Builders of Foo objects for tests: a valid object with only the differences a test names."""

from __future__ import annotations

from typing import Any

V1 = "samplecontroller.k8s.io/v1"
V1ALPHA1 = "samplecontroller.k8s.io/v1alpha1"


def foo_v1(name: str = "example", *, deployment: Any = "example-nginx", image: Any = None,
           replicas: Any = 2, **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"replicas": replicas} if replicas is not None else {}
    dep: dict[str, Any] = {}
    if deployment is not None:
        dep["name"] = deployment
    if image is not None:
        dep["image"] = image
    if dep:
        spec["deployment"] = dep
    return {"apiVersion": V1, "kind": "Foo", "metadata": {"name": name, "namespace": "default"}, "spec": spec, **extra}


def foo_v1alpha1(name: str = "example", *, deployment: Any = "example-nginx", replicas: Any = 2,
                 **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if deployment is not None:
        spec["deploymentName"] = deployment
    if replicas is not None:
        spec["replicas"] = replicas
    return {"apiVersion": V1ALPHA1, "kind": "Foo", "metadata": {"name": name, "namespace": "default"},
            "spec": spec, **extra}
