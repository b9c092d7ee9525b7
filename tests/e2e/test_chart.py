"""The Helm chart's rendered objects on the real control plane: every TLS mode passes a
server-side dry run into a namespace that enforces the `restricted` Pod Security Standard.

The chart installed, upgraded, tested and uninstalled with its pods running is
tests/e2e/test_real_node.py: the image built here, on a real kubelet, nothing played.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hack.plane.cluster import LocalControlPlane

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART = REPO_ROOT / "charts" / "foo-operator"


# ----------------------------------------------------------------------------- rendered objects
def render(*args: str, release: str = "dry-run") -> list[dict[str, Any]]:
    from hack.plane.binaries import find_binaries

    out = subprocess.run(
        [str(find_binaries().helm), "template", release, str(CHART), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={**os.environ, "KUBECONFIG": ""},
    )
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def server_dry_run(plane: LocalControlPlane, docs: list[dict[str, Any]]) -> str:
    """Create (or, for what exists, replace) every object with --dry-run=server; returns stderr.

    Not `apply`: the session's Foo CRD may carry a `url` clientConfig from another manager, and
    merging the chart's `service` into it would make an object neither would write.
    """
    listing = {"apiVersion": "v1", "kind": "List", "items": docs}
    existing = json.loads(
        plane.kubectl("get", "--ignore-not-found", "-o", "json", "-f", "-", input=json.dumps(listing)).stdout
        or '{"items": []}'
    )
    present = {(o["kind"], o["metadata"]["name"]) for o in existing.get("items", [])}
    new = [d for d in docs if (d["kind"], d["metadata"]["name"]) not in present]
    old = [d for d in docs if (d["kind"], d["metadata"]["name"]) in present]
    stderr = ""
    for verb, items in (("create", new), ("replace", old)):
        if items:
            result = plane.kubectl_objects(verb, items, "--dry-run=server")
            stderr += result.stderr
    return stderr


@pytest.fixture(scope="module")
def restricted_namespace(control_plane: LocalControlPlane) -> Iterator[str]:
    """A namespace enforcing the `restricted` Pod Security Standard: hardened pods or nothing."""
    name = f"foo-chart-dry-run-{os.getpid() % 10000}"
    control_plane.kubectl("create", "namespace", name)
    control_plane.kubectl(
        "label",
        "namespace",
        name,
        "pod-security.kubernetes.io/enforce=restricted",
        "pod-security.kubernetes.io/warn=restricted",
    )
    yield name
    control_plane.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.mark.parametrize(
    "mode", [pytest.param("generated", marks=pytest.mark.smoke), "certManager", "existingSecret", "rotator"]
)
def test_rendered_chart_passes_server_side_dry_run_in_every_tls_mode(
    control_plane: LocalControlPlane, restricted_namespace: str, mode: str
) -> None:
    args = ["--namespace", restricted_namespace, "--set", f"tls.mode={mode}"]
    if mode == "existingSecret":
        args += [
            "--set",
            "tls.existingSecret.name=my-tls",
            "--set-file",
            f"tls.existingSecret.caBundle={control_plane.ca_file}",
        ]
    docs = render(*args)
    # cert-manager's kinds need cert-manager's CRDs, which this plane does not have.
    checked = [d for d in docs if not d["apiVersion"].startswith("cert-manager.io/")]
    if mode == "certManager":
        assert {d["kind"] for d in docs} - {d["kind"] for d in checked} == {"Issuer", "Certificate"}
    stderr = server_dry_run(control_plane, checked)
    assert "Warning" not in stderr, stderr  # e.g. "would violate PodSecurity restricted"
