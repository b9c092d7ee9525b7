"""Validation: given this Foo, these field errors, all at once, in Kubernetes' words."""

import json
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from apimachinery.errors import MAX_SHOWN_CHARS, CauseType, invalid_message, shown
from attacks.objects import foo_v1, foo_v1alpha1
from fooapi import GROUP, KIND, validate


def errors_of(new: dict[str, Any], old: dict[str, Any] | None = None) -> list[tuple[str, str, str]]:
    return [(e.type.value, e.field, e.body()) for e in validate(new, old)]


def test_a_valid_v1_foo_has_no_errors() -> None:
    assert validate(foo_v1(image="nginx:latest", replicas=10)) == []


def test_a_valid_v1alpha1_foo_has_no_errors() -> None:
    assert validate(foo_v1alpha1(replicas=1)) == []


@pytest.mark.parametrize(
    ("replicas", "expected"),
    [
        (11, ("FieldValueInvalid", "spec.replicas", "Invalid value: 11: must be less than or equal to 10")),
        (0, ("FieldValueInvalid", "spec.replicas", "Invalid value: 0: must be greater than or equal to 1")),
        (-3, ("FieldValueInvalid", "spec.replicas", "Invalid value: -3: must be greater than or equal to 1")),
        ("3", ("FieldValueTypeInvalid", "spec.replicas", 'Invalid value: "3": must be an integer')),
        (True, ("FieldValueTypeInvalid", "spec.replicas", "Invalid value: true: must be an integer")),
    ],
)
def test_replicas_outside_one_to_ten_is_a_field_error(replicas: Any, expected: tuple[str, str, str]) -> None:
    assert errors_of(foo_v1(replicas=replicas)) == [expected]


def test_missing_deployment_name_is_required_in_the_users_version() -> None:
    assert errors_of(foo_v1(deployment=None)) == [("FieldValueRequired", "spec.deployment.name", "Required value")]
    assert errors_of(foo_v1alpha1(deployment=None)) == [("FieldValueRequired", "spec.deploymentName", "Required value")]


@pytest.mark.parametrize("name", ["Upper", "under_score", "-lead", "trail-", "a..b", "x" * 254])
def test_deployment_name_must_be_a_dns1123_subdomain(name: str) -> None:
    errors = validate(foo_v1(deployment=name))
    assert errors and all(e.type is CauseType.INVALID and e.field == "spec.deployment.name" for e in errors)


@pytest.mark.parametrize("name", ["a", "nginx", "my.app-1", "x" * 253])
def test_dns1123_subdomains_are_accepted(name: str) -> None:
    assert validate(foo_v1(deployment=name)) == []


def test_long_name_reports_the_length_limit() -> None:
    assert "must be no more than 253 characters" in validate(foo_v1(deployment="a" * 254))[0].body()


@pytest.mark.parametrize(
    ("image", "cause"),
    [("", "FieldValueRequired"), (" nginx", "FieldValueInvalid"), (7, "FieldValueTypeInvalid")],
)
def test_image_when_set_must_be_a_clean_non_empty_string(image: Any, cause: str) -> None:
    assert [e.type.value for e in validate(foo_v1(image=image))] == [cause]


def test_every_error_is_reported_at_once() -> None:
    fields = [e.field for e in validate(foo_v1(deployment="Bad_Name", image="", replicas=11))]
    assert fields == ["spec.deployment.name", "spec.deployment.image", "spec.replicas"]


def test_deployment_name_is_immutable_on_update() -> None:
    assert errors_of(foo_v1(deployment="renamed"), foo_v1(deployment="original")) == [
        ("FieldValueInvalid", "spec.deployment.name", 'Invalid value: "renamed": field is immutable')
    ]


def test_update_keeping_the_name_is_fine() -> None:
    assert validate(foo_v1(replicas=3), foo_v1(replicas=1)) == []


def test_setting_a_name_that_was_never_set_is_allowed() -> None:
    assert validate(foo_v1(deployment="now-set"), foo_v1(deployment=None)) == []


@pytest.mark.parametrize(("spec", "field"), [("text", "spec"), ({"deployment": "text"}, "spec.deployment")])
def test_wrongly_shaped_spec_is_a_type_error_not_a_crash(spec: Any, field: str) -> None:
    foo = foo_v1()
    foo["spec"] = spec
    assert [(e.type.value, e.field) for e in validate(foo)] == [("FieldValueTypeInvalid", field)]


def test_unknown_api_version_is_reported() -> None:
    assert validate({"apiVersion": "other/v9", "kind": "Foo"})[0].field == "apiVersion"


def test_message_reads_like_kubernetes() -> None:
    errors = validate(foo_v1alpha1(deployment=None, replicas=11))
    assert invalid_message("x", errors, kind=KIND, group=GROUP) == (
        'Foo.samplecontroller.k8s.io "x" is invalid: [spec.deploymentName: Required value, '
        "spec.replicas: Invalid value: 11: must be less than or equal to 10]"
    )
    assert (
        invalid_message("x", errors[:1], kind=KIND, group=GROUP)
        == 'Foo.samplecontroller.k8s.io "x" is invalid: spec.deploymentName: Required value'
    )


@given(st.text())
@example("\ud800 a lone surrogate")
def test_a_shown_value_is_quoted_as_json_quotes_it(text: str) -> None:
    # orjson quotes it, with json's own words for what orjson will not write (lone surrogates).
    quoted = json.dumps(text[:MAX_SHOWN_CHARS], ensure_ascii=False)
    assert shown(text) == quoted if len(text) <= MAX_SHOWN_CHARS else shown(text).startswith(quoted + "... (")
