"""docs/install.md's upgrade, run as written, from every past release, with Helm 3 and Helm 4.

Each past release's chart comes from its commit (hack.release.pipeline.PAST_RELEASES: 0.1.0 and 0.2.0),
installed as a user did, with values of their own; then the `helm upgrade` line of install.md's
"3. Upgrade" section runs in a shell, as written (`helm` on PATH is the Helm under test,
`foo-operator-$VERSION.tgz` this checkout's chart packaged, as step 1 leaves it). The release must
then hold exactly what a fresh install of this chart with the same values renders, keep the
generated CA, and `--reuse-values` must be refused before anything changes, naming the fix.

A plane of its own: the chart installs the Foo CRD, the APIService and webhooks for every namespace,
which the session's plane (and its foo-operator) must not get. Its pods run on kwok's node (they
report Ready; no process behind them), which is all Helm's `--wait` and these checks need: the
upgrade's effect on running pods, under load, is tests/e2e/test_release.py's, on a real node.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from hack.plane.binaries import BUILD_SCRIPT, find_binaries, helm4
from hack.plane.cluster import LocalControlPlane
from hack.release.pipeline import PAST_RELEASES, project_version

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART = REPO_ROOT / "charts" / "foo-operator"
RELEASE, NAMESPACE = "foo-operator", "foo-system"  # as docs/install.md names them
VERSION = project_version()
# A user's values, valid for every past chart's schema: each changes something the chart renders.
USER_VALUES: dict[str, Any] = {
    "defaultImage": "registry.example/nginx:1.27",
    "webhook": {"replicas": 1, "timeoutSeconds": 7},
    "insights": {"replicas": 1},
    "controller": {"workers": 4},
}
REFUSAL = "they come from an older chart, as `helm upgrade --reuse-values` keeps them"


def documented_upgrade() -> str:
    """The `helm upgrade` command of install.md's "3. Upgrade" section (its first block)."""
    text = (REPO_ROOT / "docs" / "install.md").read_text()
    section = text.split("## 3. Upgrade", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block, "docs/install.md's Upgrade section has no sh block"
    (line,) = [ln for ln in block.group(1).splitlines() if ln.startswith("helm upgrade")]
    return line


@dataclass(frozen=True)
class Helm:
    version: str
    binary: Path
    bin_dir: Path  # a directory with `helm` in it, for PATH


@pytest.fixture(scope="module")
def plane(built: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalControlPlane]:
    with LocalControlPlane(tmp_path_factory.mktemp("upgrade-plane"), nodes=1) as plane:
        yield plane


@pytest.fixture(scope="module")
def helms(built: None, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Helm]:
    # Seconds once cached; else built now, at the lowest priority (hack/build.sh helm4).
    subprocess.run(["bash", str(BUILD_SCRIPT), "helm4"], check=True, capture_output=True, timeout=3600)
    found = {"3": find_binaries().helm, "4": helm4()}
    helms = {}
    for major, binary in found.items():
        bin_dir = tmp_path_factory.mktemp(f"helm{major}")
        (bin_dir / "helm").symlink_to(binary)
        helms[major] = Helm(major, binary, bin_dir)
    return helms


@pytest.fixture(scope="module")
def past_charts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each past release's chart directory, from its commit."""
    charts = {}
    for version, commit in PAST_RELEASES.items():
        archive = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "archive", commit, "charts/foo-operator"], capture_output=True, check=True
        )
        into = tmp_path_factory.mktemp(f"chart-{version}")
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(into, filter="data")
        charts[version] = into / "charts" / "foo-operator"
    return charts


@pytest.fixture
def workdir(tmp_path: Path, helms: dict[str, Helm]) -> Path:
    """Where the user stands after step 1: this checkout's chart as foo-operator-$VERSION.tgz."""
    result = subprocess.run(
        [str(helms["3"].binary), "package", str(CHART), "--destination", str(tmp_path)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / f"foo-operator-{VERSION}.tgz").is_file()
    return tmp_path


def run(plane: LocalControlPlane, helm: Helm, cwd: Path, command: str) -> subprocess.CompletedProcess[str]:
    """`command` in bash as the user runs it: their helm on PATH, their kubeconfig, VERSION set."""
    env = {
        **plane.env(),
        "PATH": f"{helm.bin_dir}{os.pathsep}{plane.bin.kubectl.parent}{os.pathsep}{os.environ['PATH']}",
        "VERSION": VERSION,
        "HELM_CACHE_HOME": str(cwd / ".helm-cache"),
        "HELM_CONFIG_HOME": str(cwd / ".helm-config"),
        "HELM_DATA_HOME": str(cwd / ".helm-data"),
    }
    return subprocess.run(
        ["bash", "-c", f"set -euo pipefail\n{command}"], cwd=cwd, env=env, capture_output=True, text=True, timeout=400
    )


@pytest.fixture
def installed(
    request: pytest.FixtureRequest,
    plane: LocalControlPlane,
    helms: dict[str, Helm],
    past_charts: dict[str, Path],
    workdir: Path,
) -> Iterator[tuple[Helm, str]]:
    """The past release `previous` installed with the user's values by the Helm under test."""
    major, previous = request.param
    helm = helms[major]
    (workdir / "my-values.yaml").write_text(yaml.safe_dump(USER_VALUES))
    chart = past_charts[previous]
    install = (
        f"helm install {RELEASE} {chart} --namespace {NAMESPACE} --create-namespace -f my-values.yaml "
        "--wait --timeout=180s"
    )
    result = run(plane, helm, workdir, install)
    assert result.returncode == 0, result.stderr
    try:
        yield helm, previous
    finally:
        run(plane, helm, workdir, f"helm uninstall {RELEASE} -n {NAMESPACE} --wait --timeout=120s")


CASES = [(major, previous) for major in ("3", "4") for previous in PAST_RELEASES]
IDS = [f"helm{major}-from-{previous}" for major, previous in CASES]


def _objects(manifest: str) -> dict[tuple[str, str], dict[str, Any]]:
    """The objects of a manifest by kind and name, without what generated mode makes anew each
    render (the Secret's data, the caBundles) and without Helm's own comments."""
    objects = {}
    for doc in yaml.safe_load_all(manifest):
        if not doc:
            continue
        text = json.dumps(doc)
        text = re.sub(r'"caBundle": "[^"]*"', '"caBundle": "<ca>"', text)
        doc = json.loads(text)
        if doc["kind"] == "Secret" and doc.get("type") == "kubernetes.io/tls":
            doc["data"] = {k: "<generated>" for k in doc.get("data", {})}
        objects[(doc["kind"], doc["metadata"]["name"])] = doc
    return objects


def _secret(plane: LocalControlPlane, name: str) -> dict[str, Any] | None:
    result = plane.kubectl("get", "secret", name, "-n", NAMESPACE, "-o", "json", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else None


def _ca_bundles(plane: LocalControlPlane) -> set[str]:
    hooks = [
        json.loads(plane.kubectl("get", kind, RELEASE, "-o", "json").stdout)
        for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration")
    ]
    crd = json.loads(plane.kubectl("get", "crd", "foos.samplecontroller.k8s.io", "-o", "json").stdout)
    apiservice = json.loads(
        plane.kubectl("get", "apiservice", "v1alpha1.insights.samplecontroller.k8s.io", "-o", "json").stdout
    )
    return {
        *(h["webhooks"][0]["clientConfig"]["caBundle"] for h in hooks),
        crd["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"],
        apiservice["spec"]["caBundle"],
    }


def assert_a_fresh_install_with_the_users_values(
    plane: LocalControlPlane, helm: Helm, workdir: Path, previous: str, old_ca: str
) -> None:
    """The release holds what `helm template` of this chart renders with the user's values (manifest
    and hooks; generated TLS material aside), and generated mode kept its CA."""
    values = json.loads(run(plane, helm, workdir, f"helm get values {RELEASE} -n {NAMESPACE} -o json").stdout)
    assert values == USER_VALUES, "the values the user set are kept, and only those"
    manifest = run(plane, helm, workdir, f"helm get manifest {RELEASE} -n {NAMESPACE}").stdout
    manifest += "\n---\n" + run(plane, helm, workdir, f"helm get hooks {RELEASE} -n {NAMESPACE}").stdout
    fresh = run(
        plane, helm, workdir, f"helm template {RELEASE} foo-operator-$VERSION.tgz -n {NAMESPACE} -f my-values.yaml"
    )
    assert fresh.returncode == 0, fresh.stderr
    got, want = _objects(manifest), _objects(fresh.stdout)
    assert sorted(got) == sorted(want)
    for key, obj in want.items():
        assert got[key] == obj, f"{key} after the upgrade from {previous} is not what a fresh install renders"
    # generated mode kept its CA: the same in the Secret of its new name and in every caBundle.
    moved = _secret(plane, f"{RELEASE}-webhook-generated-tls")
    assert moved is not None and moved["data"]["ca.crt"] == old_ca
    assert _ca_bundles(plane) == {old_ca}
    assert _secret(plane, f"{RELEASE}-webhook-tls") is None, "the old chart's Secret is gone"
    history = json.loads(run(plane, helm, workdir, f"helm history {RELEASE} -n {NAMESPACE} -o json").stdout)
    assert [(h["revision"], h["status"]) for h in history] == [(1, "superseded"), (2, "deployed")]


def _generated_ca(plane: LocalControlPlane) -> str:
    """The CA a past release's generated mode keeps, which every caBundle holds."""
    old_ca: str = (_secret(plane, f"{RELEASE}-webhook-tls") or {})["data"]["ca.crt"]
    assert _ca_bundles(plane) == {old_ca}
    return old_ca


@pytest.mark.parametrize("installed", CASES, ids=IDS, indirect=True)
def test_the_documented_upgrade_from_a_past_release_is_a_fresh_install_with_the_users_values(
    plane: LocalControlPlane, installed: tuple[Helm, str], workdir: Path
) -> None:
    helm, previous = installed
    old_ca = _generated_ca(plane)
    result = run(plane, helm, workdir, documented_upgrade())
    assert result.returncode == 0, f"{documented_upgrade()}\n{result.stderr}"
    assert_a_fresh_install_with_the_users_values(plane, helm, workdir, previous, old_ca)


# What --reuse-values does from each past release: refused (its values lack keys the templates
# cannot do without: templates/validate/values.yaml), or the same as the documented upgrade
# (0.2.0's lack only image.architectures, whose default the templates take). Nothing in between.
REUSE_REFUSED = {"0.1.0": True, "0.2.0": False}


@pytest.mark.parametrize("installed", CASES, ids=IDS, indirect=True)
def test_reuse_values_from_a_past_release_is_refused_or_a_fresh_install_never_less(
    plane: LocalControlPlane, installed: tuple[Helm, str], workdir: Path
) -> None:
    helm, previous = installed
    old_ca = _generated_ca(plane)
    reuse = documented_upgrade().replace("--reset-then-reuse-values", "--reuse-values")
    assert reuse != documented_upgrade()
    result = run(plane, helm, workdir, reuse)
    assert (result.returncode != 0) == REUSE_REFUSED[previous], result.stderr
    if result.returncode == 0:
        assert_a_fresh_install_with_the_users_values(plane, helm, workdir, previous, old_ca)
        return
    assert REFUSAL in result.stderr and "--reset-then-reuse-values" in result.stderr, result.stderr
    assert "nil pointer" not in result.stderr
    history = json.loads(run(plane, helm, workdir, f"helm history {RELEASE} -n {NAMESPACE} -o json").stdout)
    assert [(h["revision"], h["status"]) for h in history] == [(1, "deployed")], "nothing changed"


def test_the_upgrade_section_names_the_command_these_tests_run() -> None:
    assert documented_upgrade() == (
        "helm upgrade foo-operator foo-operator-$VERSION.tgz -n foo-system --reset-then-reuse-values --wait"
    )
    # The refusal users meet, quoted in the same section.
    assert REFUSAL in (REPO_ROOT / "docs" / "install.md").read_text().replace("\n", " ")


def switch_to_rotator() -> str:
    """install.md's "Switching the TLS mode" command, as one line."""
    text = (REPO_ROOT / "docs" / "install.md").read_text()
    section = text.split("### Switching the TLS mode", 1)[1].split("\n### ", 1)[0]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block, "docs/install.md's Switching section has no sh block"
    return block.group(1).replace("\\\n", " ").strip()


@pytest.mark.parametrize("installed", [(major, "0.2.0") for major in ("3", "4")], ids=["helm3", "helm4"], indirect=True)
def test_a_generated_release_switches_to_rotator_once_on_this_chart(
    plane: LocalControlPlane, installed: tuple[Helm, str], workdir: Path
) -> None:
    """From 0.2.0 in one step the chart refuses (0.2.0 kept its pair in the Secret name the rotator
    uses, as kubernetes.io/tls: a type change the apiserver would refuse halfway through); after the
    documented upgrade the switch goes through, the rotator's Secret in place of the generated one.
    (The rotator itself runs on the real node: test_real_node.py.)"""
    helm, _ = installed
    refused = run(plane, helm, workdir, switch_to_rotator())
    assert refused.returncode != 0
    assert "upgrade to this chart with tls.mode=generated first" in refused.stderr, refused.stderr
    assert run(plane, helm, workdir, documented_upgrade()).returncode == 0
    switched = run(plane, helm, workdir, switch_to_rotator())
    assert switched.returncode == 0, switched.stderr
    secret = _secret(plane, f"{RELEASE}-webhook-tls")
    assert secret is not None and secret["type"] == "Opaque" and not secret.get("data"), "empty, for the rotator"
    assert _secret(plane, f"{RELEASE}-webhook-generated-tls") is None
