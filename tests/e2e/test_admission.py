"""Admission through the real kube-apiserver and kubectl: what a user types, what they read."""

from __future__ import annotations

import json
import re
import subprocess
from typing import Any

import pytest
import yaml

from hack.plane.cluster import LocalControlPlane
from hack.plane.product import OWN_NAMESPACE, LocalProduct
from tests.e2e.waiting import wait_for


def foo_yaml(
    name: str,
    *,
    replicas: int | None = 2,
    deployment: str | None = "web",
    image: str | None = None,
    version: str = "v1",
) -> str:
    spec: dict[str, object] = {}
    if version == "v1":
        dep = {k: v for k, v in {"name": deployment, "image": image}.items() if v is not None}
        if dep:
            spec["deployment"] = dep
    elif deployment is not None:
        spec["deploymentName"] = deployment
    if replicas is not None:
        spec["replicas"] = replicas
    return yaml.safe_dump(
        {"apiVersion": f"samplecontroller.k8s.io/{version}", "kind": "Foo", "metadata": {"name": name}, "spec": spec}
    )


def apply_foo(
    plane: LocalControlPlane, namespace: str, name: str, *flags: str, check: bool = True, **fields: Any
) -> subprocess.CompletedProcess[str]:
    """``kubectl apply <flags>`` of the Foo ``foo_yaml(name, **fields)`` writes, in ``namespace``."""
    return plane.kubectl("apply", *flags, "-n", namespace, "-f", "-", check=check, input=foo_yaml(name, **fields))


def get_foo(plane: LocalControlPlane, namespace: str, name: str, version: str = "v1") -> dict:  # type: ignore[type-arg]
    out = plane.kubectl("get", f"foos.{version}.samplecontroller.k8s.io", name, "-n", namespace, "-o", "json")
    return json.loads(out.stdout)


@pytest.mark.smoke
def test_replicas_above_ten_is_rejected_with_the_webhooks_field_message(
    foo_operator: LocalProduct, namespace: str
) -> None:
    plane = foo_operator.plane
    result = apply_foo(plane, namespace, "too-many", replicas=11, check=False)
    assert result.returncode != 0
    # kubectl renders a 422 with causes in its own form (one cause: one line).
    assert result.stderr.strip() == (
        'The Foo "too-many" is invalid: spec.replicas: Invalid value: 11: must be less than or equal to 10'
    )
    assert plane.kubectl("get", "foo", "too-many", "-n", namespace, check=False).returncode != 0


@pytest.mark.smoke
def test_every_field_error_is_listed_at_once(foo_operator: LocalProduct, namespace: str) -> None:
    result = apply_foo(foo_operator.plane, namespace, "broken", replicas=0, deployment=None, check=False)
    assert "spec.deployment.name: Required value" in result.stderr
    assert "spec.replicas: Invalid value: 0: must be greater than or equal to 1" in result.stderr


@pytest.mark.smoke
def test_a_valid_foo_is_created_and_comes_back_defaulted(foo_operator: LocalProduct, namespace: str) -> None:
    plane = foo_operator.plane
    apply_foo(plane, namespace, "plain", replicas=None)
    foo = get_foo(plane, namespace, "plain")
    assert foo["spec"] == {"deployment": {"name": "web", "image": "nginx:latest"}, "replicas": 1}


def test_server_dry_run_and_diff_get_the_same_answer_as_a_real_write(
    foo_operator: LocalProduct, namespace: str
) -> None:
    plane = foo_operator.plane
    dry = apply_foo(plane, namespace, "dry", "--dry-run=server", replicas=11, check=False)
    assert dry.returncode != 0 and "must be less than or equal to 10" in dry.stderr
    ok = apply_foo(plane, namespace, "dry", "--server-side", "--dry-run=server", "-o", "json", replicas=None)
    assert json.loads(ok.stdout)["spec"]["deployment"]["image"] == "nginx:latest"
    diff = plane.kubectl("diff", "-n", namespace, "-f", "-", check=False, input=foo_yaml("dry", replicas=11))
    assert diff.returncode > 1 and "must be less than or equal to 10" in diff.stderr
    assert plane.kubectl("get", "foo", "dry", "-n", namespace, check=False).returncode != 0


@pytest.mark.smoke
def test_deployment_name_cannot_be_changed(foo_operator: LocalProduct, namespace: str) -> None:
    plane = foo_operator.plane
    apply_foo(plane, namespace, "fixed", deployment="first")
    result = plane.kubectl(
        "patch",
        "foo",
        "fixed",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"spec":{"deployment":{"name":"second"}}}',
        check=False,
    )
    assert result.returncode != 0
    assert 'spec.deployment.name: Invalid value: "second": field is immutable' in result.stderr


@pytest.mark.smoke
def test_kubectl_scale_works_within_bounds_and_is_validated_beyond(foo_operator: LocalProduct, namespace: str) -> None:
    plane = foo_operator.plane
    apply_foo(plane, namespace, "scalable", replicas=1)
    plane.kubectl("scale", "foo/scalable", "-n", namespace, "--replicas=3")
    assert get_foo(plane, namespace, "scalable")["spec"]["replicas"] == 3
    result = plane.kubectl("scale", "foo/scalable", "-n", namespace, "--replicas=30", check=False)
    assert result.returncode != 0 and "must be less than or equal to 10" in result.stderr
    assert get_foo(plane, namespace, "scalable")["spec"]["replicas"] == 3


def test_v1alpha1_use_shows_a_deprecation_warning(foo_operator: LocalProduct, namespace: str) -> None:
    result = apply_foo(foo_operator.plane, namespace, "old-style", version="v1alpha1")
    assert (
        "Warning: samplecontroller.k8s.io/v1alpha1 Foo is deprecated; use samplecontroller.k8s.io/v1 Foo"
        in result.stderr
    )


def test_kubectl_get_shows_the_printer_columns(foo_operator: LocalProduct, namespace: str) -> None:
    plane = foo_operator.plane
    apply_foo(plane, namespace, "columns", replicas=2)
    lines = plane.kubectl("get", "foos", "-n", namespace).stdout.splitlines()
    assert lines[0].split() == ["NAME", "DEPLOYMENT", "REPLICAS", "AVAILABLE", "READY", "AGE"]
    assert lines[1].split()[:3] == ["columns", "web", "2"]
    wide = plane.kubectl("get", "foos", "-n", namespace, "-o", "wide").stdout.splitlines()
    assert wide[0].split()[-1] == "IMAGE" and wide[1].split()[-1] == "nginx:latest"


def test_kubectl_explain_describes_the_spec(foo_operator: LocalProduct) -> None:
    # kube-apiserver republishes a CRD's OpenAPI a moment after each update of the CRD (another
    # test may just have made one): until then explain says it cannot find the resource.
    out = wait_for(
        "kubectl explain to find the Foo schema", lambda: foo_operator.plane.kubectl("explain", "foo.spec").stdout
    )
    assert "deployment" in out and "Number of replicas, 1 to 10" in out


def test_an_image_that_would_forge_a_log_line_or_drive_a_terminal_is_refused(
    foo_operator: LocalProduct, namespace: str
) -> None:
    image = "nginx:latest\n2026-11-23T12:00:00Z INFO synced\x1b]52;c;aGk=\x07\x1b[2J"
    result = apply_foo(foo_operator.plane, namespace, "escapes", image=image, check=False)
    assert result.returncode != 0
    assert 'spec.deployment.image: Invalid value: "nginx:latest\\n2026-11-23T12:00:00Z' in result.stderr
    assert "invalid reference format" in result.stderr and "\x1b" not in result.stderr


@pytest.mark.smoke
def test_where_no_webhook_is_asked_the_crd_schema_still_holds_every_bound(foo_operator: LocalProduct) -> None:
    # The webhooks skip the operator's own namespace; a Foo there meets the schema alone.
    plane = foo_operator.plane
    plane.kubectl("create", "namespace", OWN_NAMESPACE, check=False)
    try:
        huge = apply_foo(plane, OWN_NAMESPACE, "huge", replicas=100000, deployment="Not_A_Name", check=False)
        assert huge.returncode != 0
        assert (
            "spec.replicas: Invalid value: 100000: spec.replicas in body should be less than or equal to 10"
            in huge.stderr
        )
        assert (
            'spec.deployment.name: Invalid value: "Not_A_Name": spec.deployment.name in body should match'
            in huge.stderr
        )
        forged = apply_foo(plane, OWN_NAMESPACE, "forged-line", image="nginx:1.27\nINFO synced", check=False)
        assert forged.returncode != 0 and "spec.deployment.image in body should match" in forged.stderr
        legacy = apply_foo(plane, OWN_NAMESPACE, "legacy-huge", replicas=100000, version="v1alpha1", check=False)
        assert legacy.returncode != 0 and "should be less than or equal to 10" in legacy.stderr

        apply_foo(plane, OWN_NAMESPACE, "schema-defaulted", replicas=None)
        assert get_foo(plane, OWN_NAMESPACE, "schema-defaulted")["spec"] == {
            "deployment": {"name": "web", "image": "nginx:latest"},
            "replicas": 1,
        }
        renamed = plane.kubectl(
            "patch",
            "foo",
            "schema-defaulted",
            "-n",
            OWN_NAMESPACE,
            "--type=merge",
            "-p",
            '{"spec":{"deployment":{"name":"other"}}}',
            check=False,
        )
        assert renamed.returncode != 0
        # The CEL rule's refusal names the value's type on v1.27 and v1.34 ("string"), the value
        # itself on v1.37 ("other").
        assert re.search(
            r'spec\.deployment\.name: Invalid value: "(string|other)": field is immutable', renamed.stderr
        ), renamed.stderr
    finally:
        plane.kubectl("delete", "namespace", OWN_NAMESPACE, "--wait=false", check=False)
