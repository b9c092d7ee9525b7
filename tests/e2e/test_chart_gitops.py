"""docs/gitops.md, run and checked: its Argo CD and Flux objects against their tools' CRDs on a real
kube-apiserver, its `kubectl` commands as written, and the chart as those tools render it (Helm 3
and Helm 4, no cluster to look anything up in) the same bytes every time.

The CRDs are Argo CD's and Flux's own (hack/build.sh gitops-crds, from their Go modules): the
apiserver checks every field of the examples against them, with kubectl's strict field validation
(an unknown or misspelt field is an error, not dropped). Neither tool runs here: what they would
do with the objects is their docs'; what the chart gives them to do it with is this module's.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from hack.plane.binaries import BUILD_SCRIPT, find_binaries, gitops_crds, helm4
from hack.plane.cluster import LocalControlPlane
from tests.e2e.waiting import wait_for

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART = REPO_ROOT / "charts" / "foo-operator"
GITOPS = REPO_ROOT / "docs" / "gitops.md"
MODES = ("generated", "certManager", "existingSecret", "rotator")


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", GITOPS.read_text(), re.S)


def saved_as() -> dict[str, str]:
    """Each YAML block by the file name the page tells the user to save it as."""
    text = GITOPS.read_text()
    files = {}
    for match in re.finditer(r"Save\s+this\s+as\s+`([^`]+)`[^`]*?```yaml\n(.*?)```", text, re.S):
        files[match.group(1)] = match.group(2)
    return files


def objects(name: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(saved_as()[name]) if doc]


def chart_values() -> dict[str, dict[str, Any]]:
    """The chart values each example carries: the Application's valuesObject, the HelmRelease's values."""
    (application,) = [o for o in objects("foo-operator-argocd.yaml") if o["kind"] == "Application"]
    (release,) = [o for o in objects("foo-operator-flux.yaml") if o["kind"] == "HelmRelease"]
    return {"argocd": application["spec"]["source"]["helm"]["valuesObject"], "flux": release["spec"]["values"]}


@pytest.fixture(scope="module")
def helms() -> dict[str, Path]:
    subprocess.run(["bash", str(BUILD_SCRIPT), "helm4"], check=True, capture_output=True, timeout=3600)
    return {"3": find_binaries().helm, "4": helm4()}


def template(helm: Path, values: dict[str, Any], scratch: Path) -> str:
    """`helm template` as a GitOps tool runs it: the release's name and namespace, no cluster."""
    path = scratch / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    result = subprocess.run(
        [str(helm), "template", "foo-operator", str(CHART), "-n", "foo-system", "-f", str(path)],
        capture_output=True,
        text=True,
        env={**env, "HELM_CACHE_HOME": str(scratch / "c"), "HELM_CONFIG_HOME": str(scratch / "g")},
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


# ----------------------------------------------------------------------------- the chart as rendered
@pytest.mark.parametrize("major", ["3", "4"])
@pytest.mark.parametrize("mode", [m for m in MODES if m != "generated"])
def test_every_mode_but_generated_renders_the_same_bytes_twice(
    helms: dict[str, Path], tmp_path: Path, major: str, mode: str
) -> None:
    values: dict[str, Any] = {"tls": {"mode": mode}, "migrateStorage": {"job": {"enabled": True}}}
    if mode == "existingSecret":
        values["tls"]["existingSecret"] = {"name": "mine", "caBundle": "LS0tLS1CRUdJTg=="}
    assert template(helms[major], values, tmp_path) == template(helms[major], values, tmp_path)


@pytest.mark.parametrize("major", ["3", "4"])
def test_generated_mode_does_not_render_the_same_twice(helms: dict[str, Path], tmp_path: Path, major: str) -> None:
    """The reason docs/gitops.md tells GitOps users to pick another mode."""
    assert template(helms[major], {}, tmp_path) != template(helms[major], {}, tmp_path)


@pytest.mark.parametrize("major", ["3", "4"])
@pytest.mark.parametrize("example", ["argocd", "flux"])
def test_the_values_each_example_carries_render_the_same_bytes_every_time(
    helms: dict[str, Path], tmp_path: Path, major: str, example: str
) -> None:
    values = chart_values()[example]
    assert values["tls"]["mode"] in ("rotator", "certManager")
    first = template(helms[major], values, tmp_path)
    assert first == template(helms[major], values, tmp_path)
    assert "caBundle:" not in first, "the webhook or cert-manager writes them, in the live objects"


# ----------------------------------------------------------------------------- the examples, applied
@pytest.fixture(scope="module")
def gitops_plane(control_plane: LocalControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The session's plane with Argo CD's and Flux's CRDs and their namespaces; a directory to work in."""
    subprocess.run(["bash", str(BUILD_SCRIPT), "gitops-crds"], check=True, capture_output=True, timeout=600)
    control_plane.kubectl("apply", "--server-side", "-f", str(gitops_crds()))

    def established(crd: str) -> bool:
        status = json.loads(control_plane.kubectl("get", "crd", crd, "-o", "json").stdout).get("status") or {}
        return any(c["type"] == "Established" and c["status"] == "True" for c in status.get("conditions") or [])

    for crd in (
        "applications.argoproj.io",
        "helmreleases.helm.toolkit.fluxcd.io",
        "ocirepositories.source.toolkit.fluxcd.io",
    ):
        wait_for(f"the CRD {crd} to be established", lambda crd=crd: established(crd))
    for namespace in ("argocd", "flux-system"):
        control_plane.kubectl("create", "namespace", namespace, check=False)
    workdir = tmp_path_factory.mktemp("gitops")
    try:
        yield workdir
    finally:
        for namespace in ("argocd", "flux-system"):
            control_plane.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def run_as_written(plane: LocalControlPlane, cwd: Path, block: str) -> subprocess.CompletedProcess[str]:
    env = {**plane.env(), "PATH": f"{plane.bin.kubectl.parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(
        ["bash", "-c", f"set -euo pipefail\n{block}"], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_every_command_of_the_page_runs_as_written_and_the_apiserver_takes_every_object(
    control_plane: LocalControlPlane, gitops_plane: Path
) -> None:
    """The page's files saved as it says, its `kubectl` commands run in its order: every object is
    created, checked against Argo CD's or Flux's schema with strict field validation."""
    for name, text in saved_as().items():
        (gitops_plane / name).write_text(text)
    key = ec.generate_private_key(ec.SECP256R1())
    (gitops_plane / "cosign.pub").write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    commands = blocks("sh")
    assert len(commands) == 3 and all("kubectl" in c for c in commands)
    for command in commands:
        result = run_as_written(control_plane, gitops_plane, command)
        assert result.returncode == 0, f"{command}\n{result.stderr}"
        assert "Warning" not in result.stderr, result.stderr  # e.g. unknown field "spec.sorce"
    for name in ("foo-operator-argocd.yaml", "foo-operator-flux.yaml"):
        for obj in objects(name):
            kind, meta = obj["kind"], obj["metadata"]
            control_plane.kubectl("get", kind, meta["name"], "-n", meta["namespace"])


def test_a_misspelt_field_in_an_example_would_be_refused(control_plane: LocalControlPlane, gitops_plane: Path) -> None:
    """What the test above relies on: the CRDs' schemas and kubectl's strict validation are live."""
    for name in ("foo-operator-argocd.yaml", "foo-operator-flux.yaml"):
        broken = [o for o in objects(name) if o["kind"] != "Secret"][-1]
        broken["spec"]["targetNamespaec"] = "typo"
        broken["metadata"]["name"] += "-typo"
        path = gitops_plane / f"typo-{name}"
        path.write_text(yaml.safe_dump(broken))
        result = control_plane.kubectl("apply", "--dry-run=server", "-f", str(path), check=False)
        assert result.returncode != 0 and 'unknown field "spec.targetNamespaec"' in result.stderr, result.stderr
