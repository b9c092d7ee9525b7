"""The CustomResourceDefinition of Foo, generated from the pydantic models (one source of truth)."""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel

from .defaults import DEFAULT_IMAGE
from .models import FooV1, FooV1alpha1
from .names import CRD_NAME, GROUP, HUB_VERSION, KIND, LEGACY_API_VERSION, LEGACY_VERSION, PLURAL, SHORT_NAMES, SINGULAR
from .validation import deprecation_warnings

# *.k8s.io groups are protected; sample-controller's own CRD carries this same annotation.
API_APPROVAL = (
    "unapproved, experimental-only; please get an approval from Kubernetes API reviewers if you're "
    "trying to develop a CRD in the *.k8s.io or *.kubernetes.io groups"
)

# Keys of a JSON schema that a structural CRD schema keeps: shape, bounds, defaults, CEL rules.
_KEPT = {
    "type",
    "description",
    "format",
    "enum",
    "items",
    "properties",
    "required",
    "minimum",
    "maximum",
    "maxLength",
    "pattern",
    "default",
    "x-kubernetes-validations",
}


def _structural(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """pydantic's JSON schema → a structural OpenAPI v3 schema: refs inlined, optionals unwrapped.

    `null` branches are dropped rather than marked nullable: the apiserver then prunes explicit
    nulls, which defaulting treats as absent anyway.
    """
    if "$ref" in schema:
        schema = {**defs[schema["$ref"].rsplit("/", 1)[1]], **{k: v for k, v in schema.items() if k != "$ref"}}
    if "anyOf" in schema:
        branches = [b for b in schema["anyOf"] if b.get("type") != "null"]
        if len(branches) != 1:
            raise ValueError(f"cannot express union {schema['anyOf']} in a structural schema")
        schema = {**_structural(branches[0], defs), **{k: v for k, v in schema.items() if k != "anyOf"}}
    out = {k: v for k, v in schema.items() if k in _KEPT}
    if out.get("default", 0) is None:
        del out["default"]  # pydantic's "absent" is no default at all, not a null one
    if "const" in schema:
        out["type"] = "string"
    if "properties" in out:
        out["properties"] = {k: _structural(v, defs) for k, v in out["properties"].items()}
        out["type"] = "object"
    if "items" in out:
        out["items"] = _structural(out["items"], defs)
    return out


def openapi_schema(model: type[BaseModel], *, default_image: str = DEFAULT_IMAGE) -> dict[str, Any]:
    """The CRD openAPIV3Schema of a Foo model; in v1 the image defaults to ``default_image``."""
    raw = model.model_json_schema(by_alias=True)
    schema = _structural(raw, raw.get("$defs", {}))
    schema["properties"]["metadata"] = {"type": "object"}
    schema["properties"]["apiVersion"] = {"type": "string", "description": "The versioned schema of this object."}
    schema["properties"]["kind"] = {"type": "string", "description": "The REST resource this object represents."}
    schema.pop("required", None)
    image = schema["properties"]["spec"]["properties"].get("deployment", {}).get("properties", {}).get("image")
    if image is not None:
        image["default"] = default_image  # the chart's value, not the model's: it is a knob
    conditions = schema["properties"].get("status", {}).get("properties", {}).get("conditions")
    if conditions is not None:
        conditions["x-kubernetes-list-type"] = "map"
        conditions["x-kubernetes-list-map-keys"] = ["type"]
    return schema


def _column(name: str, path: str, type_: str = "string", description: str = "", priority: int = 0) -> dict[str, Any]:
    column: dict[str, Any] = {"name": name, "type": type_, "jsonPath": path}
    if description:
        column["description"] = description
    if priority:
        column["priority"] = priority
    return column


_AGE = _column("Age", ".metadata.creationTimestamp", "date")


def _version(name: str, model: type[BaseModel], *, storage: bool, default_image: str) -> dict[str, Any]:
    if name == HUB_VERSION:
        deployment_path = ".spec.deployment.name"
        status_replicas = ".status.replicas"
        columns = [
            _column("Deployment", deployment_path, description="The Deployment this Foo owns"),
            _column("Replicas", ".spec.replicas", "integer", "Desired replicas"),
            _column("Available", ".status.availableReplicas", "integer", "Available replicas"),
            _column("Ready", '.status.conditions[?(@.type=="Ready")].status', description="Ready condition"),
            _AGE,
            _column("Image", ".spec.deployment.image", description="Container image", priority=1),
        ]
    else:
        deployment_path = ".spec.deploymentName"
        status_replicas = ".status.availableReplicas"
        columns = [
            _column("Deployment", deployment_path, description="The Deployment this Foo owns"),
            _column("Replicas", ".spec.replicas", "integer", "Desired replicas"),
            _column("Available", ".status.availableReplicas", "integer", "Available replicas"),
            _AGE,
        ]
    version: dict[str, Any] = {
        "name": name,
        "served": True,
        "storage": storage,
        "schema": {"openAPIV3Schema": openapi_schema(model, default_image=default_image)},
        "subresources": {
            "status": {},
            "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": status_replicas},
        },
        "additionalPrinterColumns": columns,
    }
    if not storage and name == LEGACY_VERSION:
        version["deprecated"] = True
        version["deprecationWarning"] = deprecation_warnings({"apiVersion": LEGACY_API_VERSION})[0]
    return version


def crd_manifest(
    *,
    conversion_client_config: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
    default_image: str = DEFAULT_IMAGE,
) -> dict[str, Any]:
    """The Foo CRD; with ``conversion_client_config`` ({url|service, caBundle}) it converts by webhook.

    ``default_image`` is the schema's default for ``spec.deployment.image``: the same value the
    mutating webhook fills, so a Foo reads the same whether the webhook or the schema defaulted it.

    Without a client config the CRD uses conversion strategy None, which only suits tests that
    never read v1alpha1.
    """
    conversion: dict[str, Any] = {"strategy": "None"}
    if conversion_client_config is not None:
        conversion = {
            "strategy": "Webhook",
            "webhook": {
                "clientConfig": copy.deepcopy(conversion_client_config),
                "conversionReviewVersions": ["v1"],
            },
        }
    metadata: dict[str, Any] = {"name": CRD_NAME, "annotations": {"api-approved.kubernetes.io": API_APPROVAL}}
    if labels:
        metadata["labels"] = dict(labels)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": metadata,
        "spec": {
            "group": GROUP,
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": list(SHORT_NAMES),
                "categories": ["all"],
            },
            "scope": "Namespaced",
            "versions": [
                _version(HUB_VERSION, FooV1, storage=True, default_image=default_image),
                _version(LEGACY_VERSION, FooV1alpha1, storage=False, default_image=default_image),
            ],
            "conversion": conversion,
        },
    }
