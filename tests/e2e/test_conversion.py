"""Conversion through the real kube-apiserver: one Foo, two versions, nothing lost."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from hack.plane.cluster import LocalControlPlane
from hack.plane.product import LocalProduct
from tests.e2e.test_admission import apply_foo, foo_yaml, get_foo
from tests.e2e.waiting import wait_for


@pytest.mark.smoke
def test_created_as_v1alpha1_reads_the_same_at_v1_and_back(foo_operator: LocalProduct, namespace: str) -> None:
    plane = foo_operator.plane
    apply_foo(plane, namespace, "legacy", version="v1alpha1", replicas=3)
    at_v1 = get_foo(plane, namespace, "legacy", "v1")
    assert at_v1["apiVersion"] == "samplecontroller.k8s.io/v1"
    assert at_v1["spec"] == {"deployment": {"name": "web", "image": "nginx:latest"}, "replicas": 3}
    at_v1alpha1 = get_foo(plane, namespace, "legacy", "v1alpha1")
    assert at_v1alpha1["spec"] == {"deploymentName": "web", "replicas": 3}


@pytest.mark.smoke
def test_a_custom_image_survives_a_read_and_write_back_at_v1alpha1(foo_operator: LocalProduct, namespace: str) -> None:
    plane = foo_operator.plane
    apply_foo(plane, namespace, "custom", image="nginx:1.27", replicas=2)
    old = get_foo(plane, namespace, "custom", "v1alpha1")
    assert "image" not in json.dumps(old["spec"])
    old["spec"]["replicas"] = 4  # a sample-controller-era client edits what it knows
    plane.kubectl("replace", "-f", "-", input=json.dumps(old))
    back = get_foo(plane, namespace, "custom", "v1")
    assert back["spec"] == {"deployment": {"name": "web", "image": "nginx:1.27"}, "replicas": 4}
    assert "samplecontroller.k8s.io/conversion-data" not in back["metadata"].get("annotations", {})


def test_listing_a_thousand_foos_at_the_non_storage_version_works(foo_operator: LocalProduct, namespace: str) -> None:
    plane = foo_operator.plane
    items = [yaml.safe_load(foo_yaml(f"many-{i:04d}", deployment=f"web-{i}", image="nginx:1.27")) for i in range(1000)]
    plane.kubectl_objects("create", items, "-n", namespace, timeout=600)
    listed = json.loads(
        plane.kubectl("get", "foos.v1alpha1.samplecontroller.k8s.io", "-n", namespace, "-o", "json", timeout=300).stdout
    )["items"]
    assert len(listed) == 1000
    assert {f["apiVersion"] for f in listed} == {"samplecontroller.k8s.io/v1alpha1"}
    assert listed[7]["spec"] == {"deploymentName": "web-7", "replicas": 2}


def test_with_the_webhook_down_writes_fail_clearly_and_nothing_is_written(
    foo_operator: LocalProduct, namespace: str
) -> None:
    plane = foo_operator.plane
    foo_operator.stop_webhook()
    try:
        result = apply_foo(plane, namespace, "while-down", check=False)
        assert result.returncode != 0
        assert 'failed calling webhook "mfoo.samplecontroller.k8s.io"' in result.stderr
        assert "connection refused" in result.stderr
    finally:
        foo_operator.start_webhook()
    assert plane.kubectl("get", "foo", "while-down", "-n", namespace, check=False).returncode != 0


# --- a tenant who may update foos, not foos/status (issue 34) ------------------------------------

CONVERSION_ANNOTATION = "samplecontroller.k8s.io/conversion-data"
STATUS = {
    "observedGeneration": 1,
    "readyReplicas": 0,
    "availableReplicas": 0,
    "conditions": [
        {
            "type": "Ready",
            "status": "False",
            "reason": "Pending",
            "message": "waiting for the Deployment",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
    ],
}
FORGED_STASH = {
    "deployment": {"image": "nginx:1.27"},
    "status": {
        "observedGeneration": 1,
        "readyReplicas": 7,
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Forged",
                "message": "FORGED by tenant",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ],
    },
}


@pytest.fixture
def tenant(foo_operator: LocalProduct, namespace: str) -> str:
    """A user who may read and write foos in ``namespace``, never foos/status (RBAC made here)."""
    user = f"tenant-of-{namespace}"
    foo_operator.plane.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "foo-editor", "namespace": namespace},
            "rules": [
                {
                    "apiGroups": ["samplecontroller.k8s.io"],
                    "resources": ["foos"],
                    "verbs": ["get", "list", "watch", "create", "update", "patch"],
                }
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "foo-editor", "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "foo-editor"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        },
    )

    def can_i(*ask: str) -> str:
        return foo_operator.plane.kubectl("auth", "can-i", *ask, "-n", namespace, "--as", user, check=False).stdout

    # kube-apiserver's authorizer learns of the Role and its binding from a watch, a moment later.
    wait_for(f"{user} to be allowed to update foos", lambda: can_i("update", "foos").strip() == "yes")
    assert can_i("update", "foos", "--subresource=status").strip() == "no"
    return user


def _stored_with_status(plane: LocalControlPlane, namespace: str, name: str) -> dict[str, Any]:
    apply_foo(plane, namespace, name, image="nginx:1.27")
    plane.kubectl(
        "patch", "foo", name, "-n", namespace, "--subresource=status", "--type=merge", "-p",
        json.dumps({"status": STATUS}),
    )  # fmt: skip
    return get_foo(plane, namespace, name)


def _replace_as(plane: LocalControlPlane, user: str, obj: dict[str, Any], check: bool = False) -> Any:
    return plane.kubectl("replace", "--as", user, "-f", "-", input=json.dumps(obj), check=check)


def test_a_tenant_cannot_forge_status_through_the_v1alpha1_annotation(
    foo_operator: LocalProduct, namespace: str, tenant: str
) -> None:
    plane = foo_operator.plane
    before = _stored_with_status(plane, namespace, "watched")
    read = get_foo(plane, namespace, "watched", "v1alpha1")
    read["metadata"]["annotations"][CONVERSION_ANNOTATION] = json.dumps(FORGED_STASH, separators=(",", ":"))
    read["spec"]["replicas"] = 3  # with an honest edit beside it
    _replace_as(plane, tenant, read, check=True)
    after = get_foo(plane, namespace, "watched")
    assert after["status"] == before["status"] == STATUS, "a main-resource update keeps the status"
    assert after["spec"]["replicas"] == 3
    assert CONVERSION_ANNOTATION not in after["metadata"].get("annotations", {})
    # v1alpha1 readers get the stash conversion wrote from the stored status, not the tenant's
    # (kubectl replace keeps the tenant's own manifest in last-applied-configuration: only text).
    stash = get_foo(plane, namespace, "watched", "v1alpha1")["metadata"]["annotations"][CONVERSION_ANNOTATION]
    assert "FORGED" not in stash and json.loads(stash)["status"]["readyReplicas"] == 0


def test_a_tenant_cannot_create_a_foo_with_status_through_the_v1alpha1_annotation(
    foo_operator: LocalProduct, namespace: str, tenant: str
) -> None:
    foo = {
        "apiVersion": "samplecontroller.k8s.io/v1alpha1",
        "kind": "Foo",
        "metadata": {
            "name": "born-ready",
            "namespace": namespace,
            "annotations": {CONVERSION_ANNOTATION: json.dumps(FORGED_STASH)},
        },
        "spec": {"deploymentName": "born-ready", "replicas": 1},
    }
    created = foo_operator.plane.kubectl(
        "create", "--as", tenant, "-o", "json", "-f", "-", input=json.dumps(foo)
    )  # the answer is the object as stored, before the controller writes any status
    stash = json.loads(json.loads(created.stdout)["metadata"]["annotations"][CONVERSION_ANNOTATION])
    assert "status" not in stash, f"stored with a status the tenant wrote: {stash}"
    assert stash["deployment"]["image"] == "nginx:1.27", "the rest of the stash is the tenant's to write"


def test_what_v1_refuses_is_refused_through_v1alpha1_and_v1_edits_go_on(
    foo_operator: LocalProduct, namespace: str, tenant: str
) -> None:
    plane = foo_operator.plane
    _stored_with_status(plane, namespace, "spaced")
    read = get_foo(plane, namespace, "spaced", "v1alpha1")
    stash = json.loads(read["metadata"]["annotations"][CONVERSION_ANNOTATION])
    stash["deployment"]["image"] = " nginx:latest "
    read["metadata"]["annotations"][CONVERSION_ANNOTATION] = json.dumps(stash)
    refused = _replace_as(plane, tenant, read)
    assert refused.returncode != 0
    assert (
        f'metadata.annotations[{CONVERSION_ANNOTATION}]: Invalid value: " nginx:latest ": spec.deployment.image: '
        "invalid reference format" in refused.stderr
    ), refused.stderr
    assert get_foo(plane, namespace, "spaced")["spec"]["deployment"]["image"] == "nginx:1.27"
    edited = plane.kubectl(
        "patch", "foo", "spaced", "-n", namespace, "--as", tenant, "--type=merge", "-p", '{"spec":{"replicas":4}}'
    )  # the honest v1 edit the attack used to break (422)
    assert edited.returncode == 0


@pytest.mark.parametrize(
    ("annotation", "message"),
    [("[" * 100_000, "is not valid JSON; remove it"), ('{"spec":{"replicas":50}}', "holds 'spec'")],
)
def test_a_hostile_annotation_is_a_clear_conversion_error_and_nothing_is_written(
    foo_operator: LocalProduct, namespace: str, tenant: str, annotation: str, message: str
) -> None:
    plane = foo_operator.plane
    assert foo_operator.webhook is not None
    log = foo_operator.webhook.log_file
    logged = log.stat().st_size
    before = _stored_with_status(plane, namespace, "hostile")
    read = get_foo(plane, namespace, "hostile", "v1alpha1")
    read["metadata"]["annotations"][CONVERSION_ANNOTATION] = annotation
    refused = _replace_as(plane, tenant, read)
    assert refused.returncode != 0
    assert f"annotation {CONVERSION_ANNOTATION}" in refused.stderr and message in refused.stderr, refused.stderr
    assert len(refused.stderr) < 2_000, "the message, not the annotation, is what the user reads"
    assert get_foo(plane, namespace, "hostile") == before
    assert "Traceback" not in log.read_bytes()[logged:].decode(errors="replace")


def test_a_v1_write_carrying_the_conversion_annotation_is_refused_with_a_field_error(
    foo_operator: LocalProduct, namespace: str, tenant: str
) -> None:
    plane = foo_operator.plane
    foo = yaml.safe_load(foo_yaml("stowaway"))
    foo["metadata"] = {"name": "stowaway", "namespace": namespace, "annotations": {CONVERSION_ANNOTATION: "{}"}}
    refused = plane.kubectl("create", "--as", tenant, "-f", "-", input=json.dumps(foo), check=False)
    assert refused.returncode != 0
    assert f"metadata.annotations[{CONVERSION_ANNOTATION}]: Forbidden: reserved for conversion" in refused.stderr
