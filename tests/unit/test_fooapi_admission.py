"""The Foo admission rules (fooapi.admission): what /mutate-foo, /validate-foo and FooReview answer.

How a v1alpha1 write is judged as its v1 equivalent is tests/unit/test_admission_versions.py's.
"""

from __future__ import annotations

from typing import Any

from apimachinery import admission
from apimachinery.admission import AdmissionRequest, Outcome
from attacks.foos import admission_review
from attacks.objects import foo_v1
from fooapi.admission import mutate_foo, validate_foo
from fooapi.defaults import DEFAULT_IMAGE
from fooapi.names import MAX_REPLICAS

FOOS = "foos.samplecontroller.k8s.io"
IMAGE = "registry.example.com/team/app:v2"


def request(obj: Any, *, old: Any = None, operation: str | None = None, **review: Any) -> AdmissionRequest:
    """The request a review kube-apiserver sends is decoded to, as the webhook decodes it."""
    operation = operation or ("UPDATE" if old is not None else "CREATE")
    return admission.decode(admission_review(obj, old=old, operation=operation, **review))


def causes(outcome: Outcome) -> list[tuple[str, str]]:
    details = (outcome.status or {}).get("details") or {}
    return [(cause["reason"], cause["field"]) for cause in details.get("causes") or ()]


def message(outcome: Outcome) -> str:
    return str((outcome.status or {}).get("message", ""))


# --- /mutate-foo -------------------------------------------------------------------------------


def test_mutate_fills_replicas_and_the_image_with_the_smallest_patch() -> None:
    outcome = mutate_foo(request(foo_v1(replicas=None)), image=IMAGE)
    assert outcome.allowed
    assert sorted(outcome.patch, key=lambda op: op["path"]) == [
        {"op": "add", "path": "/spec/deployment/image", "value": IMAGE},
        {"op": "add", "path": "/spec/replicas", "value": 1},
    ]


def test_mutate_sends_no_patch_when_nothing_is_left_to_fill() -> None:
    outcome = mutate_foo(request(foo_v1(image=DEFAULT_IMAGE)), image=IMAGE)
    assert outcome.allowed and outcome.patch == []


def test_mutate_refuses_what_validate_refuses_with_the_same_status() -> None:
    bad = request(foo_v1(replicas=MAX_REPLICAS + 1, image=IMAGE))
    mutated, validated = mutate_foo(bad, image=IMAGE), validate_foo(bad)
    assert not mutated.allowed and mutated.code == 422
    assert mutated.status == validated.status


def test_mutate_drops_the_status_a_create_carries_as_the_apiserver_does() -> None:
    outcome = mutate_foo(request(foo_v1(image=IMAGE, status={"availableReplicas": 2})), image=IMAGE)
    assert outcome.allowed and outcome.patch == [{"op": "remove", "path": "/status"}]


def test_mutate_puts_the_old_status_back_on_a_main_resource_update() -> None:
    old = foo_v1(image=IMAGE, status={"availableReplicas": 2})
    outcome = mutate_foo(request(foo_v1(image=IMAGE, status={"availableReplicas": 9}), old=old), image=IMAGE)
    assert outcome.allowed and outcome.patch == [{"op": "replace", "path": "/status/availableReplicas", "value": 2}]


# --- /validate-foo -----------------------------------------------------------------------------


def test_validate_allows_a_well_formed_foo_without_warnings() -> None:
    outcome = validate_foo(request(foo_v1(image=IMAGE)))
    assert outcome.allowed and outcome.warnings == []


def test_validate_says_every_field_error_at_once_as_one_422() -> None:
    outcome = validate_foo(request(foo_v1(name="example", replicas=0, image="Not An Image")))
    assert not outcome.allowed and outcome.code == 422
    assert {field for _, field in causes(outcome)} >= {"spec.replicas", "spec.deployment.image"}


def test_validate_refuses_a_status_that_a_create_still_carries() -> None:
    outcome = validate_foo(request(foo_v1(image=IMAGE, status={"availableReplicas": 2})))
    assert not outcome.allowed and ("FieldValueForbidden", "status") in causes(outcome)


def test_validate_refuses_a_main_resource_update_that_changes_the_status() -> None:
    old = foo_v1(image=IMAGE, status={"availableReplicas": 2})
    outcome = validate_foo(request(foo_v1(image=IMAGE, status={"availableReplicas": 9}), old=old))
    assert not outcome.allowed and ("FieldValueForbidden", "status") in causes(outcome)


def test_a_write_at_v1alpha1_is_warned_that_the_version_is_deprecated() -> None:
    outcome = validate_foo(request(foo_v1(image=IMAGE), request_version="v1alpha1"))
    assert outcome.allowed and outcome.warnings == [
        "samplecontroller.k8s.io/v1alpha1 Foo is deprecated; use samplecontroller.k8s.io/v1 Foo"
    ]


# --- what both hooks answer alike --------------------------------------------------------------


def test_a_review_for_another_resource_is_refused_as_a_configuration_bug() -> None:
    for rule in (validate_foo, lambda r: mutate_foo(r, image=IMAGE)):
        outcome = rule(request(foo_v1(), group="apps", resource="deployments"))
        assert outcome.code == 400 and "check the webhook configuration's rules" in message(outcome)


def test_a_subresource_other_than_scale_is_refused_as_misrouted() -> None:
    outcome = validate_foo(request(foo_v1(), sub_resource="status", operation="UPDATE"))
    assert outcome.code == 400 and f"not {FOOS}/status" in message(outcome)


def test_a_delete_is_allowed_without_looking_at_the_object() -> None:
    assert validate_foo(request(None, operation="DELETE")).allowed
    assert mutate_foo(request(None, operation="DELETE"), image=IMAGE).allowed


def test_an_object_that_is_not_a_foo_is_a_400_naming_what_it_is() -> None:
    outcome = validate_foo(request({"apiVersion": "v1", "kind": "Pod"}))
    assert outcome.code == 400
    assert "got kind 'Pod' of apiVersion 'v1'" in message(outcome)
    assert validate_foo(request(["not", "an", "object"])).code == 400


def test_an_update_whose_old_object_is_not_a_foo_is_a_400() -> None:
    outcome = validate_foo(request(foo_v1(image=IMAGE), old="garbage"))
    assert outcome.code == 400 and "request.oldObject must be a Foo object" in message(outcome)


def test_kubectl_scale_is_held_to_the_replicas_bounds() -> None:
    def scale(replicas: int) -> AdmissionRequest:
        return request({"spec": {"replicas": replicas}}, sub_resource="scale", operation="UPDATE")

    assert validate_foo(scale(MAX_REPLICAS)).allowed
    refused = validate_foo(scale(MAX_REPLICAS + 1))
    assert refused.code == 422 and causes(refused) == [("FieldValueInvalid", "spec.replicas")]
    assert validate_foo(request({"spec": 3}, sub_resource="scale", operation="UPDATE")).code == 400
