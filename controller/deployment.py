"""The Deployment a Foo asks for, who owns a Deployment, and the smallest patch that fixes drift.

Pure functions over dicts. For an unchanged Foo ``desired_deployment`` is exactly what
sample-controller's ``newDeployment`` writes, so the pod template — and with it the
pod-template-hash — is identical and switching controllers restarts no Pod.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import fooapi
from fooapi.defaults import DEFAULT_IMAGE, DEFAULT_REPLICAS
from kube.informer import controller_ref

CONTAINER_NAME = "nginx"
APP_LABEL = "nginx"

Object = dict[str, Any]


def deployment_name(foo: Mapping[str, Any]) -> str | None:
    deployment = (foo.get("spec") or {}).get("deployment") or {}
    name = deployment.get("name") if isinstance(deployment, dict) else None
    return name if isinstance(name, str) and name else None


def desired_replicas(foo: Mapping[str, Any]) -> int:
    replicas = (foo.get("spec") or {}).get("replicas")
    return replicas if isinstance(replicas, int) and not isinstance(replicas, bool) else DEFAULT_REPLICAS


def desired_image(foo: Mapping[str, Any], default_image: str = DEFAULT_IMAGE) -> str:
    deployment = (foo.get("spec") or {}).get("deployment") or {}
    image = deployment.get("image") if isinstance(deployment, dict) else None
    return image if isinstance(image, str) and image else default_image


def labels(foo: Mapping[str, Any]) -> dict[str, str]:
    return {"app": APP_LABEL, "controller": foo["metadata"]["name"]}


def controller_ref_to(foo: Mapping[str, Any]) -> Object:
    """metav1.NewControllerRef(foo, samplecontroller.k8s.io/v1 Foo)."""
    meta = foo["metadata"]
    return {
        "apiVersion": fooapi.HUB_API_VERSION,
        "kind": fooapi.KIND,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def desired_deployment(foo: Mapping[str, Any], *, default_image: str = DEFAULT_IMAGE) -> Object:
    """sample-controller's ``newDeployment(foo)``, with the Foo's image and replicas."""
    meta = foo["metadata"]
    selector = labels(foo)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": deployment_name(foo),
            "namespace": meta["namespace"],
            "ownerReferences": [controller_ref_to(foo)],
        },
        "spec": {
            "replicas": desired_replicas(foo),
            "selector": {"matchLabels": dict(selector)},
            "template": {
                "metadata": {"labels": dict(selector)},
                "spec": {"containers": [{"name": CONTAINER_NAME, "image": desired_image(foo, default_image)}]},
            },
        },
    }


def is_controlled_by(obj: Mapping[str, Any], foo: Mapping[str, Any]) -> bool:
    """metav1.IsControlledBy: the controller ownerReference carries the Foo's uid.

    Only the uid counts: sample-controller's references say ``v1alpha1`` and are still ours.
    """
    ref = controller_ref(obj)
    uid = (foo.get("metadata") or {}).get("uid")
    return ref is not None and bool(uid) and ref.get("uid") == uid


def nginx_container(deployment: Mapping[str, Any]) -> Object | None:
    containers = ((((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers")) or []
    for container in containers:
        if isinstance(container, dict) and container.get("name") == CONTAINER_NAME:
            return container
    return None


def drift_patch(foo: Mapping[str, Any], deployment: Mapping[str, Any], *, default_image: str = DEFAULT_IMAGE) -> Object | None:
    """A strategic merge patch setting only replicas and the nginx container's image, or None.

    Containers merge by name, so the patch leaves every other field of the pod template alone.
    A Deployment without an ``nginx`` container gets no image patch: adding one would rewrite
    the template of a Deployment someone reshaped by hand.
    """
    spec: Object = {}
    replicas = desired_replicas(foo)
    current_replicas = (deployment.get("spec") or {}).get("replicas", 1)
    if current_replicas != replicas:
        spec["replicas"] = replicas
    container = nginx_container(deployment)
    image = desired_image(foo, default_image)
    if container is not None and container.get("image") != image:
        spec["template"] = {"spec": {"containers": [{"name": CONTAINER_NAME, "image": image}]}}
    return {"spec": spec} if spec else None
