"""OpenAPI v2 and v3 of insights.samplecontroller.k8s.io: what `kubectl explain` and validation read.

Schemas are written once, with `$ref`s in a neutral form, then rendered for each version
(`#/definitions/` in v2, `#/components/schemas/` in v3). Every top-level kind carries
`x-kubernetes-group-version-kind`, which is how kubectl finds a schema for a resource.
"""

from __future__ import annotations

import copy
import hashlib
from functools import cache
from typing import Any

import orjson

from apimachinery.bodies import JSON
from apimachinery.objects import Object
from fooapi.crd import openapi_schema
from fooapi.models import FooV1

from .media import YAML
from .resources import FOO_HEALTHS, FOO_REVIEWS, GROUP, VERSION

META = "io.k8s.apimachinery.pkg.apis.meta.v1"
OWN = "io.k8s.samplecontroller.insights." + VERSION
OBJECT_META, LIST_META = f"{META}.ObjectMeta", f"{META}.ListMeta"
V3_PATH = f"apis/{GROUP}/{VERSION}"
_REF = "#/ref/"


def _ref(name: str, description: str = "") -> Object:
    # A $ref cannot carry a description in OpenAPI; Kubernetes wraps it in allOf for that.
    if description:
        return {"allOf": [{"$ref": _REF + name}], "description": description, "default": {}}
    return {"$ref": _REF + name}


def _string(description: str, **extra: Any) -> Object:
    return {"type": "string", "description": description, **extra}


def _integer(description: str) -> Object:
    return {"type": "integer", "format": "int32", "description": description}


def _object(description: str, properties: Object, required: list[str] | None = None) -> Object:
    out: Object = {"type": "object", "description": description, "properties": properties}
    if required:
        out["required"] = required
    return out


def _gvk(kind: str) -> list[Object]:
    return [{"group": GROUP, "version": VERSION, "kind": kind}]


_API_VERSION = _string("APIVersion defines the versioned schema of this representation of an object.")
_KIND = _string("Kind is a string value representing the REST resource this object represents.")


def _top(kind: str, description: str, properties: Object) -> Object:
    schema = _object(
        description,
        {
            "apiVersion": _API_VERSION,
            "kind": _KIND,
            "metadata": _ref(OBJECT_META, "Standard object's metadata."),
            **properties,
        },
    )
    schema["x-kubernetes-group-version-kind"] = _gvk(kind)
    return schema


def _list(kind: str, item: str) -> Object:
    schema = _object(
        f"{kind} is a list of {item}.",
        {
            "apiVersion": _API_VERSION,
            "kind": _KIND,
            "metadata": _ref(LIST_META, "Standard list metadata."),
            "items": {"type": "array", "description": f"The {item}s.", "items": _ref(f"{OWN}.{item}", "")},
        },
        ["items"],
    )
    schema["x-kubernetes-group-version-kind"] = _gvk(kind)
    return schema


_TIME = {"format": "date-time"}

_FOO_HEALTH_STATUS = _object(
    "What the cluster says about the Foo right now.",
    {
        "health": _string(
            "One word: Healthy, Progressing, Degraded, Unavailable or Unknown.",
            enum=["Healthy", "Progressing", "Degraded", "Unavailable", "Unknown"],
        ),
        "deploymentName": _string("Name of the Deployment the Foo owns."),
        "image": _string("Container image the Foo asks for."),
        "desiredReplicas": _integer("Replicas the Foo asks for."),
        "replicas": _integer("Replicas of the Deployment (Pods it targets)."),
        "updatedReplicas": _integer("Replicas updated to the Deployment's newest template."),
        "readyReplicas": _integer("Ready replicas of the Deployment."),
        "availableReplicas": _integer("Available replicas of the Deployment."),
        "rollout": _string(
            "The Deployment's rollout, judged as `kubectl rollout status` does: Complete, Progressing, "
            "Stalled (progress deadline exceeded), Pending (not yet observed), Missing, or NotOwned "
            "(a Deployment of that name exists but another owner has it).",
            enum=["Complete", "Progressing", "Stalled", "Pending", "Missing", "NotOwned"],
        ),
        "rolloutMessage": _string("The rollout state in words."),
        "synced": {
            "type": "boolean",
            "description": "True when the controller has acted on the Foo's latest generation.",
        },
        "generation": _integer("The Foo's metadata.generation."),
        "observedGeneration": _integer("The generation the controller last acted on."),
        "lastSyncTime": _string(
            "When the controller last synced the Foo successfully (Synced event or Ready=True).", **_TIME
        ),
        "lastError": _object(
            "The most pressing current error, or the newest Warning not followed by a good sync.",
            {
                "reason": _string("Machine-readable reason, such as ErrResourceExists or CrashLoopBackOff."),
                "message": _string("What went wrong, in words."),
                "source": _string("Where it was seen: Foo (condition), Deployment, Pod or Event."),
                "time": _string("When it was seen.", **_TIME),
            },
        ),
        "pods": _object(
            "The Foo's Pods (label controller=<foo>).",
            {
                "total": _integer("Pods."),
                "ready": _integer("Ready Pods."),
                "pending": _integer("Pending Pods."),
                "failed": _integer("Failed Pods."),
                "restarts": _integer("Container restarts summed over the Pods."),
            },
        ),
    },
)

_EMBEDDED_FOO = {"type": "object", "x-kubernetes-preserve-unknown-fields": True, "x-kubernetes-embedded-resource": True}


def _schemas() -> dict[str, Object]:
    foo_v1 = openapi_schema(FooV1)
    foo_v1["description"] = "The Foo after defaulting, at samplecontroller.k8s.io/v1, as admission would store it."
    foo_v1["x-kubernetes-embedded-resource"] = True
    foo_v1["x-kubernetes-preserve-unknown-fields"] = True
    return {
        f"{OWN}.{FOO_HEALTHS.kind}": _top(
            FOO_HEALTHS.kind,
            "FooHealth is the live health of one Foo, computed from the Foo, its Deployment, Pods and Events. "
            "It has the Foo's name, namespace and labels, and is read-only.",
            {"status": _FOO_HEALTH_STATUS},
        ),
        f"{OWN}.{FOO_HEALTHS.kind}List": _list(f"{FOO_HEALTHS.kind}List", FOO_HEALTHS.kind),
        f"{OWN}.{FOO_REVIEWS.kind}": _top(
            FOO_REVIEWS.kind,
            "FooReview asks what admission would decide about a Foo, without storing anything: the defaulted "
            "v1 object, the field errors and the warnings. Create it with `kubectl create -f review.yaml -o yaml`.",
            {
                "spec": _object(
                    "The Foo to review.",
                    {
                        "object": {
                            **_EMBEDDED_FOO,
                            "description": "The Foo, at samplecontroller.k8s.io/v1 or v1alpha1.",
                        },
                        "oldObject": {
                            **_EMBEDDED_FOO,
                            "description": "The stored Foo, for operation UPDATE (checks immutable fields).",
                        },
                        "operation": _string("CREATE (default) or UPDATE.", enum=["CREATE", "UPDATE"]),
                    },
                    ["object"],
                ),
                "status": _object(
                    "The verdict, filled by the server.",
                    {
                        "allowed": {"type": "boolean", "description": "Whether admission would accept the Foo."},
                        "object": foo_v1,
                        "patch": {
                            "type": "array",
                            "description": "The JSONPatch the mutating webhook would send.",
                            "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                        },
                        "warnings": {
                            "type": "array",
                            "description": "Warnings the user would see.",
                            "items": {"type": "string"},
                        },
                        "message": _string("Why the Foo is denied, as the user would read it."),
                        "reason": _string("The Status reason of a denial, such as Invalid."),
                        "code": _integer("The HTTP code admission would answer with."),
                        "causes": {
                            "type": "array",
                            "description": "One cause per invalid field.",
                            "items": _object(
                                "A field error.",
                                {
                                    "reason": _string("The cause type, such as FieldValueInvalid."),
                                    "message": _string("What is wrong with the field."),
                                    "field": _string("The field path, such as spec.replicas."),
                                },
                            ),
                        },
                    },
                ),
            },
        ),
        OBJECT_META: _object(
            "Standard object metadata.",
            {
                "name": _string("Name of the object, unique within a namespace."),
                "generateName": _string("Prefix the server uses to generate a name when none is given."),
                "namespace": _string("Namespace of the object."),
                "uid": _string("Unique identifier of the object."),
                "resourceVersion": _string("Opaque version of the object, for optimistic concurrency and watches."),
                "generation": {"type": "integer", "format": "int64", "description": "Generation of the desired state."},
                "creationTimestamp": _string("When the object was created.", **_TIME),
                "labels": {
                    "type": "object",
                    "description": "Labels of the object.",
                    "additionalProperties": {"type": "string", "default": ""},
                },
                "annotations": {
                    "type": "object",
                    "description": "Annotations of the object.",
                    "additionalProperties": {"type": "string", "default": ""},
                },
            },
        ),
        LIST_META: _object(
            "Standard list metadata.",
            {
                "resourceVersion": _string("The version of the list, to watch from."),
                "continue": _string("Token to ask for the next page of a limited list."),
                "remainingItemCount": {
                    "type": "integer",
                    "format": "int64",
                    "description": "How many more items there are after this page.",
                },
            },
        ),
    }


def _render(node: Any, prefix: str) -> Any:
    if isinstance(node, dict):
        return {
            k: (prefix + v[len(_REF) :] if k == "$ref" and isinstance(v, str) else _render(v, prefix))
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_render(v, prefix) for v in node]
    return node


def _v2_schema(node: Any) -> Any:
    """Kubernetes' v2 documents keep `$ref`s bare (v2 allows no siblings next to `$ref`)."""
    if isinstance(node, dict):
        if "allOf" in node:
            return {**node["allOf"][0]}
        return {k: _v2_schema(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_v2_schema(v) for v in node]
    return node


# ---- paths: kubectl finds a resource's kind through the x-kubernetes-group-version-kind of its operations

_PREFIX = f"/apis/{GROUP}/{VERSION}"
_QUERY = {
    "labelSelector": "A selector to restrict the list of returned objects by their labels.",
    "fieldSelector": "A selector on metadata.name and metadata.namespace.",
    "limit": "Maximum number of items to return; a continue token follows when there are more.",
    "continue": "The continue token of the previous page.",
    "resourceVersion": "With watch: the version to stream changes from.",
    "resourceVersionMatch": "How resourceVersion applies (NotOlderThan with sendInitialEvents).",
    "watch": "Stream ADDED, MODIFIED and DELETED events, one JSON object per line.",
    "allowWatchBookmarks": "Ask for BOOKMARK events in a watch.",
    "sendInitialEvents": "Start a watch with every current object as ADDED, then a BOOKMARK.",
    "timeoutSeconds": "How long a watch may run.",
}
_WRITE_QUERY = {
    "dryRun": "Accepted and ignored: a FooReview never stores anything.",
    "fieldManager": "Accepted and ignored: a FooReview never stores anything.",
    "fieldValidation": "Accepted and ignored.",
}
_TYPES = {
    "limit": "integer",
    "timeoutSeconds": "integer",
    "watch": "boolean",
    "allowWatchBookmarks": "boolean",
    "sendInitialEvents": "boolean",
}


def _parameter(name: str, where: str, description: str, v3: bool) -> Object:
    type_ = _TYPES.get(name, "string")
    out: Object = {"name": name, "in": where, "description": description, "required": where == "path"}
    if v3:
        out["schema"] = {"type": type_}
    else:
        out["type"] = type_
    return out


def _operation(
    action: str,
    kind: str,
    operation_id: str,
    description: str,
    response: str,
    *,
    v3: bool,
    path_params: tuple[str, ...],
    query: dict[str, str],
    code: str = "200",
) -> Object:
    ref = {"$ref": ("#/components/schemas/" if v3 else "#/definitions/") + f"{OWN}.{response}"}
    operation: Object = {
        "description": description,
        "operationId": operation_id,
        "tags": [f"insights_{VERSION}"],
        "parameters": [
            *(_parameter(p, "path", f"The {p} of the object.", v3) for p in path_params),
            *(_parameter(n, "query", d, v3) for n, d in query.items()),
        ],
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {"group": GROUP, "version": VERSION, "kind": kind},
    }
    if v3:
        operation["responses"] = {code: {"description": "OK", "content": {JSON: {"schema": ref}}}}
        if action == "post":
            operation["requestBody"] = {"content": {JSON: {"schema": ref}}, "required": True}
    else:
        operation["responses"] = {code: {"description": "OK", "schema": ref}}
        operation["produces"] = [JSON, YAML, f"{JSON};stream=watch"]
        operation["schemes"] = ["https"]
        if action == "post":
            operation["parameters"].insert(0, {"name": "body", "in": "body", "required": True, "schema": ref})
            operation["consumes"] = [JSON]
    return operation


def _paths(v3: bool) -> Object:
    health, review = FOO_HEALTHS.kind, FOO_REVIEWS.kind
    return {
        f"{_PREFIX}/{FOO_HEALTHS.name}": {
            "get": _operation(
                "list",
                health,
                f"list{health}ForAllNamespaces",
                "list or watch FooHealths of every namespace",
                f"{health}List",
                v3=v3,
                path_params=(),
                query=_QUERY,
            )
        },
        f"{_PREFIX}/namespaces/{{namespace}}/{FOO_HEALTHS.name}": {
            "get": _operation(
                "list",
                health,
                f"listNamespaced{health}",
                "list or watch the FooHealths of a namespace",
                f"{health}List",
                v3=v3,
                path_params=("namespace",),
                query=_QUERY,
            )
        },
        f"{_PREFIX}/namespaces/{{namespace}}/{FOO_HEALTHS.name}/{{name}}": {
            "get": _operation(
                "get",
                health,
                f"readNamespaced{health}",
                "read the FooHealth of a Foo",
                health,
                v3=v3,
                path_params=("namespace", "name"),
                query={},
            )
        },
        f"{_PREFIX}/namespaces/{{namespace}}/{FOO_REVIEWS.name}": {
            "post": _operation(
                "post",
                review,
                f"createNamespaced{review}",
                "review a Foo as admission would, storing nothing",
                review,
                v3=v3,
                path_params=("namespace",),
                query=_WRITE_QUERY,
                code="201",
            )
        },
    }


@cache
def openapi_v2() -> bytes:
    definitions = {name: _v2_schema(_render(schema, "#/definitions/")) for name, schema in _schemas().items()}
    return orjson.dumps(
        {
            "swagger": "2.0",
            "info": {"title": "foo-operator insights", "version": VERSION},
            "paths": _paths(v3=False),
            "definitions": definitions,
        }
    )


@cache
def openapi_v3_group_version() -> bytes:
    return orjson.dumps(
        {
            "openapi": "3.0.0",
            "info": {"title": "foo-operator insights", "version": VERSION},
            "paths": _paths(v3=True),
            "components": {"schemas": _render(copy.deepcopy(_schemas()), "#/components/schemas/")},
        }
    )


def etag(document: bytes) -> str:
    """The hash Kubernetes puts in serverRelativeURL and ETag: uppercase hex SHA-512."""
    return hashlib.sha512(document).hexdigest().upper()


def openapi_v3_index() -> Object:
    """`/openapi/v3`: the group-versions this server owns, each with a content-addressed URL."""
    url = f"/openapi/v3/{V3_PATH}?hash={etag(openapi_v3_group_version())}"
    return {"paths": {V3_PATH: {"serverRelativeURL": url}}}


__all__ = ["V3_PATH", "etag", "openapi_v2", "openapi_v3_group_version", "openapi_v3_index"]
