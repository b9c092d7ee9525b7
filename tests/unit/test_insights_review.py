"""FooReview: the verdict admission would give, from the admission rules themselves."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apimachinery.admission import json_patch
from attacks.objects import foo_v1, foo_v1alpha1
from insights.review import ReviewError, apply_patch, review

GV = "insights.samplecontroller.k8s.io/v1alpha1"


def fooreview(obj: Any, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": GV, "kind": "FooReview", "metadata": {"name": "r"}, "spec": {"object": obj, **spec}}


def verdict(body: Any, namespace: str = "default", image: str = "nginx:latest") -> dict[str, Any]:
    return review(body, namespace, default_image=image)["status"]


def test_a_good_v1_foo_is_allowed_with_the_defaults_and_their_patch() -> None:
    status = verdict(fooreview(foo_v1(replicas=None)), image="registry.local/nginx:1")
    assert status["allowed"] is True
    assert status["object"]["spec"] == {
        "deployment": {"name": "example-nginx", "image": "registry.local/nginx:1"},
        "replicas": 1,
    }
    assert status["patch"] == [
        {"op": "add", "path": "/spec/deployment/image", "value": "registry.local/nginx:1"},
        {"op": "add", "path": "/spec/replicas", "value": 1},
    ]
    assert "warnings" not in status and "causes" not in status


def test_a_complete_foo_needs_no_patch() -> None:
    status = verdict(fooreview(foo_v1(image="nginx:1.27", replicas=3)))
    assert status["allowed"] is True and "patch" not in status


def test_a_v1alpha1_foo_is_answered_at_v1_with_the_deprecation_warning() -> None:
    status = verdict(fooreview(foo_v1alpha1(replicas=4)))
    assert status["allowed"] is True
    assert status["object"]["apiVersion"] == "samplecontroller.k8s.io/v1"
    assert status["object"]["spec"] == {"deployment": {"name": "example-nginx", "image": "nginx:latest"}, "replicas": 4}
    assert status["warnings"] == [
        "samplecontroller.k8s.io/v1alpha1 Foo is deprecated; use samplecontroller.k8s.io/v1 Foo"
    ]


def test_errors_of_a_v1alpha1_foo_name_its_own_fields() -> None:
    status = verdict(fooreview(foo_v1alpha1(deployment=None, replicas=0)))
    assert (status["allowed"], status["code"], status["reason"]) == (False, 422, "Invalid")
    assert [(c["field"], c["reason"]) for c in status["causes"]] == [
        ("spec.deploymentName", "FieldValueRequired"),
        ("spec.replicas", "FieldValueInvalid"),
    ]
    assert status["message"].startswith('Foo.samplecontroller.k8s.io "example" is invalid: [')


def test_update_checks_the_immutable_deployment_name_against_the_old_object() -> None:
    status = verdict(fooreview(foo_v1(deployment="renamed"), operation="UPDATE", oldObject=foo_v1()))
    assert status["allowed"] is False
    assert [c["field"] for c in status["causes"]] == ["spec.deployment.name"]
    assert "immutable" in status["causes"][0]["message"]


def test_the_foo_lands_in_the_reviews_namespace() -> None:
    status = verdict(fooreview({**foo_v1(), "metadata": {"name": "x"}}), namespace="shop")
    assert status["object"]["metadata"] == {"name": "x", "namespace": "shop"}


def test_a_conversion_failure_is_a_denial_not_a_crash() -> None:
    broken = foo_v1alpha1()
    broken["metadata"]["annotations"] = {"samplecontroller.k8s.io/conversion-data": "{not json"}
    status = verdict(fooreview(broken))
    assert status["allowed"] is False and status["code"] == 400 and "conversion" in status["message"]


def test_the_answer_echoes_metadata_and_spec() -> None:
    body = fooreview(foo_v1())
    answer = review(body, "default", default_image="nginx:latest")
    assert answer["apiVersion"] == GV and answer["kind"] == "FooReview"
    assert answer["metadata"] == {"name": "r", "namespace": "default", "creationTimestamp": None}
    assert answer["spec"] == body["spec"]


@pytest.mark.parametrize(
    "body, code, field_or_message",
    [
        ("not an object", 400, "must be a JSON object"),
        ({"apiVersion": "v1", "kind": "Pod"}, 400, "expected kind FooReview"),
        ({**fooreview(foo_v1()), "metadata": {"namespace": "elsewhere"}}, 400, "does not match the namespace"),
        ({"apiVersion": GV, "kind": "FooReview"}, 422, "spec"),
        (fooreview(None), 422, "spec.object"),
        (fooreview([1, 2]), 422, "spec.object"),
        (fooreview({"apiVersion": "v1", "kind": "ConfigMap"}), 422, "spec.object.apiVersion"),
        (fooreview(foo_v1(), operation="DELETE"), 422, "spec.operation"),
        (fooreview(foo_v1(), operation="UPDATE"), 422, "spec.oldObject"),
        (
            fooreview({**foo_v1(), "metadata": {"name": "x", "namespace": "elsewhere"}}),
            422,
            "spec.object.metadata.namespace",
        ),
    ],
)
def test_a_malformed_review_is_refused_with_a_status(body: Any, code: int, field_or_message: str) -> None:
    with pytest.raises(ReviewError) as raised:
        review(body, "default", default_image="nginx:latest")
    status = raised.value.status
    assert status["code"] == code
    if code == 422:
        assert status["details"]["kind"] == "FooReview"
        assert field_or_message in [c["field"] for c in status["details"]["causes"]]
    else:
        assert field_or_message in status["message"]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda children: st.dictionaries(st.text(max_size=4), children, max_size=4),
    max_leaves=12,
)


@given(json_values, json_values)
def test_applying_the_admission_patch_yields_the_modified_document(original: Any, modified: Any) -> None:
    assert apply_patch(original, json_patch(original, modified)) == modified
