"""What the controller and insights cache of a Foo and of a Deployment: the fields they read, bounded.

A tenant may store Foos and Deployments of a megabyte and more (labels, annotations, owner
references: the apiserver bounds none of them but by the object's size). The informers keep
these projections instead (``apimachinery.projection``), built as each object is decoded:

* a Foo: its identity, ``spec`` (deployment name, image, replicas), ``status`` (counts, the
  Ready and Progressing conditions), and with ``labels=True`` (insights: label selectors on
  foohealths) at most MAX_LABELS labels. No annotations (the ``conversion-data`` stash and
  kubectl's last-applied copy are read by neither), no managedFields, no ownerReferences. A
  deployment name or image past its bound is refused: the projection notes why and the
  controller reports it in the Foo's conditions and a Warning Event instead of acting on it.
* a Deployment: its identity and its controller reference alone (all ownership needs); the
  replicas, the nginx container's image and the status only when that reference is a Foo's.
  A Deployment no Foo controls costs its name and a reference, whatever it holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from apimachinery.name_rules import DNS1123_SUBDOMAIN_MAX_LENGTH
from apimachinery.objects import Object, mapping
from apimachinery.projection import (
    LABELS_DROPPED,
    MAX_MESSAGE,
    MAX_NAME,
    MAX_REASON,
    MAX_TOKEN,
    REFUSED,
    bounded_labels,
    bounded_text,
    controller_reference,
    cut,
    integers,
    noted,
    pick,
)

from .images import MAX_LENGTH as MAX_IMAGE_LENGTH  # validation refuses more; the caches keep no more
from .views import APP_LABEL, is_foo_reference

IDENTITY = {
    "name": MAX_NAME,
    "namespace": MAX_NAME,
    "uid": MAX_TOKEN,
    "resourceVersion": MAX_TOKEN,
    "generation": MAX_TOKEN,
    "creationTimestamp": MAX_TOKEN,
    "deletionTimestamp": MAX_TOKEN,
}
FOO_CONDITIONS = ("Ready", "Progressing")
CONDITION_FIELDS = {
    "type": MAX_TOKEN,
    "status": MAX_TOKEN,
    "reason": MAX_REASON,
    "message": MAX_MESSAGE,
    "lastTransitionTime": MAX_TOKEN,
}
FOO_CONDITION_FIELDS = {**CONDITION_FIELDS, "observedGeneration": MAX_TOKEN}  # metav1.Condition
FOO_COUNTS = ("observedGeneration", "replicas", "readyReplicas", "availableReplicas")
DEPLOYMENT_CONDITIONS = ("Progressing", "ReplicaFailure")
DEPLOYMENT_CONDITION_FIELDS = {**CONDITION_FIELDS, "lastUpdateTime": MAX_TOKEN}  # apps/v1 DeploymentCondition
DEPLOYMENT_COUNTS = ("observedGeneration", "replicas", "readyReplicas", "availableReplicas", "updatedReplicas")
CONTAINER_NAME = APP_LABEL  # the container the controller writes (sample-controller's name)


def conditions(status: Mapping[str, Any], types: tuple[str, ...], fields: Mapping[str, int]) -> list[Object]:
    """The first condition of each of ``types``, its fields cut to their bounds."""
    found: dict[str, Object] = {}
    listed = status.get("conditions")
    for condition in listed if isinstance(listed, list) else ():
        kind = mapping(condition).get("type")
        if kind in types and kind not in found:
            found[kind] = pick(condition, fields)
    return [found[kind] for kind in types if kind in found]


def _typed(obj: Mapping[str, Any], api_version: str, kind: str) -> Object:
    return {
        "apiVersion": cut(obj.get("apiVersion", api_version), MAX_NAME),
        "kind": cut(obj.get("kind", kind), MAX_NAME),
    }


def project_foo(foo: Mapping[str, Any], *, labels: bool = False) -> Object:
    """The bounded projection of a Foo (v1); ``labels`` keeps up to MAX_LABELS of its labels."""
    meta = mapping(foo.get("metadata"))
    projected_meta = pick(meta, IDENTITY)
    dropped = 0
    if labels:
        kept, dropped = bounded_labels(meta.get("labels"))
        if kept:
            projected_meta["labels"] = kept
    spec = mapping(foo.get("spec"))
    wanted = mapping(spec.get("deployment"))
    name, name_refused = bounded_text(wanted.get("name"), DNS1123_SUBDOMAIN_MAX_LENGTH, "spec.deployment.name")
    image, image_refused = bounded_text(wanted.get("image"), MAX_IMAGE_LENGTH, "spec.deployment.image")
    projected_spec: Object = {}
    if "replicas" in spec:
        projected_spec["replicas"] = cut(spec["replicas"], MAX_TOKEN)
    deployment = {key: value for key, value in (("name", name), ("image", image)) if value is not None}
    if deployment:
        projected_spec["deployment"] = deployment
    projected: Object = {**_typed(foo, "samplecontroller.k8s.io/v1", "Foo"), "metadata": projected_meta}
    if projected_spec:
        projected["spec"] = projected_spec
    status = mapping(foo.get("status"))
    if status:
        projected["status"] = {
            **integers(status, FOO_COUNTS),
            "conditions": conditions(status, FOO_CONDITIONS, FOO_CONDITION_FIELDS),
        }
    return noted(projected, {REFUSED: name_refused or image_refused, LABELS_DROPPED: dropped})


def project_deployment(deployment: Mapping[str, Any]) -> Object:
    """The bounded projection of an apps/v1 Deployment: all of it that ownership needs, and for
    one a Foo controls, what the controller and insights read of its spec and status."""
    meta = mapping(deployment.get("metadata"))
    projected_meta = pick(meta, IDENTITY)
    projected_meta.pop("creationTimestamp", None)
    reference = controller_reference(meta)
    projected: Object = {**_typed(deployment, "apps/v1", "Deployment"), "metadata": projected_meta}
    if reference is None:
        return projected
    projected_meta["ownerReferences"] = [reference]
    if not is_foo_reference(reference):
        return projected
    spec = mapping(deployment.get("spec"))
    container = _container(spec, CONTAINER_NAME)
    projected["spec"] = {
        **integers(spec, ("replicas",)),
        "template": {"spec": {"containers": [container] if container is not None else []}},
    }
    status = mapping(deployment.get("status"))
    if status:
        projected["status"] = {
            **integers(status, DEPLOYMENT_COUNTS),
            "conditions": conditions(status, DEPLOYMENT_CONDITIONS, DEPLOYMENT_CONDITION_FIELDS),
        }
    return projected


def _container(spec: Mapping[str, Any], name: str) -> Object | None:
    """The pod template's container ``name``: its name and image. An image longer than any a Foo
    may ask for is kept cut one character past that bound, so it never equals the Foo's and the
    controller reverts it as drift."""
    listed = mapping(mapping(spec.get("template")).get("spec")).get("containers")
    for container in listed if isinstance(listed, list) else ():
        if mapping(container).get("name") == name:
            return {"name": name, **pick(container, {"image": MAX_IMAGE_LENGTH + 1})}
    return None
