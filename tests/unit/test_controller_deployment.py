"""controller.deployment: the Deployment a Foo asks for, ownership (``DeploymentView.controlled_by``) and the drift patch."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from attacks.objects import foo_v1
from controller.controller import owning_foo_key
from controller.deployment import desired_deployment, drift_patch
from fooapi.views import DeploymentView, FooView, deployment_index

UID = "6b8e5b0c-1f0e-4c38-9d61-0f6a5f5a0001"


def is_controlled_by(deployment: dict[str, Any], foo: dict[str, Any]) -> bool:
    return DeploymentView(deployment).controlled_by(FooView(foo))


def example_foo(
    name: str = "example-foo",
    *,
    deployment: str | None = "example-foo",
    image: str | None = None,
    replicas: int | None = 1,
    namespace: str = "default",
) -> dict[str, Any]:
    """The Foo of sample-controller's example, as the informer caches it."""
    return foo_v1(
        name,
        namespace=namespace,
        deployment=deployment,
        image=image,
        replicas=replicas,
        uid=UID,
        generation=1,
        resource_version="7",
    )


# What sample-controller's newDeployment(foo) serialises to for the same Foo, spelled out
# field by field from its source (controller.go), with the owner reference at our version.
SAMPLE_CONTROLLER_DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {
        "name": "example-foo",
        "namespace": "default",
        "ownerReferences": [
            {
                "apiVersion": "samplecontroller.k8s.io/v1",
                "kind": "Foo",
                "name": "example-foo",
                "uid": UID,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    },
    "spec": {
        "replicas": 1,
        "selector": {"matchLabels": {"app": "nginx", "controller": "example-foo"}},
        "template": {
            "metadata": {"labels": {"app": "nginx", "controller": "example-foo"}},
            "spec": {"containers": [{"name": "nginx", "image": "nginx:latest"}]},
        },
    },
}


def test_desired_deployment_of_an_unchanged_foo_is_exactly_sample_controllers() -> None:
    assert desired_deployment(example_foo()) == SAMPLE_CONTROLLER_DEPLOYMENT


def test_desired_deployment_defaults_image_and_replicas_like_the_webhook() -> None:
    assert desired_deployment(example_foo(replicas=None)) == SAMPLE_CONTROLLER_DEPLOYMENT


def test_desired_deployment_pod_template_has_one_container_and_nothing_else() -> None:
    template = desired_deployment(example_foo(image="nginx:1.27", replicas=3))["spec"]["template"]
    assert template == {
        "metadata": {"labels": {"app": "nginx", "controller": "example-foo"}},
        "spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"}]},
    }


def test_desired_deployment_uses_a_chart_configured_default_image() -> None:
    built = desired_deployment(example_foo(), default_image="registry.local/nginx:stable")
    assert built["spec"]["template"]["spec"]["containers"] == [
        {"name": "nginx", "image": "registry.local/nginx:stable"}
    ]


def test_desired_deployment_does_not_share_label_dicts_between_selector_and_template() -> None:
    built = desired_deployment(example_foo())
    assert built["spec"]["selector"]["matchLabels"] is not built["spec"]["template"]["metadata"]["labels"]


def deployment_owned_by(
    uid: str | None, *, api_version: str = "samplecontroller.k8s.io/v1", controller: bool = True
) -> dict[str, Any]:
    built = copy.deepcopy(SAMPLE_CONTROLLER_DEPLOYMENT)
    if uid is None:
        del built["metadata"]["ownerReferences"]
    else:
        ref = built["metadata"]["ownerReferences"][0]
        ref.update(uid=uid, apiVersion=api_version, controller=controller)
    return built


@pytest.mark.parametrize(
    ("deployment", "owned"),
    [
        (deployment_owned_by(UID), True),
        (deployment_owned_by(UID, api_version="samplecontroller.k8s.io/v1alpha1"), True),  # sample-controller's
        (deployment_owned_by("another-uid"), False),  # a Foo of the same name, deleted and re-created
        (deployment_owned_by(UID, controller=False), False),  # a mere owner, not the controller
        (deployment_owned_by(None), False),  # somebody's hand-made Deployment
    ],
    ids=["v1-ref", "v1alpha1-ref", "other-uid", "not-controller", "no-owner"],
)
def test_ownership_is_decided_by_the_controller_refs_uid(deployment: dict[str, Any], owned: bool) -> None:
    assert is_controlled_by(deployment, example_foo()) is owned


def live(replicas: int = 1, image: str = "nginx:latest", **container: Any) -> dict[str, Any]:
    """A Deployment as the apiserver returns it: defaulted fields everywhere."""
    built = copy.deepcopy(SAMPLE_CONTROLLER_DEPLOYMENT)
    built["spec"]["replicas"] = replicas
    built["spec"]["strategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}}
    built["spec"]["template"]["spec"].update(restartPolicy="Always", dnsPolicy="ClusterFirst")
    built["spec"]["template"]["spec"]["containers"] = [
        {"name": "nginx", "image": image, "imagePullPolicy": "Always", "resources": {}, **container},
        {"name": "sidecar", "image": "busybox"},
    ]
    return built


@pytest.mark.parametrize(
    ("the_foo", "deployment", "patch"),
    [
        (example_foo(), live(), None),
        (example_foo(replicas=3), live(1), {"spec": {"replicas": 3}}),
        (example_foo(replicas=1), live(5), {"spec": {"replicas": 1}}),
        (
            example_foo(image="nginx:1.27"),
            live(),
            {"spec": {"template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"}]}}}},
        ),
        (
            example_foo(image="nginx:1.27", replicas=2),
            live(4, "nginx:1.25"),
            {"spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"}]}}}},
        ),
        # Fields the apiserver defaulted or a user added are nobody's drift.
        (example_foo(), live(env=[{"name": "A", "value": "1"}]), None),
    ],
    ids=["in-sync", "scale-up", "hand-scaled", "image", "both", "extra-fields"],
)
def test_drift_patch_touches_only_replicas_and_the_nginx_image(
    the_foo: dict[str, Any], deployment: dict[str, Any], patch: dict[str, Any] | None
) -> None:
    assert drift_patch(the_foo, deployment) == patch


def test_drift_patch_never_adds_a_missing_nginx_container() -> None:
    deployment = live()
    deployment["spec"]["template"]["spec"]["containers"] = [{"name": "web", "image": "httpd"}]
    assert drift_patch(example_foo(image="nginx:1.27"), deployment) is None


def test_a_deployment_without_replicas_counts_as_one() -> None:
    deployment = live()
    del deployment["spec"]["replicas"]
    assert drift_patch(example_foo(replicas=1), deployment) is None


def test_deployment_events_map_to_the_owning_foo_whatever_version_its_ref_names() -> None:
    assert owning_foo_key(deployment_owned_by(UID)) == "default/example-foo"
    assert (
        owning_foo_key(deployment_owned_by(UID, api_version="samplecontroller.k8s.io/v1alpha1"))
        == "default/example-foo"
    )
    assert owning_foo_key(deployment_owned_by(None)) is None
    foreign = deployment_owned_by(UID, api_version="example.com/v1")
    assert owning_foo_key(foreign) is None


def test_foos_are_indexed_by_the_deployment_they_name() -> None:
    assert deployment_index(example_foo(deployment="web")) == ["default/web"]
    assert deployment_index(example_foo(deployment=None)) == []


def test_the_deployment_we_build_is_controlled_by_its_foo() -> None:
    assert is_controlled_by(desired_deployment(example_foo()), example_foo())
