"""deploy/foo-operator.yaml is `helm template` of the chart as it is now (hack/release/manifests.py), and
holds no private key: people without Helm get what Helm users get, in the rotator TLS mode."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hack.plane.binaries import find_binaries
from hack.release import manifests

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def rendered() -> str:
    if not find_binaries().helm.is_file():
        pytest.skip("helm is not built: run `bash hack/build.sh`")
    return manifests.render()


def test_the_committed_manifests_are_up_to_date(rendered: str) -> None:
    assert (ROOT / "deploy" / "foo-operator.yaml").read_text() == rendered, (
        "deploy/foo-operator.yaml is out of date: run `.venv/bin/python -m hack.release.manifests`"
    )


def test_no_private_key_and_no_helm_claims_in_the_file(rendered: str) -> None:
    assert "PRIVATE KEY" not in rendered and "tls.key:" not in rendered
    objects = [o for o in yaml.safe_load_all(rendered) if o]
    assert objects[0] == {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "foo-system"}}
    for obj in objects:
        labels = obj["metadata"].get("labels") or {}
        assert "helm.sh/chart" not in labels and labels.get("app.kubernetes.io/managed-by") in (None, "kubectl")
    webhook = next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "foo-operator-webhook")
    assert "--cert-rotation" in webhook["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not [o for o in objects if o["kind"] == "Pod"]  # no `helm test` Pod
