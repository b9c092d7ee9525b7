"""Admission is v1's whatever version the user wrote: v1alpha1 is no way around a v1 rule.

With ``matchPolicy: Equivalent`` kube-apiserver converts a v1alpha1 write to v1 (our /convert)
before either webhook sees it, and only ``requestKind`` says what the user wrote. A v1alpha1
writer reaches every v1 field through the conversion annotation, the status among them.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from apimachinery.admission import AdmissionRequest, Outcome
from attacks.objects import V1, V1ALPHA1, foo_v1, foo_v1alpha1
from fooapi.admission import mutate_foo, validate_foo
from fooapi.conversion import CONVERSION_ANNOTATION, CONVERSION_ANNOTATION_FIELD, convert, field_at_legacy
from insights.review import apply_patch


def request(obj: Any, *, old: Any = None, version: str = "v1", operation: str | None = None) -> AdmissionRequest:
    """The review kube-apiserver sends for a write the user made at ``version``: objects at v1."""
    return AdmissionRequest(
        uid="uid-1",
        operation=operation or ("UPDATE" if old is not None else "CREATE"),
        group="samplecontroller.k8s.io",
        version="v1",
        kind="Foo",
        resource="foos.samplecontroller.k8s.io",
        sub_resource="",
        request_version=version,
        name="example",
        namespace="default",
        object=obj,
        old_object=old,
        dry_run=False,
        raw={},
    )


def as_written_at_v1alpha1(foo: dict[str, Any]) -> dict[str, Any]:
    """What the webhooks see of ``foo`` written at v1alpha1: down to v1alpha1 and back, as the
    user's client and the apiserver's conversion take it."""
    return convert(convert(foo, V1ALPHA1), V1)


def causes(outcome: Outcome) -> list[tuple[str, str]]:
    details = (outcome.status or {}).get("details") or {}
    return [(cause["reason"], cause["field"]) for cause in details.get("causes") or ()]


# --- the same inputs through both versions ----------------------------------------------------

names = st.one_of(st.sampled_from(["web", "my.app-1", "Bad_Name", "-x", "a" * 254]), st.text(max_size=12))
images = st.one_of(
    st.sampled_from(
        [
            "nginx:latest",
            " nginx:latest ",
            "nginx:1.27\n2026-01-01T00:00:00Z INFO forged",
            "\x1b]52;c;ZWNobyBoaQ==\x07\x1b[2J",
            "registry.example.com:5000/team/app:v2",
            "Nginx",
            "",
            "a" * 600,
        ]
    ),
    st.text(max_size=20),
    st.integers(),
)
statuses = st.one_of(
    st.none(),
    st.fixed_dictionaries(
        {},
        optional={
            "observedGeneration": st.integers(0, 9),
            "readyReplicas": st.integers(0, 9),
            "availableReplicas": st.integers(0, 9),
            "conditions": st.just([{"type": "Ready", "status": "True", "reason": "Forged", "message": "FORGED"}]),
        },
    ),
)


@st.composite
def v1_foos(draw: st.DrawFn) -> dict[str, Any]:
    foo = foo_v1(
        deployment=draw(st.one_of(st.none(), names)),
        image=draw(st.one_of(st.none(), images)),
        replicas=draw(st.one_of(st.none(), st.integers(-1, 12))),
        status=draw(statuses),
    )
    return foo


@given(new=v1_foos(), old=st.one_of(st.none(), v1_foos()))
def test_admission_of_a_v1alpha1_write_equals_admission_of_its_v1_equivalent(
    new: dict[str, Any], old: dict[str, Any] | None
) -> None:
    at_v1 = request(new, old=old)
    at_v1alpha1 = request(
        as_written_at_v1alpha1(new), old=None if old is None else as_written_at_v1alpha1(old), version="v1alpha1"
    )
    for rule in (validate_foo, lambda r: mutate_foo(r, image="nginx:latest")):
        v1, v1alpha1 = rule(at_v1), rule(at_v1alpha1)
        assert v1.allowed == v1alpha1.allowed
        assert apply_patch(at_v1.object, v1.patch) == apply_patch(at_v1alpha1.object, v1alpha1.patch)
        assert [(reason, field_at_legacy(field)) for reason, field in causes(v1)] == causes(v1alpha1)


# --- status is the status subresource's, through either version --------------------------------

STORED = foo_v1(image="nginx:1.27", status={"observedGeneration": 1, "readyReplicas": 0, "availableReplicas": 0})


def forged_at_v1alpha1(annotation: str) -> dict[str, Any]:
    """A v1alpha1 update of STORED whose writer set the conversion annotation by hand, as the
    apiserver hands it to the webhooks: PrepareForUpdate has put back v1alpha1's status
    (availableReplicas) and the annotation has been converted into v1's status."""
    written = convert(STORED, V1ALPHA1)
    written["metadata"]["annotations"] = {CONVERSION_ANNOTATION: annotation}
    return convert(written, V1)


FORGED_STATUS = (
    '{"deployment":{"image":"nginx:1.27"},"status":{"observedGeneration":1,"readyReplicas":7,'
    '"conditions":[{"type":"Ready","status":"True","reason":"Forged","message":"FORGED by tenant",'
    '"lastTransitionTime":"2026-01-01T00:00:00Z"}]}}'
)


def test_a_v1alpha1_update_cannot_change_status_through_the_annotation() -> None:
    forged = forged_at_v1alpha1(FORGED_STATUS)
    assert forged["status"]["readyReplicas"] == 7, "the attack: the annotation became v1's status"
    mutated = mutate_foo(request(forged, old=copy.deepcopy(STORED), version="v1alpha1"), image="nginx:latest")
    assert mutated.allowed and apply_patch(forged, mutated.patch)["status"] == STORED["status"]
    validated = validate_foo(request(forged, old=copy.deepcopy(STORED), version="v1alpha1"))
    assert not validated.allowed
    assert causes(validated) == [("FieldValueForbidden", CONVERSION_ANNOTATION_FIELD)]
    assert "status subresource" in validated.status["message"]  # type: ignore[index]


def test_a_v1alpha1_create_cannot_carry_status_in_through_the_annotation() -> None:
    """PrepareForCreate drops status at v1alpha1, where only availableReplicas lives; the rest of
    v1's status came in through the annotation and is dropped here, as the apiserver does at v1."""
    written = foo_v1alpha1()
    written["metadata"]["annotations"] = {CONVERSION_ANNOTATION: FORGED_STATUS}
    forged = convert(written, V1)
    assert forged["status"]["readyReplicas"] == 7, "the attack: the annotation became v1's status"
    mutated = mutate_foo(request(forged, version="v1alpha1"), image="nginx:latest")
    assert mutated.allowed and "status" not in apply_patch(forged, mutated.patch)
    validated = validate_foo(request(forged, version="v1alpha1"))
    assert causes(validated) == [("FieldValueForbidden", CONVERSION_ANNOTATION_FIELD)]
    assert "created without status" in validated.status["message"]  # type: ignore[index]


def test_a_main_resource_update_at_v1_keeps_the_status_too() -> None:
    changed = foo_v1(image="nginx:1.27", status={"readyReplicas": 7})
    mutated = mutate_foo(request(changed, old=copy.deepcopy(STORED)), image="nginx:latest")
    assert apply_patch(changed, mutated.patch)["status"] == STORED["status"]
    assert causes(validate_foo(request(changed, old=copy.deepcopy(STORED)))) == [("FieldValueForbidden", "status")]


def test_an_honest_v1alpha1_update_keeps_the_status_and_is_allowed() -> None:
    read = convert(STORED, V1ALPHA1)
    read["spec"]["replicas"] = 3
    written = convert(read, V1)
    outcome = mutate_foo(request(written, old=copy.deepcopy(STORED), version="v1alpha1"), image="nginx:latest")
    assert outcome.allowed and outcome.patch == []
    assert validate_foo(request(written, old=copy.deepcopy(STORED), version="v1alpha1")).allowed


def test_a_v1alpha1_replace_without_the_annotation_keeps_the_status() -> None:
    """`kubectl replace` of a v1alpha1 file: no annotation, so v1's status would shrink to
    availableReplicas; the old one is put back, as for v1."""
    written = convert(foo_v1alpha1(), V1)
    outcome = mutate_foo(request(written, old=copy.deepcopy(STORED), version="v1alpha1"), image="nginx:latest")
    assert outcome.allowed and apply_patch(written, outcome.patch)["status"] == STORED["status"]


# --- v1's rules for v1's fields, through v1alpha1 ------------------------------------------------


def test_an_image_v1_refuses_is_refused_through_v1alpha1_at_the_annotation() -> None:
    written = forged_at_v1alpha1(
        '{"deployment":{"image":" nginx:latest "},"status":{"observedGeneration":1,"readyReplicas":0}}'
    )
    outcome = validate_foo(request(written, old=copy.deepcopy(STORED), version="v1alpha1"))
    assert causes(outcome) == [("FieldValueInvalid", CONVERSION_ANNOTATION_FIELD)]
    message = outcome.status["message"]  # type: ignore[index]
    assert f'{CONVERSION_ANNOTATION_FIELD}: Invalid value: " nginx:latest ": spec.deployment.image:' in message


def test_an_honest_v1_edit_of_a_foo_stored_with_an_image_now_refused_is_allowed() -> None:
    """Ratcheting, as kube-apiserver does for a CRD schema: the image was not touched."""
    stored = foo_v1(image="Nginx Latest")
    assert validate_foo(request(foo_v1(image="Nginx Latest", replicas=3), old=stored)).allowed
    assert not validate_foo(request(foo_v1(image="Nginx Latest"), old=foo_v1(image="nginx"))).allowed


# --- the annotation is conversion's --------------------------------------------------------------


def test_a_v1_write_carrying_the_conversion_annotation_is_refused_with_a_field_error() -> None:
    foo = foo_v1()
    foo["metadata"]["annotations"] = {CONVERSION_ANNOTATION: FORGED_STATUS}
    for rule in (validate_foo, lambda r: mutate_foo(r, image="nginx:latest")):
        outcome = rule(request(foo))
        assert not outcome.allowed and causes(outcome) == [("FieldValueForbidden", CONVERSION_ANNOTATION_FIELD)]


def test_a_v1_update_keeping_an_annotation_stored_before_is_allowed() -> None:
    old = foo_v1()
    old["metadata"]["annotations"] = {CONVERSION_ANNOTATION: "{}"}
    assert validate_foo(request(copy.deepcopy(old), old=old)).allowed


def test_a_hostile_annotation_given_at_v1alpha1_is_a_field_error_not_a_crash() -> None:
    """FooReview hands the rules what the user sent; the webhooks never see one (conversion fails first)."""
    written = foo_v1alpha1()
    written["metadata"]["annotations"] = {CONVERSION_ANNOTATION: "[" * 100_000}
    outcome = validate_foo(request(written, version="v1alpha1"))
    assert causes(outcome) == [("FieldValueInvalid", CONVERSION_ANNOTATION_FIELD)]
