"""The krew release of the kubectl plugin: one self-contained archive per platform, a manifest with
each one's sha256, an SBOM of what they carry; the dependencies pinned by hack/plugin.lock."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tarfile
import tomllib
from pathlib import Path

import pytest
import yaml

from hack.release import pipeline as release
from hack.release.pipeline import krew

VERSION = "1.2.3"
URI = "https://example.org/releases/v1.2.3/{name}"
ROOT = Path(__file__).resolve().parents[2]


def _fake_pex(tmp_path: Path) -> Path:
    """A stand-in for a PEX: a python3 script that says how it was entered."""
    pex = tmp_path / "pex" / krew.COMMAND
    pex.parent.mkdir(parents=True, exist_ok=True)
    pex.write_text(
        '#!/usr/bin/env python3\nimport os, sys\nprint(os.environ.get("PEX_MODULE", "main"), *sys.argv[1:])\n'
    )
    pex.chmod(0o755)
    return pex


@pytest.fixture
def built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    monkeypatch.setattr(krew, "plugin_pex", lambda source, os_, arch: _fake_pex(tmp_path / f"{os_}-{arch}"))
    return krew.release_plugin(ROOT, version=VERSION, out_dir=tmp_path / "dist", uri=URI)


def test_the_plugin_is_named_as_krews_guide_asks_and_found_as_kubectl_finds_plugins() -> None:
    assert krew.PLUGIN == "foo-operator"  # a vendor prefix, not the generic `foo`
    assert krew.COMMAND == "kubectl-" + krew.PLUGIN.replace("-", "_")
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert {krew.COMMAND, krew.COMPLETION} <= set(scripts)


def test_one_archive_per_platform_and_a_manifest_naming_each_sha256(built: list[Path]) -> None:
    *archives, manifest_path, sbom = built
    assert [a.name for a in archives] == [
        f"kubectl-foo-operator-{VERSION}-{os_}-{arch}.tar.gz" for os_, arch in krew.PLATFORMS
    ]
    assert manifest_path.name == "foo-operator.yaml" and sbom.name == f"kubectl-foo-operator-{VERSION}.cdx.json"
    manifest = yaml.safe_load(manifest_path.read_text())
    assert (manifest["apiVersion"], manifest["kind"]) == ("krew.googlecontainertools.github.com/v1alpha2", "Plugin")
    assert manifest["metadata"]["name"] == "foo-operator" and manifest["spec"]["version"] == "v1.2.3"
    by_platform = {
        (p["selector"]["matchLabels"]["os"], p["selector"]["matchLabels"]["arch"]): p
        for p in manifest["spec"]["platforms"]
    }
    assert set(by_platform) == set(krew.PLATFORMS)
    for archive in archives:
        os_, arch = archive.name.removesuffix(".tar.gz").rsplit("-", 2)[1:]
        entry = by_platform[(os_, arch)]
        assert entry["sha256"] == hashlib.sha256(archive.read_bytes()).hexdigest()
        assert entry["uri"] == f"https://example.org/releases/v1.2.3/{archive.name}"
        assert entry["bin"] == "kubectl-foo_operator"
    assert "python3 (3.11, 3.12 or 3.13)" in manifest["spec"]["caveats"]


def test_each_archive_holds_the_pex_the_completion_launcher_and_the_licence(built: list[Path]) -> None:
    with tarfile.open(built[0]) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert set(members) == {"kubectl-foo_operator", "kubectl_complete-foo_operator", "LICENSE"}
    assert members["kubectl-foo_operator"].mode == members["kubectl_complete-foo_operator"].mode == 0o755
    assert {m.mtime for m in members.values()} == {0}


def test_the_same_inputs_make_the_same_archive_byte_for_byte(tmp_path: Path) -> None:
    pex = _fake_pex(tmp_path)
    one = krew.plugin_archive(pex, version=VERSION, os_="linux", arch="amd64", out_dir=tmp_path / "a")
    os.utime(pex, (1, 1))
    two = krew.plugin_archive(pex, version=VERSION, os_="linux", arch="amd64", out_dir=tmp_path / "b")
    assert one.read_bytes() == two.read_bytes()


def test_the_completion_launcher_enters_the_pex_at_its_completion_module(built: list[Path], tmp_path: Path) -> None:
    with tarfile.open(built[0]) as tar:
        tar.extractall(tmp_path / "store", filter="data")
    (tmp_path / "path").mkdir()
    link = tmp_path / "path" / "kubectl_complete-foo_operator"
    link.symlink_to(tmp_path / "store" / "kubectl_complete-foo_operator")  # as the caveats say to link it
    result = subprocess.run([str(link), "health", ""], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "kubectl_foo.completion:main health \n"


def test_the_sbom_names_every_pinned_distribution_and_the_plugin(built: list[Path]) -> None:
    bom = json.loads(built[-1].read_text())
    purls = {c["purl"] for c in bom["components"]}
    assert f"pkg:pypi/foo-operator@{VERSION}" in purls
    assert {f"pkg:pypi/{name}@{version}" for name, version in krew.locked_requirements()} <= purls
    assert bom["metadata"]["component"]["type"] == "application"


def test_the_lock_pins_what_pyproject_asks_for_with_hashes() -> None:
    lock = json.loads(krew.LOCK.read_text())
    pinned = {name for name, _ in krew.locked_requirements()}
    wanted = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for requirement in wanted:
        name = requirement.split(">")[0].split("<")[0].split("=")[0].strip().lower().replace("_", "-")
        assert name in pinned, (
            f"{name}: pyproject.toml asks for it, hack/plugin.lock does not pin it (python -m hack.release.krew lock)"
        )
    for locked in lock["locked_resolves"][0]["locked_requirements"]:
        assert all(a["algorithm"] == "sha256" and a["hash"] for a in locked["artifacts"]), locked["project_name"]
    assert lock["requires_python"] == [f"CPython<3.{int(krew.PYTHONS[-1][2:]) + 1},>={krew.PYTHONS[0]}"]


def test_the_release_builds_the_plugin_for_the_platforms_it_is_asked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(krew, "plugin_pex", lambda source, os_, arch: _fake_pex(tmp_path / f"{os_}-{arch}"))
    made = release.Release(
        version=VERSION,
        source=ROOT,
        dist=tmp_path / "dist",
        revision="r",
        epoch=0,
        plugin_platforms=(("linux", "amd64"),),
    )
    made.assets.mkdir(parents=True)
    assert release.build_plugin in release.ARTIFACTS
    release.build_plugin(made)
    assert [p.name for p in made.files] == [
        f"kubectl-foo-operator-{VERSION}-linux-amd64.tar.gz",
        "foo-operator.yaml",
        f"kubectl-foo-operator-{VERSION}.cdx.json",
    ]
    platform = yaml.safe_load((made.assets / "foo-operator.yaml").read_text())["spec"]["platforms"][0]
    assert platform["uri"].endswith(f"/releases/download/v{VERSION}/kubectl-foo-operator-{VERSION}-linux-amd64.tar.gz")


def test_a_past_release_without_the_plugin_ships_none(tmp_path: Path) -> None:
    made = release.Release(version=VERSION, source=tmp_path, dist=tmp_path / "dist", revision="r", epoch=0)
    release.build_plugin(made)
    assert made.files == []
