"""Conversion: v1alpha1 (sample-controller's schema) and v1 hold the same Foo; nothing is lost."""

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from attacks.objects import V1, V1ALPHA1, foo_v1, foo_v1alpha1
from fooapi import ConversionError, convert
from fooapi.conversion import CONVERSION_ANNOTATION, CONVERSION_ANNOTATION_FIELD, field_at_legacy


def test_sample_controller_foo_converts_to_v1() -> None:
    old = foo_v1alpha1(replicas=3, status={"availableReplicas": 2})
    assert convert(old, V1) == {**foo_v1(replicas=3), "status": {"availableReplicas": 2}}


def test_v1_with_only_v1alpha1_fields_converts_without_annotation() -> None:
    assert convert(foo_v1(replicas=3), V1ALPHA1) == foo_v1alpha1(replicas=3)


def test_custom_image_is_stashed_in_an_annotation_of_the_group() -> None:
    down = convert(foo_v1(image="nginx:1.27"), V1ALPHA1)
    assert down["spec"] == {"replicas": 2, "deploymentName": "example-nginx"}
    assert down["metadata"]["annotations"] == {CONVERSION_ANNOTATION: '{"deployment":{"image":"nginx:1.27"}}'}


def test_custom_image_survives_a_round_trip_and_the_annotation_goes() -> None:
    foo = foo_v1(image="nginx:1.27")
    foo["metadata"]["annotations"] = {"team": "web"}
    assert convert(convert(foo, V1ALPHA1), V1) == foo


def test_a_v1alpha1_writer_changing_replicas_keeps_the_stashed_image() -> None:
    down = convert(foo_v1(image="nginx:1.27", replicas=2), V1ALPHA1)
    down["spec"]["replicas"] = 5
    assert convert(down, V1)["spec"] == {"replicas": 5, "deployment": {"name": "example-nginx", "image": "nginx:1.27"}}


def test_v1_status_survives_through_v1alpha1_while_available_replicas_stays_visible() -> None:
    status = {
        "observedGeneration": 4,
        "replicas": 3,
        "readyReplicas": 2,
        "availableReplicas": 2,
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "reason": "Scaling",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
                "message": "",
            }
        ],
    }
    down = convert(foo_v1(status=status), V1ALPHA1)
    assert down["status"] == {"availableReplicas": 2}
    assert convert(down, V1)["status"] == status


def test_same_version_is_returned_as_is() -> None:
    foo = foo_v1()
    assert convert(foo, V1) is foo


@pytest.mark.parametrize(
    ("obj", "desired", "message"),
    [
        (foo_v1(), "samplecontroller.k8s.io/v2", "cannot convert to apiVersion"),
        ({"apiVersion": "apps/v1", "kind": "Foo"}, V1, "cannot convert from apiVersion"),
    ],
)
def test_unknown_versions_fail_with_a_message(obj: dict[str, Any], desired: str, message: str) -> None:
    with pytest.raises(ConversionError, match=message):
        convert(obj, desired)


def test_a_corrupt_annotation_is_a_clear_error() -> None:
    foo = foo_v1alpha1()
    foo["metadata"]["annotations"] = {CONVERSION_ANNOTATION: "{not json"}
    with pytest.raises(ConversionError, match="is not valid JSON"):
        convert(foo, V1)


def test_an_annotation_of_brackets_that_never_close_is_a_conversion_error_not_a_crash() -> None:
    # json.loads recursed into 100,000 of them (RecursionError: a 500 and a traceback).
    foo = foo_v1alpha1()
    foo["metadata"]["annotations"] = {CONVERSION_ANNOTATION: "[" * 100_000}
    with pytest.raises(ConversionError, match="is not valid JSON"):
        convert(foo, V1)


@pytest.mark.parametrize(
    ("stash", "message"),
    [
        ('{"spec":{"replicas":50}}', "holds 'spec', which conversion never writes there"),
        ('{"deployment":{"name":"someone-elses"}}', "'deployment' must be an object without 'name'"),
        ('{"deployment":"nginx"}', "'deployment' must be an object"),
        ('{"status":{"availableReplicas":9}}', "'status' must be an object without 'availableReplicas'"),
        ('{"status":[]}', "'status' must be an object"),
        ("[]", "must hold a JSON object"),
    ],
)
def test_an_annotation_conversion_never_wrote_is_a_conversion_error(stash: str, message: str) -> None:
    foo = foo_v1alpha1(deployment="mine")
    foo["metadata"]["annotations"] = {CONVERSION_ANNOTATION: stash}
    with pytest.raises(ConversionError, match=message):
        convert(foo, V1)


@pytest.mark.parametrize(
    ("v1_field", "v1alpha1_field"),
    [
        ("spec.deployment.name", "spec.deploymentName"),
        ("spec.replicas", "spec.replicas"),
        ("spec", "spec"),
        ("status.availableReplicas", "status.availableReplicas"),
        ("metadata.name", "metadata.name"),
        ("spec.deployment.image", CONVERSION_ANNOTATION_FIELD),
        ("spec.deployment", CONVERSION_ANNOTATION_FIELD),
        ("status", CONVERSION_ANNOTATION_FIELD),
        ("status.conditions", CONVERSION_ANNOTATION_FIELD),
    ],
)
def test_each_v1_field_has_its_place_in_v1alpha1(v1_field: str, v1alpha1_field: str) -> None:
    assert field_at_legacy(v1_field) == v1alpha1_field


def test_metadata_other_than_the_annotation_is_untouched() -> None:
    foo = foo_v1(image="x")
    foo["metadata"].update({"labels": {"a": "b"}, "uid": "123", "resourceVersion": "9", "finalizers": ["f"]})
    down = convert(foo, V1ALPHA1)
    assert {k: v for k, v in down["metadata"].items() if k != "annotations"} == foo["metadata"]


# --- properties -------------------------------------------------------------------------------

names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-.", min_size=1, max_size=30)
json_leaf = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=10))
annotations = st.dictionaries(
    st.text(min_size=1, max_size=10).filter(lambda k: k != CONVERSION_ANNOTATION),
    st.text(max_size=10),
    min_size=1,
    max_size=3,
)


@st.composite
def v1_foos(draw: st.DrawFn) -> dict[str, Any]:
    deployment = draw(
        st.fixed_dictionaries({}, optional={"name": names, "image": st.text(max_size=20), "extra": json_leaf})
    )
    spec = draw(st.fixed_dictionaries({}, optional={"replicas": st.integers(-2, 20), "unknown": json_leaf}))
    if draw(st.booleans()):
        spec["deployment"] = deployment
    foo: dict[str, Any] = {"apiVersion": V1, "kind": "Foo", "metadata": {"name": draw(names)}, "spec": spec}
    if draw(st.booleans()):
        foo["metadata"]["annotations"] = draw(annotations)
    if draw(st.booleans()):
        foo["status"] = draw(
            st.fixed_dictionaries(
                {},
                optional={
                    "observedGeneration": st.integers(0, 9),
                    "replicas": st.integers(0, 9),
                    "readyReplicas": st.integers(0, 9),
                    "availableReplicas": st.integers(0, 9),
                },
            )
        )
    return foo


@given(v1_foos())
def test_v1_to_v1alpha1_to_v1_is_the_identity(foo: dict[str, Any]) -> None:
    assert convert(convert(foo, V1ALPHA1), V1) == foo


@given(
    name=names,
    deployment=st.one_of(st.none(), names),
    replicas=st.one_of(st.none(), st.integers(0, 20)),
    available=st.one_of(st.none(), st.integers(0, 9)),
)
def test_v1alpha1_to_v1_to_v1alpha1_is_the_identity(
    name: str, deployment: str | None, replicas: int | None, available: int | None
) -> None:
    foo = foo_v1alpha1(name, deployment=deployment, replicas=replicas)
    if available is not None:
        foo["status"] = {"availableReplicas": available}
    assert convert(convert(foo, V1), V1ALPHA1) == foo


def test_integers_beyond_64_bits_survive_the_round_trip() -> None:
    # Found by hypothesis: orjson refuses to write them and reads them back as floats.
    foo = foo_v1(image="x")
    foo["spec"]["deployment"]["extra"] = -(2**63) - 1
    assert convert(convert(foo, V1ALPHA1), V1) == foo
