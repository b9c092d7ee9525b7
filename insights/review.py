"""FooReview: admission as a dry-run API. The verdict comes from the admission rules themselves.

A review runs the same chain the apiserver does for a write: convert the Foo to v1 (what
`matchPolicy: Equivalent` hands the webhooks), ask ``mutate_foo`` for its patch and apply it,
then ask ``validate_foo`` with the version the user sent as the request version. Nothing here
knows a Foo rule; a rule changed in fooapi changes reviews too.
"""

from __future__ import annotations

import copy
from typing import Any

from apimachinery.admission import AdmissionRequest, Outcome
from apimachinery.errors import CauseType, FieldError, invalid, required
from apimachinery.objects import Object
from apimachinery.status import Status, failure
from apimachinery.status import invalid as invalid_status
from fooapi import API_VERSIONS, CRD_NAME, GROUP, HUB_API_VERSION, KIND, ConversionError, convert
from fooapi.admission import mutate_foo, validate_foo

from .resources import FOO_REVIEWS, GROUP_VERSION
from .resources import GROUP as INSIGHTS_GROUP

OPERATIONS = ("CREATE", "UPDATE")


class ReviewError(Exception):
    """The FooReview itself is malformed (not the Foo in it): answer with this Status."""

    def __init__(self, status: Status) -> None:
        super().__init__(status.get("message", ""))
        self.status = status


def apply_patch(document: Any, patch: list[Object]) -> Any:
    """Apply the add/replace/remove JSONPatch ``admission.json_patch`` produces (object keys only)."""
    document = copy.deepcopy(document)
    for op in patch:
        tokens = [t.replace("~1", "/").replace("~0", "~") for t in op["path"].split("/")[1:]]
        if not tokens:
            document = copy.deepcopy(op.get("value"))
            continue
        parent = document
        for token in tokens[:-1]:
            parent = parent[token]
        if op["op"] == "remove":
            del parent[tokens[-1]]
        else:
            parent[tokens[-1]] = copy.deepcopy(op["value"])
    return document


def _spec_errors(review: Object, namespace: str) -> tuple[Object, list[FieldError]]:
    spec = review.get("spec")
    if not isinstance(spec, dict):
        return {}, [required("spec", "a FooReview needs spec.object, the Foo to review")]
    errors: list[FieldError] = []
    operation = spec.get("operation", "CREATE")
    if operation not in OPERATIONS:
        supported = ", ".join(f'"{o}"' for o in OPERATIONS)
        errors.append(
            FieldError(CauseType.NOT_SUPPORTED, "spec.operation", f"supported values: {supported}", operation)
        )
    for field in ("object", "oldObject"):
        obj = spec.get(field)
        if obj is None:
            if field == "object" or operation == "UPDATE":
                errors.append(required(f"spec.{field}", "" if field == "object" else "an UPDATE compares with it"))
            continue
        if not isinstance(obj, dict):
            errors.append(invalid(f"spec.{field}", obj, "must be a Foo object"))
        elif obj.get("apiVersion") not in API_VERSIONS or obj.get("kind") != KIND:
            errors.append(
                invalid(
                    f"spec.{field}.apiVersion",
                    obj.get("apiVersion"),
                    f"must be a Foo of {' or '.join(API_VERSIONS)}, got kind {obj.get('kind')!r}",
                )
            )
        else:
            foo_namespace = (
                (obj.get("metadata") or {}).get("namespace") if isinstance(obj.get("metadata"), dict) else None
            )
            if foo_namespace not in (None, "", namespace):
                errors.append(
                    invalid(f"spec.{field}.metadata.namespace", foo_namespace, "must be the FooReview's namespace")
                )
    return spec, errors


def _in_namespace(foo: Object, namespace: str) -> Object:
    metadata = foo.get("metadata")
    metadata = dict(metadata) if isinstance(metadata, dict) else {}
    metadata["namespace"] = namespace
    return {**foo, "metadata": metadata}


def _admission_request(operation: str, foo: Object, old: Object | None, request_version: str) -> AdmissionRequest:
    metadata: Object = foo["metadata"] if isinstance(foo.get("metadata"), dict) else {}
    return AdmissionRequest(
        uid="fooreview",
        operation=operation,
        group=GROUP,
        version="v1",
        kind=KIND,
        resource=CRD_NAME,
        sub_resource="",
        request_version=request_version,
        name=str(metadata.get("name") or ""),
        namespace=str(metadata.get("namespace") or ""),
        object=foo,
        old_object=old,
        dry_run=True,
        raw={},
    )


def _verdict(outcome: Outcome, obj: Object | None, patch: list[Object], warnings: list[str]) -> Object:
    status: Object = {"allowed": outcome.allowed}
    if obj is not None:
        status["object"] = obj
    if patch:
        status["patch"] = patch
    all_warnings = list(dict.fromkeys([*warnings, *outcome.warnings]))
    if all_warnings:
        status["warnings"] = all_warnings
    if outcome.status is not None:
        denial = outcome.status
        status["code"] = denial.get("code", 403)
        status["reason"] = denial.get("reason", "")
        status["message"] = denial.get("message", "")
        causes = (denial.get("details") or {}).get("causes")
        if causes:
            status["causes"] = causes
    return status


def review(body: Any, namespace: str, *, default_image: str) -> Object:
    """The FooReview ``body`` answered: same metadata and spec, plus the verdict in status.

    Raises ReviewError (400 or 422) when the review itself is malformed; a bad Foo is a verdict.
    """
    if not isinstance(body, dict):
        raise ReviewError(failure(400, "body must be a JSON object holding a FooReview"))
    if body.get("apiVersion") != GROUP_VERSION or body.get("kind") != FOO_REVIEWS.kind:
        raise ReviewError(
            failure(
                400,
                f"expected kind {FOO_REVIEWS.kind} of apiVersion {GROUP_VERSION}, "
                f"got kind {body.get('kind')!r} of apiVersion {body.get('apiVersion')!r}",
            )
        )
    metadata: Object = body["metadata"] if isinstance(body.get("metadata"), dict) else {}
    if metadata.get("namespace") not in (None, "", namespace):
        raise ReviewError(
            failure(400, "the namespace of the provided object does not match the namespace sent on the request")
        )
    spec, errors = _spec_errors(body, namespace)
    if errors:
        raise ReviewError(
            invalid_status(str(metadata.get("name") or ""), errors, kind=FOO_REVIEWS.kind, group=INSIGHTS_GROUP)
        )
    operation = spec.get("operation", "CREATE")
    sent = _in_namespace(spec["object"], namespace)
    request_version = str(sent["apiVersion"]).rpartition("/")[2]
    warnings: list[str] = []
    try:
        foo = convert(sent, HUB_API_VERSION)
        old = convert(_in_namespace(spec["oldObject"], namespace), HUB_API_VERSION) if operation == "UPDATE" else None
    except ConversionError as err:
        denied = Outcome(False, failure(400, f"conversion to {HUB_API_VERSION} failed: {err}"))
        return _answer(body, metadata, namespace, _verdict(denied, None, [], warnings))
    mutation = mutate_foo(_admission_request(operation, foo, old, request_version), image=default_image)
    if not mutation.allowed:
        return _answer(body, metadata, namespace, _verdict(mutation, foo, [], warnings))
    defaulted = apply_patch(foo, mutation.patch)
    warnings += mutation.warnings
    validation = validate_foo(_admission_request(operation, defaulted, old, request_version))
    return _answer(body, metadata, namespace, _verdict(validation, defaulted, mutation.patch, warnings))


def _answer(body: Object, metadata: Object, namespace: str, status: Object) -> Object:
    out_meta = {**metadata, "namespace": namespace}
    out_meta.setdefault("creationTimestamp", None)
    return {
        "apiVersion": GROUP_VERSION,
        "kind": FOO_REVIEWS.kind,
        "metadata": out_meta,
        "spec": body.get("spec"),
        "status": status,
    }
