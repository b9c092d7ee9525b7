"""Builders of the objects tests read and write: a valid object with only the differences a test names.

Every tier builds its Foos and Deployments here, so a test says what is special about its objects
and nothing else; the shapes (and sample-controller's conventions: a Deployment named
``<foo>-nginx``, owned through a controller reference) are written once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

V1 = "samplecontroller.k8s.io/v1"
V1ALPHA1 = "samplecontroller.k8s.io/v1alpha1"

# ``deployment=`` left out: the Deployment is named after the Foo, as in sample-controller's examples.
AFTER_THE_FOO: Any = object()


def _metadata(
    name: str,
    namespace: str,
    *,
    uid: str | None,
    generation: int | None,
    labels: Mapping[str, str] | None,
    resource_version: str | None,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    optional = {
        "uid": uid,
        "generation": generation,
        "labels": dict(labels) if labels is not None else None,
        "resourceVersion": resource_version,
    }
    metadata.update((key, value) for key, value in optional.items() if value is not None)
    return metadata


def foo_v1(
    name: str = "example",
    *,
    namespace: str = "default",
    deployment: Any = AFTER_THE_FOO,
    image: Any = None,
    replicas: Any = 2,
    uid: str | None = None,
    generation: int | None = None,
    labels: Mapping[str, str] | None = None,
    resource_version: str | None = None,
    status: dict[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A v1 Foo; ``None`` leaves a field out (what defaulting or validation is then asked about)."""
    spec: dict[str, Any] = {"replicas": replicas} if replicas is not None else {}
    dep: dict[str, Any] = {}
    if deployment is not None:
        dep["name"] = f"{name}-nginx" if deployment is AFTER_THE_FOO else deployment
    if image is not None:
        dep["image"] = image
    if dep:
        spec["deployment"] = dep
    foo: dict[str, Any] = {
        "apiVersion": V1,
        "kind": "Foo",
        "metadata": _metadata(
            name, namespace, uid=uid, generation=generation, labels=labels, resource_version=resource_version
        ),
        "spec": spec,
    }
    if status is not None:
        foo["status"] = status
    return {**foo, **extra}


def foo_v1alpha1(
    name: str = "example", *, deployment: Any = AFTER_THE_FOO, replicas: Any = 2, **extra: Any
) -> dict[str, Any]:
    """A v1alpha1 Foo, sample-controller's own schema (``deploymentName``, no image)."""
    spec: dict[str, Any] = {}
    if deployment is not None:
        spec["deploymentName"] = f"{name}-nginx" if deployment is AFTER_THE_FOO else deployment
    if replicas is not None:
        spec["replicas"] = replicas
    return {
        "apiVersion": V1ALPHA1,
        "kind": "Foo",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
        **extra,
    }


def controller_reference(foo: Mapping[str, Any]) -> dict[str, Any]:
    """The ownerReference the controller puts on the Deployment of ``foo``."""
    metadata = foo["metadata"]
    return {
        "apiVersion": foo.get("apiVersion", V1),
        "kind": "Foo",
        "name": metadata["name"],
        "uid": metadata.get("uid", f"uid-{metadata['name']}"),
        "controller": True,
    }


def deployment(
    name: str = "example-nginx",
    *,
    namespace: str = "default",
    owner: Mapping[str, Any] | None = None,
    replicas: int = 1,
    generation: int | None = None,
    status: dict[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A Deployment, controlled by ``owner`` (a Foo) when one is given; ``status`` as the test says."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if generation is not None:
        metadata["generation"] = generation
    if owner is not None:
        metadata["ownerReferences"] = [controller_reference(owner)]
    built: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": {"replicas": replicas},
    }
    if status is not None:
        built["status"] = status
    return {**built, **extra}


def deployment_of(foo: Mapping[str, Any], *, status: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """The Deployment ``foo`` asks for, controlled by it, at the Foo's replicas."""
    return deployment(
        foo["spec"]["deployment"]["name"],
        namespace=foo["metadata"]["namespace"],
        owner=foo,
        replicas=foo["spec"].get("replicas", 1),
        status=status,
        **extra,
    )


# ---- a tenant's large objects (issue #34): what the caches must not hold whole ---------------------


def fat_metadata(
    *, labels: int, annotation_bytes: int = 0, owner_references: int = 0, prefix: str = "tenant.example.com"
) -> dict[str, Any]:
    """Metadata a tenant may legally make large: ``labels`` labels of ~70 bytes (keys and values
    valid), one annotation of ``annotation_bytes`` (the apiserver allows 256 KiB of annotations in
    all), and ``owner_references`` references to made-up owners, none of them a controller."""
    metadata: dict[str, Any] = {
        "labels": {f"{prefix}/label-{i:05d}": f"value-{i:05d}-{'v' * 24}" for i in range(labels)}
    }
    if annotation_bytes:
        metadata["annotations"] = {f"{prefix}/ballast": "x" * annotation_bytes}
    if owner_references:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "name": f"owner-{i:05d}",
                "uid": f"00000000-0000-4000-8000-{i:012d}",
            }
            for i in range(owner_references)
        ]
    return metadata


def fat_foo(
    name: str = "fat",
    *,
    namespace: str = "default",
    labels: int = 9_000,
    annotation_bytes: int = 200 * 1024,
    **extra: Any,
) -> dict[str, Any]:
    """A valid v1 Foo of ~0.8 MiB as sent, ~1.2 MiB as stored (its managedFields name every label;
    etcd refuses more than 1.5 MiB): what both webhooks and the CRD schema accept, and what a
    tenant with Foo rights may store."""
    foo = foo_v1(name, namespace=namespace, replicas=1, **extra)
    foo["metadata"].update(fat_metadata(labels=labels, annotation_bytes=annotation_bytes))
    return foo


def fat_deployment(
    name: str = "fat",
    *,
    namespace: str = "default",
    labels: int = 9_000,
    annotation_bytes: int = 200 * 1024,
    owner_references: int = 0,
) -> dict[str, Any]:
    """A valid apps/v1 Deployment of ~0.8 MiB as sent (~1.2 MiB stored) that no Foo controls, at 0 replicas (no Pods):
    what anyone who may create Deployments can store. ``owner_references`` to owners that do not
    exist are removed by the garbage collector where kube-controller-manager runs."""
    pod_labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "namespace": namespace,
            **fat_metadata(labels=labels, annotation_bytes=annotation_bytes, owner_references=owner_references),
        },
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": pod_labels},
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": {"containers": [{"name": "nginx", "image": "nginx:latest"}]},
            },
        },
    }
