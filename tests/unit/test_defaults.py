"""Defaulting: given this Foo, these defaults are filled, and nothing else changes."""

from hypothesis import given
from hypothesis import strategies as st

from attacks.objects import foo_v1, foo_v1alpha1
from fooapi import DEFAULT_IMAGE, default


def test_v1_foo_without_image_and_replicas_gets_nginx_latest_and_one_replica() -> None:
    out = default(foo_v1(replicas=None))
    assert out["spec"] == {"deployment": {"name": "example-nginx", "image": "nginx:latest"}, "replicas": 1}


def test_v1_foo_with_everything_set_is_returned_unchanged() -> None:
    foo = foo_v1(image="nginx:1.27", replicas=3)
    assert default(foo) is foo


def test_configured_default_image_is_used() -> None:
    assert default(foo_v1(), image="registry.local/nginx:1")["spec"]["deployment"]["image"] == "registry.local/nginx:1"


def test_v1alpha1_foo_gets_replicas_but_no_image_field() -> None:
    assert default(foo_v1alpha1(replicas=None))["spec"] == {"deploymentName": "example-nginx", "replicas": 1}


def test_foo_without_spec_gets_a_spec() -> None:
    foo = {"apiVersion": "samplecontroller.k8s.io/v1", "kind": "Foo", "metadata": {"name": "x"}}
    assert default(foo)["spec"] == {"replicas": 1, "deployment": {"image": DEFAULT_IMAGE}}


def test_unknown_fields_survive_defaulting() -> None:
    foo = foo_v1(replicas=None, status={"x": 1})
    foo["spec"]["deployment"]["future"] = True
    foo["spec"]["later"] = [1]
    out = default(foo)
    assert out["spec"]["deployment"]["future"] is True and out["spec"]["later"] == [1] and out["status"] == {"x": 1}


def test_wrongly_typed_spec_is_left_for_validation_to_report() -> None:
    foo = {"apiVersion": "samplecontroller.k8s.io/v1", "kind": "Foo", "spec": "nope"}
    assert default(foo) is foo


def test_defaulting_does_not_mutate_its_input() -> None:
    foo = foo_v1(replicas=None)
    default(foo)
    assert foo == foo_v1(replicas=None)


@given(
    image=st.one_of(st.none(), st.text(max_size=20)),
    replicas=st.one_of(st.none(), st.integers(-5, 50)),
    version=st.sampled_from(["v1", "v1alpha1"]),
)
def test_defaulting_is_idempotent(image: str | None, replicas: int | None, version: str) -> None:
    foo = foo_v1(image=image, replicas=replicas) if version == "v1" else foo_v1alpha1(replicas=replicas)
    once = default(foo)
    assert default(once) == once
