"""Conversion through the real kube-apiserver: one Foo, two versions, nothing lost."""

from __future__ import annotations

import json

import pytest
import yaml

from hack.product import LocalProduct
from tests.e2e.test_admission import apply_foo, foo_yaml, get_foo


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
