"""The Deployment a Foo asks for, who owns a Deployment, and the smallest patch that fixes drift.

Pure functions over dicts, reading the Foo through ``fooapi.views``. For an unchanged Foo ``desired_deployment`` is exactly what
sample-controller's ``newDeployment`` writes, so the pod template — and with it the
pod-template-hash — is identical and switching controllers restarts no Pod.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import fooapi
from fooapi.defaults import DEFAULT_IMAGE
from fooapi.views import APP_LABEL, FooView, Object
from kube.informer import controller_ref

CONTAINER_NAME = APP_LABEL  # sample-controller names the container as it labels the Pods


def desired_image(foo: FooView, default_image: str = DEFAULT_IMAGE) -> str:
    return foo.image or default_image


def controller_ref_to(foo: FooView) -> Object:
    """metav1.NewControllerRef(foo, samplecontroller.k8s.io/v1 Foo)."""
    return {
        "apiVersion": fooapi.HUB_API_VERSION,
        "kind": fooapi.KIND,
        "name": foo.name,
        "uid": foo.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def desired_deployment(raw_foo: Mapping[str, Any], *, default_image: str = DEFAULT_IMAGE) -> Object:
    """sample-controller's ``newDeployment(foo)``, with the Foo's image and replicas."""
    foo = FooView(raw_foo)
    selector = foo.pod_labels
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": foo.deployment_name,
            "namespace": foo.namespace,
            "ownerReferences": [controller_ref_to(foo)],
        },
        "spec": {
            "replicas": foo.replicas,
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
    uid = FooView(foo).uid
    return ref is not None and uid is not None and ref.get("uid") == uid


def nginx_container(deployment: Mapping[str, Any]) -> Object | None:
    containers = ((((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers")) or []
    for container in containers:
        if isinstance(container, dict) and container.get("name") == CONTAINER_NAME:
            return container
    return None


def drift_patch(
    raw_foo: Mapping[str, Any], deployment: Mapping[str, Any], *, default_image: str = DEFAULT_IMAGE
) -> Object | None:
    """A strategic merge patch setting only replicas and the nginx container's image, or None.

    Containers merge by name, so the patch leaves every other field of the pod template alone.
    A Deployment without an ``nginx`` container gets no image patch: adding one would rewrite
    the template of a Deployment someone reshaped by hand.
    """
    foo = FooView(raw_foo)
    spec: Object = {}
    replicas = foo.replicas
    current_replicas = (deployment.get("spec") or {}).get("replicas", 1)
    if current_replicas != replicas:
        spec["replicas"] = replicas
    container = nginx_container(deployment)
    image = desired_image(foo, default_image)
    if container is not None and container.get("image") != image:
        spec["template"] = {"spec": {"containers": [{"name": CONTAINER_NAME, "image": image}]}}
    return {"spec": spec} if spec else None
