"""Read-only views of Foos and of the Deployments they own, and the facts the controller and
insights share about them: labels and index names.

They sit on apimachinery.objects' ObjectView: no copy, no validation per event, and a field of
the wrong type reads as absent, which is what the controller and insights want of a cache.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from apimachinery.objects import ObjectView, integer, mapping, namespaced_key, optional_integer, text
from apimachinery.projection import LABELS_DROPPED, REFUSED, notes_of

from .defaults import DEFAULT_REPLICAS
from .names import GROUP, KIND

# The label the controller (like sample-controller) puts on its Deployments' Pods: the Foo's name.
POD_LABEL = "controller"
# sample-controller's other Pod label and container name; kept so its Pods are ours unchanged.
APP_LABEL = "nginx"
# Index on Foo stores: Foos by the Deployment they name, "<namespace>/<spec.deployment.name>".
BY_DEPLOYMENT = "deployment"


class FooView(ObjectView):
    """A v1 Foo (the hub: what the controller and insights cache and read)."""

    __slots__ = ()

    @property
    def spec(self) -> Mapping[str, Any]:
        return mapping(self.raw.get("spec"))

    @property
    def deployment_name(self) -> str | None:
        """``spec.deployment.name``: required by validation, so None only for a Foo that slipped past it."""
        return text(mapping(self.spec.get("deployment")).get("name"))

    @property
    def replicas(self) -> int:
        """``spec.replicas``, with the schema's default where a Foo has none."""
        return integer(self.spec.get("replicas"), DEFAULT_REPLICAS)

    @property
    def image(self) -> str | None:
        """``spec.deployment.image`` (v1); None leaves the choice to the operator's default image."""
        return text(mapping(self.spec.get("deployment")).get("image"))

    @property
    def status(self) -> Mapping[str, Any]:
        return mapping(self.raw.get("status"))

    @property
    def observed_generation(self) -> int | None:
        return optional_integer(self.status.get("observedGeneration"))

    @property
    def refused(self) -> str | None:
        """Why this Foo must not be acted on: a field it asks with was past the cache's bound
        (``fooapi.projections``), in field-error words; None for every Foo that fits."""
        return text(notes_of(self.raw).get(REFUSED))

    @property
    def labels_dropped(self) -> int:
        """How many of the Foo's labels its cached projection did not keep."""
        return integer(notes_of(self.raw).get(LABELS_DROPPED))

    @property
    def pod_labels(self) -> dict[str, str]:
        """The labels of the Pods this Foo's Deployment runs (and its selector)."""
        return {"app": APP_LABEL, POD_LABEL: self.name}


# A Deployment's ``spec.replicas`` when it has none (apps/v1 defaulting).
DEPLOYMENT_DEFAULT_REPLICAS = 1


class DeploymentView(ObjectView):
    """An apps/v1 Deployment, read where the controller and insights read it: its owner, its
    wanted replicas, the nginx container's image and the counts and conditions it reports."""

    __slots__ = ()

    @property
    def spec(self) -> Mapping[str, Any]:
        return mapping(self.raw.get("spec"))

    @property
    def replicas(self) -> int:
        """``spec.replicas``, defaulted as the apiserver does."""
        return integer(self.spec.get("replicas"), DEPLOYMENT_DEFAULT_REPLICAS)

    def container(self, name: str) -> Mapping[str, Any] | None:
        """The pod template's container called ``name``, if any."""
        containers = mapping(mapping(self.spec.get("template")).get("spec")).get("containers")
        for container in containers if isinstance(containers, list) else ():
            if isinstance(container, Mapping) and container.get("name") == name:
                return container
        return None

    @property
    def status(self) -> Mapping[str, Any]:
        return mapping(self.raw.get("status"))

    @property
    def observed_generation(self) -> int:
        return integer(self.status.get("observedGeneration"))

    @property
    def status_replicas(self) -> int:
        return integer(self.status.get("replicas"))

    @property
    def ready_replicas(self) -> int:
        return integer(self.status.get("readyReplicas"))

    @property
    def available_replicas(self) -> int:
        return integer(self.status.get("availableReplicas"))

    @property
    def updated_replicas(self) -> int:
        return integer(self.status.get("updatedReplicas"))

    def condition(self, type_: str) -> Mapping[str, Any] | None:
        """The status condition of ``type_`` (Progressing, Available, ReplicaFailure), if reported."""
        conditions = self.status.get("conditions")
        for condition in conditions if isinstance(conditions, list) else ():
            if isinstance(condition, Mapping) and condition.get("type") == type_:
                return condition
        return None

    @property
    def controlling_foo(self) -> str | None:
        """The name of the Foo whose controller reference this carries (of any Foo version), if any."""
        ref = self.controller_reference
        return text(ref.get("name")) if ref is not None and is_foo_reference(ref) else None

    def controlled_by(self, foo: FooView) -> bool:
        """metav1.IsControlledBy: the controller ownerReference carries the Foo's uid.

        Only the uid counts: sample-controller's references say ``v1alpha1`` and are still ours,
        and a Foo deleted and re-created under the same name is another Foo.
        """
        ref = self.controller_reference
        return ref is not None and foo.uid is not None and ref.get("uid") == foo.uid


def deployment_index(foo: Mapping[str, Any]) -> list[str]:
    """Index function on Foo stores (``BY_DEPLOYMENT``): the key of the Deployment the Foo names."""
    view = FooView(foo)
    name = view.deployment_name
    return [namespaced_key(view.namespace, name)] if name and view.namespace else []


def pod_foo_index(pod: Mapping[str, Any]) -> list[str]:
    """Index function on Pod stores: the key of the Foo whose controller labelled the Pod."""
    view = ObjectView(pod)
    foo_name = text(view.labels.get(POD_LABEL))
    return [namespaced_key(view.namespace, foo_name)] if foo_name else []


def is_foo_reference(ref: Mapping[str, Any]) -> bool:
    """An ownerReference to a Foo of any version (sample-controller's say ``v1alpha1``)."""
    return ref.get("kind") == KIND and str(ref.get("apiVersion", "")).partition("/")[0] == GROUP
