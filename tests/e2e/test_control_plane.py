"""Smoke spec for the local control plane: the ground every other e2e test stands on."""

from __future__ import annotations

import json
import uuid

import pytest

from hack.plane.cluster import LocalControlPlane

NGINX_DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata:
  name: nginx
spec:
  replicas: 2
  selector:
    matchLabels: {app: nginx}
  template:
    metadata:
      labels: {app: nginx}
    spec:
      containers:
      - name: nginx
        image: nginx:latest
"""


@pytest.mark.smoke
def test_kubectl_version_reports_the_built_version(control_plane: LocalControlPlane) -> None:
    versions = json.loads(control_plane.kubectl("version", "--output=json").stdout)
    # KUBEBUILDER_ASSETS / TEST_ASSET_* binaries carry whatever version the user brought.
    if "kubectl" not in control_plane.bin.user_supplied:
        assert versions["clientVersion"]["gitVersion"] == control_plane.version
    if "kube_apiserver" not in control_plane.bin.user_supplied:
        assert versions["serverVersion"]["gitVersion"] == control_plane.version


@pytest.mark.smoke
def test_readyz_says_ok(control_plane: LocalControlPlane) -> None:
    assert control_plane.kubectl("get", "--raw", "/readyz").stdout.strip() == "ok"


@pytest.mark.smoke
def test_nginx_deployment_becomes_available_on_the_kwok_node(control_plane: LocalControlPlane) -> None:
    namespace = f"smoke-{uuid.uuid4().hex[:8]}"
    control_plane.kubectl("create", "namespace", namespace)
    try:
        control_plane.kubectl("apply", "-n", namespace, "-f", "-", input=NGINX_DEPLOYMENT)
        control_plane.kubectl(
            "wait", "-n", namespace, "deployment/nginx", "--for=condition=Available", "--timeout=60s", timeout=90
        )

        deployment = json.loads(control_plane.kubectl("get", "-n", namespace, "deployment/nginx", "-o", "json").stdout)
        assert deployment["status"]["availableReplicas"] == 2
        pods = json.loads(
            control_plane.kubectl("get", "-n", namespace, "pods", "-l", "app=nginx", "-o", "json").stdout
        )["items"]
        assert len(pods) == 2
        for pod in pods:
            assert pod["spec"]["nodeName"] in control_plane.node_names
            assert pod["status"]["phase"] == "Running"
    finally:
        control_plane.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
