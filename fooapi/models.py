"""pydantic models of both Foo versions: typed access for code, and the CRD schema's source.

Models allow unknown fields (``extra="allow"``) so nothing a newer client sent is dropped when
an object passes through them. The bounds (replicas 1–10, a DNS-1123 deployment name that never
changes, an image in distribution/reference's grammar) are in the models and so in the CRD schema: a webhook that is skipped (an excluded
namespace, ``failurePolicy: Ignore``) leaves them standing. Users still read our messages first:
the mutating webhook runs before the apiserver checks the schema, and denies with every cause at
once what validation would deny (fooapi.admission).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from apimachinery.name_rules import DNS1123_SUBDOMAIN_FMT, DNS1123_SUBDOMAIN_MAX_LENGTH

from . import images
from .defaults import DEFAULT_REPLICAS
from .names import MAX_REPLICAS, MIN_REPLICAS

# A CEL transition rule: runs only when the object had the field before, so setting it is free
# and changing it is refused in the words our webhook uses.
IMMUTABLE: dict[str, Any] = {"x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "field is immutable"}]}


def _deployment_name(description: str) -> Any:
    return Field(
        None,
        description=description,
        max_length=DNS1123_SUBDOMAIN_MAX_LENGTH,
        pattern=f"^{DNS1123_SUBDOMAIN_FMT}$",
        json_schema_extra=IMMUTABLE,
    )


def _replicas(description: str) -> Any:
    return Field(
        None, description=description, ge=MIN_REPLICAS, le=MAX_REPLICAS, json_schema_extra={"default": DEFAULT_REPLICAS}
    )


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True, strict=True)


class ObjectMeta(_Model):
    """The subset of metadata Foo code reads; everything else is kept as extra."""

    name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    generation: int | None = None
    resource_version: str | None = Field(None, alias="resourceVersion")
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


class Condition(_Model):
    """A standard metav1.Condition."""

    type: str = Field(description="Type of condition in CamelCase: Ready or Progressing.")
    status: Literal["True", "False", "Unknown"] = Field(description="Status of the condition: True, False or Unknown.")
    observed_generation: int | None = Field(
        None, alias="observedGeneration", description="The .metadata.generation the condition was set from."
    )
    last_transition_time: str = Field(
        alias="lastTransitionTime",
        description="Last time the condition changed from one status to another.",
        json_schema_extra={"format": "date-time"},
    )
    reason: str = Field(description="A programmatic identifier in CamelCase for the last transition.")
    message: str = Field("", description="A human readable message about the last transition.")


class DeploymentTemplate(_Model):
    """What the Deployment owned by the Foo looks like."""

    name: str | None = _deployment_name(
        "Name of the Deployment the Foo owns. Required; a DNS-1123 subdomain; immutable."
    )
    image: str | None = Field(
        None,
        description="Container image of the nginx container, an image reference ([host[:port]/]name[:tag]"
        "[@digest]). Defaults to the operator's default image (nginx:latest unless configured).",
        max_length=images.MAX_LENGTH,
        pattern=images.REFERENCE_PATTERN,
    )


class FooSpecV1(_Model):
    """The desired state of a Foo."""

    deployment: DeploymentTemplate | None = Field(None, description="The Deployment this Foo owns.")
    replicas: int | None = _replicas("Number of replicas, 1 to 10. Defaults to 1.")


class FooStatusV1(_Model):
    """The observed state of a Foo, written by the controller."""

    observed_generation: int | None = Field(
        None, alias="observedGeneration", description="The .metadata.generation the controller last acted on."
    )
    replicas: int | None = Field(None, description="Replicas of the Deployment.")
    ready_replicas: int | None = Field(None, alias="readyReplicas", description="Ready replicas of the Deployment.")
    available_replicas: int | None = Field(
        None, alias="availableReplicas", description="Available replicas of the Deployment."
    )
    conditions: list[Condition] | None = Field(None, description="Ready and Progressing conditions.")


class FooV1(_Model):
    """Foo asks for an nginx Deployment with a name, an image and a number of replicas."""

    api_version: Literal["samplecontroller.k8s.io/v1"] = Field("samplecontroller.k8s.io/v1", alias="apiVersion")
    kind: Literal["Foo"] = "Foo"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: FooSpecV1 = Field(default_factory=FooSpecV1)
    status: FooStatusV1 | None = None


class FooSpecV1alpha1(_Model):
    """The desired state of a Foo (sample-controller's schema)."""

    deployment_name: str | None = Field(
        None,
        alias="deploymentName",
        description="Name of the Deployment the Foo owns. A DNS-1123 subdomain; immutable.",
        max_length=DNS1123_SUBDOMAIN_MAX_LENGTH,
        pattern=f"^{DNS1123_SUBDOMAIN_FMT}$",
        json_schema_extra=IMMUTABLE,
    )
    replicas: int | None = _replicas("Number of replicas, 1 to 10. Defaults to 1.")


class FooStatusV1alpha1(_Model):
    """The observed state of a Foo (sample-controller's schema)."""

    available_replicas: int | None = Field(
        None, alias="availableReplicas", description="Available replicas of the Deployment."
    )


class FooV1alpha1(_Model):
    """Foo (deprecated version v1alpha1, sample-controller's schema): use samplecontroller.k8s.io/v1."""

    api_version: Literal["samplecontroller.k8s.io/v1alpha1"] = Field(
        "samplecontroller.k8s.io/v1alpha1", alias="apiVersion"
    )
    kind: Literal["Foo"] = "Foo"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: FooSpecV1alpha1 = Field(default_factory=FooSpecV1alpha1)
    status: FooStatusV1alpha1 | None = None


MODEL_BY_VERSION: dict[str, type[FooV1] | type[FooV1alpha1]] = {"v1": FooV1, "v1alpha1": FooV1alpha1}


def parse(obj: dict[str, Any]) -> FooV1 | FooV1alpha1:
    """Typed view of a Foo dict of either version (raises pydantic.ValidationError)."""
    version = str(obj.get("apiVersion", "")).rpartition("/")[2]
    model = MODEL_BY_VERSION.get(version)
    if model is None:
        raise ValueError(f"unsupported apiVersion {obj.get('apiVersion')!r}")
    return model.model_validate(obj)
