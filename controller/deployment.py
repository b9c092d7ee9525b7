"""The Deployment a Foo asks for and the smallest patch that fixes drift.

Pure functions over dicts, reading the Foo and the Deployment through ``fooapi.views`` (which
also says who controls a Deployment). For an unchanged Foo ``desired_deployment`` is exactly what
sample-controller's ``newDeployment`` writes, so the pod template — and with it the
pod-template-hash — is identical and switching controllers restarts no Pod.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import fooapi
from apimachinery.objects import Object
from fooapi.defaults import DEFAULT_IMAGE
from fooapi.views import APP_LABEL, DeploymentView, FooView

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


def drift_patch(
    raw_foo: Mapping[str, Any], deployment: Mapping[str, Any], *, default_image: str = DEFAULT_IMAGE
) -> Object | None:
    """A strategic merge patch setting only replicas and the nginx container's image, or None.

    Containers merge by name, so the patch leaves every other field of the pod template alone.
    A Deployment without an ``nginx`` container gets no image patch: adding one would rewrite
    the template of a Deployment someone reshaped by hand.
    """
    foo = FooView(raw_foo)
    current = DeploymentView(deployment)
    spec: Object = {}
    replicas = foo.replicas
    if current.replicas != replicas:
        spec["replicas"] = replicas
    container = current.container(CONTAINER_NAME)
    image = desired_image(foo, default_image)
    if container is not None and container.get("image") != image:
        spec["template"] = {"spec": {"containers": [{"name": CONTAINER_NAME, "image": image}]}}
    return {"spec": spec} if spec else None
