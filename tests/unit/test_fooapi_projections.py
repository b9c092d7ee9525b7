"""fooapi.projections: what the caches keep of a Foo and of a Deployment answers every question the
controller and insights ask, and costs a bounded size whatever a tenant stored (issue #34)."""

from __future__ import annotations

import copy
from typing import Any

import orjson

from apimachinery.projection import MAX_LABEL_CHARACTERS, MAX_LABELS, MAX_MESSAGE, NOTES
from attacks.objects import controller_reference, deployment_of, fat_deployment, fat_foo, fat_metadata, foo_v1
from controller.deployment import drift_patch
from controller.status import desired_status, status_changed
from fooapi.images import MAX_LENGTH as MAX_IMAGE_LENGTH
from fooapi.projections import project_deployment, project_foo
from fooapi.views import DeploymentView, FooView
from insights.health import foo_health

NOW = "2026-11-23T12:00:00Z"
# What a projection may cost, serialized, whatever the object held: a kilobyte or two of fields,
# MAX_LABEL_CHARACTERS of labels (and their quotes), two messages of MAX_MESSAGE.
BOUND = 2 * 1024 + MAX_LABEL_CHARACTERS + MAX_LABELS * 6 + 2 * MAX_MESSAGE


def size(obj: Any) -> int:
    return len(orjson.dumps(obj))


def a_foo(image: str = "nginx:1.27", **extra: Any) -> dict[str, Any]:
    return foo_v1("web", namespace="ns", image=image, uid="foo-uid", generation=3, resource_version="11", **extra)


def rolled_out(foo: dict[str, Any], message: str = "ReplicaSet has successfully progressed.") -> dict[str, Any]:
    deployment = deployment_of(foo)
    deployment["metadata"].update(uid="d-uid", resourceVersion="9", generation=4, labels={"a": "b"}, managedFields=[{}])
    deployment["spec"]["strategy"] = {"type": "RollingUpdate"}
    deployment["spec"]["template"] = {
        "spec": {"containers": [{"name": "nginx", "image": "nginx:1.0"}, {"name": "sidecar", "image": "busybox"}]}
    }
    deployment["status"] = {
        "observedGeneration": 4, "replicas": 3, "readyReplicas": 2, "availableReplicas": 2, "updatedReplicas": 3,
        "conditions": [
            {"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable", "message": "m"},
            {"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated", "message": message,
             "lastUpdateTime": NOW, "lastTransitionTime": NOW},
            {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate", "message": "quota",
             "lastTransitionTime": NOW},
        ],
    }  # fmt: skip
    return deployment


def test_the_projections_answer_every_question_the_controller_and_insights_ask() -> None:
    foo = a_foo(status={"observedGeneration": 3, "replicas": 3, "conditions": []})
    foo["metadata"].update(creationTimestamp=NOW, labels={"team": "a"}, managedFields=[{}])
    full = rolled_out(foo)
    foo_cached, deployment_cached = project_foo(copy.deepcopy(foo), labels=True), project_deployment(full)
    assert DeploymentView(deployment_cached).controlled_by(FooView(foo))
    assert drift_patch(foo_cached, deployment_cached) == drift_patch(foo, full) is not None
    assert desired_status(foo_cached, deployment_cached, now=NOW) == desired_status(foo, full, now=NOW)
    assert foo_health(foo_cached, deployment_cached, [], []) == foo_health(foo, full, [], [])
    assert "labels" not in deployment_cached["metadata"] and "strategy" not in deployment_cached["spec"]
    assert "managedFields" not in foo_cached["metadata"]


def test_a_fat_foo_is_cached_in_a_bounded_size() -> None:
    foo = fat_foo("web", namespace="ns", uid="foo-uid")
    foo["metadata"]["annotations"]["samplecontroller.k8s.io/conversion-data"] = "{}"
    assert size(foo) > 800 * 1024
    for labels in (False, True):
        projected = project_foo(foo, labels=labels)
        assert size(projected) < BOUND
        assert "annotations" not in projected["metadata"]
        assert FooView(projected).deployment_name == "web-nginx" and FooView(projected).replicas == 1
    assert len(project_foo(foo, labels=True)["metadata"]["labels"]) == MAX_LABELS
    assert FooView(project_foo(foo, labels=True)).labels_dropped == 9_000 - MAX_LABELS
    assert "labels" not in project_foo(foo)["metadata"]  # the controller reads none


def test_labels_are_kept_in_key_order_up_to_their_bound() -> None:
    labels = {f"k{i:03d}": "v" for i in range(100)}
    projected = project_foo(a_foo(labels=labels), labels=True)
    assert list(projected["metadata"]["labels"]) == sorted(labels)[:MAX_LABELS]
    few = project_foo(a_foo(labels={"team": "a", "env": "prod"}), labels=True)
    assert few["metadata"]["labels"] == {"env": "prod", "team": "a"} and NOTES not in few


def test_a_fat_deployment_keeps_only_its_controller_reference() -> None:
    foo = a_foo()
    deployment = fat_deployment("web-nginx", namespace="ns", owner_references=4_000)
    deployment["metadata"]["ownerReferences"].append(controller_reference(foo))
    assert size(deployment) > 1024 * 1024
    projected = project_deployment(deployment)
    assert size(projected) < BOUND
    assert projected["metadata"]["ownerReferences"] == [controller_reference(foo)]
    assert DeploymentView(projected).controlled_by(FooView(foo))


def test_a_deployment_no_foo_controls_is_cached_as_its_name_and_owner_alone() -> None:
    foreign = fat_deployment("web-nginx", namespace="ns")
    projected = project_deployment(foreign)
    assert set(projected) == {"apiVersion", "kind", "metadata"}
    assert not DeploymentView(projected).controlled_by(FooView(a_foo()))
    other = copy.deepcopy(foreign)
    other["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "x", "uid": "u", "controller": True}
    ]
    assert set(project_deployment(other)) == {"apiVersion", "kind", "metadata"}


def test_a_foo_field_past_its_bound_is_refused_not_cached() -> None:
    projected = project_foo(a_foo(image="nginx:" + "1" * 5000))
    assert FooView(projected).image is None
    assert FooView(projected).refused == f"spec.deployment.image: Too long: must have at most {MAX_IMAGE_LENGTH} bytes"
    assert size(projected) < BOUND
    assert FooView(project_foo(a_foo())).refused is None


def test_a_deployment_image_past_its_bound_can_only_be_reverted() -> None:
    foo = a_foo()
    deployment = rolled_out(foo)
    deployment["spec"]["template"]["spec"]["containers"][0]["image"] = "x" * 100_000
    projected = project_deployment(deployment)
    assert size(projected) < BOUND
    assert drift_patch(project_foo(foo), projected) == drift_patch(foo, deployment) is not None


def test_messages_are_cut_alike_in_the_cache_and_in_the_status_written() -> None:
    # Else a status with a long message never reads back equal and every reconcile writes it again.
    foo = a_foo()
    deployment = rolled_out(foo, message="m" * 100_000)
    status = desired_status(project_foo(foo), project_deployment(deployment), now=NOW)
    assert all(len(c["message"]) <= MAX_MESSAGE for c in status["conditions"])
    written = project_foo({**foo, "status": status})
    assert not status_changed(written, desired_status(written, project_deployment(deployment), now=NOW))


def test_a_foo_with_status_conditions_of_other_types_keeps_ready_and_progressing() -> None:
    conditions = [{"type": t, "status": "True", "reason": "R", "message": "m" * 5000} for t in ("X", "Ready", "Y")]
    projected = project_foo(a_foo(status={"conditions": conditions * 100}))
    assert [c["type"] for c in projected["status"]["conditions"]] == ["Ready"]
    assert len(projected["status"]["conditions"][0]["message"]) == MAX_MESSAGE


def test_fat_metadata_is_what_the_apiserver_accepts() -> None:
    metadata = fat_metadata(labels=3, annotation_bytes=10, owner_references=2)
    assert all(len(key.partition("/")[2]) <= 63 and len(value) <= 63 for key, value in metadata["labels"].items())
    assert len(metadata["ownerReferences"]) == 2 and not any(r.get("controller") for r in metadata["ownerReferences"])
