"""The typed views over raw objects: one spelling and one default per field, and no exception on junk."""

from __future__ import annotations

from typing import Any

import pytest

from attacks.objects import deployment, foo_v1
from fooapi.defaults import DEFAULT_REPLICAS
from fooapi.views import DeploymentView, FooView, deployment_index, is_foo_reference, pod_foo_index


def test_a_foo_view_reads_name_spec_and_status() -> None:
    raw = foo_v1("web", deployment="web-nginx", image="nginx:1.27", replicas=3, status={"observedGeneration": 4})
    raw["metadata"].update(uid="u-1", generation=5)
    foo = FooView(raw)
    assert (foo.name, foo.namespace, foo.uid, foo.generation) == ("web", "default", "u-1", 5)
    assert (foo.deployment_name, foo.image, foo.replicas, foo.observed_generation) == ("web-nginx", "nginx:1.27", 3, 4)
    assert foo.pod_labels == {"app": "nginx", "controller": "web"}


def test_replicas_left_out_read_as_the_schemas_default() -> None:
    assert FooView(foo_v1(replicas=None)).replicas == DEFAULT_REPLICAS


@pytest.mark.parametrize(
    "junk",
    [
        {},
        {"metadata": "x", "spec": [1], "status": 3},
        {"spec": {"replicas": True, "deployment": {"name": 7, "image": ""}}},
    ],
)
def test_a_malformed_object_reads_as_absent_fields_never_an_exception(junk: dict[str, Any]) -> None:
    foo = FooView(junk)
    assert (foo.name, foo.uid, foo.generation, foo.deployment_name, foo.image) == ("", None, None, None, None)
    assert foo.replicas == DEFAULT_REPLICAS
    assert deployment_index(junk) == []
    assert pod_foo_index(junk) == []


def test_the_deployment_index_and_the_pod_index_name_keys_in_the_foos_namespace() -> None:
    assert deployment_index(foo_v1("web", deployment="web-nginx")) == ["default/web-nginx"]
    pod = {"metadata": {"name": "web-nginx-abc", "namespace": "shop", "labels": {"controller": "web"}}}
    assert pod_foo_index(pod) == ["shop/web"]


@pytest.mark.parametrize(
    ("ref", "ours"),
    [
        ({"apiVersion": "samplecontroller.k8s.io/v1", "kind": "Foo"}, True),
        ({"apiVersion": "samplecontroller.k8s.io/v1alpha1", "kind": "Foo"}, True),  # sample-controller's own
        ({"apiVersion": "example.com/v1", "kind": "Foo"}, False),
        ({"apiVersion": "apps/v1", "kind": "ReplicaSet"}, False),
    ],
)
def test_an_owner_reference_names_a_foo_by_group_and_kind(ref: dict[str, Any], ours: bool) -> None:
    assert is_foo_reference(ref) is ours


def test_a_deployment_view_reads_its_owner_replicas_container_and_status() -> None:
    foo = foo_v1("web", uid="u-1")
    status = {
        "observedGeneration": 2,
        "replicas": 3,
        "readyReplicas": 2,
        "availableReplicas": 1,
        "updatedReplicas": 3,
        "conditions": [{"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}],
    }
    raw = deployment("web", owner=foo, replicas=3, status=status)
    raw["spec"]["template"] = {"spec": {"containers": [{"name": "sidecar"}, {"name": "nginx", "image": "nginx:1"}]}}
    view = DeploymentView(raw)
    assert (view.controlling_foo, view.controlled_by(FooView(foo)), view.replicas) == ("web", True, 3)
    assert view.container("nginx") == {"name": "nginx", "image": "nginx:1"}
    assert (view.status_replicas, view.ready_replicas, view.available_replicas, view.updated_replicas) == (3, 2, 1, 3)
    assert view.observed_generation == 2
    assert (view.condition("Progressing") or {}).get("reason") == "NewReplicaSetAvailable"
    assert view.condition("ReplicaFailure") is None


def test_a_deployment_of_a_foo_of_the_same_name_but_another_uid_is_not_its_own() -> None:
    raw = deployment("web", owner=foo_v1("web", uid="u-old"))
    assert DeploymentView(raw).controlling_foo == "web"
    assert not DeploymentView(raw).controlled_by(FooView(foo_v1("web", uid="u-new")))
    assert not DeploymentView(raw).controlled_by(FooView(foo_v1("web")))  # a Foo without a uid owns nothing


@pytest.mark.parametrize(
    "junk",
    [
        {},
        {"metadata": {"ownerReferences": "x"}, "spec": {"replicas": "3", "template": []}, "status": []},
        {"metadata": {"ownerReferences": [7, {"controller": True}]}, "status": {"conditions": [1, None]}},
    ],
)
def test_a_malformed_deployment_reads_as_absent_fields_never_an_exception(junk: dict[str, Any]) -> None:
    view = DeploymentView(junk)
    assert (view.controlling_foo, view.replicas, view.container("nginx"), view.condition("Progressing")) == (
        None,
        1,
        None,
        None,
    )
    assert (view.status_replicas, view.available_replicas, view.observed_generation) == (0, 0, 0)
