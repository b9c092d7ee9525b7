"""The krew release of the kubectl plugin: an archive krew can install, a manifest with its sha256."""

from __future__ import annotations

import hashlib
import os
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

from hack import release
from hack.krew import krew_manifest, plugin_archive, release_plugin

VERSION = "1.2.3"
URI = "https://example.org/releases/v1.2.3/kubectl-foo-1.2.3.tar.gz"


def _wheel(tmp_path: Path) -> Path:
    wheel = tmp_path / "wheels" / f"foo_operator-{VERSION}-py3-none-any.whl"
    wheel.parent.mkdir()
    wheel.write_bytes(b"PK\x05\x06" + bytes(18))  # an empty zip: the archive only carries it
    return wheel


def test_release_writes_the_archive_and_a_manifest_naming_its_sha256(tmp_path: Path) -> None:
    archive, manifest_path = release_plugin(_wheel(tmp_path), version=VERSION, out_dir=tmp_path / "dist", uri=URI)
    assert archive.name == "kubectl-foo-1.2.3.tar.gz" and manifest_path.name == "foo.yaml"
    manifest = yaml.safe_load(manifest_path.read_text())
    assert (manifest["apiVersion"], manifest["kind"]) == ("krew.googlecontainertools.github.com/v1alpha2", "Plugin")
    assert manifest["metadata"]["name"] == "foo" and manifest["spec"]["version"] == "v1.2.3"
    assert manifest["spec"]["shortDescription"] and manifest["spec"]["homepage"].startswith("https://")
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    platforms = manifest["spec"]["platforms"]
    assert {(p["selector"]["matchLabels"]["os"], p["selector"]["matchLabels"]["arch"]) for p in platforms} == {
        ("linux", "amd64"),
        ("linux", "arm64"),
        ("darwin", "amd64"),
        ("darwin", "arm64"),
    }
    for platform in platforms:
        assert (platform["uri"], platform["sha256"], platform["bin"]) == (URI, digest, "kubectl-foo")


def test_the_archive_holds_both_launchers_executable_the_wheel_and_the_licence(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path)
    with tarfile.open(plugin_archive(wheel, version=VERSION, out_dir=tmp_path)) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert set(members) == {"kubectl-foo", "kubectl_complete-foo", wheel.name, "LICENSE"}
        assert members["kubectl-foo"].mode == members["kubectl_complete-foo"].mode == 0o755
        assert tar.extractfile(wheel.name).read() == wheel.read_bytes()  # type: ignore[union-attr]


def test_the_same_inputs_make_the_same_archive_byte_for_byte(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path)
    first = plugin_archive(wheel, version=VERSION, out_dir=tmp_path / "a").read_bytes()
    os.utime(wheel, (1, 1))
    assert plugin_archive(wheel, version=VERSION, out_dir=tmp_path / "b").read_bytes() == first
    digest = krew_manifest(tmp_path / "a" / "kubectl-foo-1.2.3.tar.gz", version=VERSION, uri=URI)
    assert digest["spec"]["platforms"][0]["sha256"] == hashlib.sha256(first).hexdigest()


def test_the_launcher_krew_links_onto_path_runs_the_plugin_from_its_virtualenv(tmp_path: Path) -> None:
    with tarfile.open(plugin_archive(_wheel(tmp_path), version=VERSION, out_dir=tmp_path)) as tar:
        tar.extractall(tmp_path / "store", filter="data")
    # A first run already done: the virtualenv is there, so nothing is downloaded here.
    venv_bin = tmp_path / "cache" / "kubectl-foo" / VERSION / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin.parent / ".installed").touch()
    for command in ("kubectl-foo", "kubectl_complete-foo"):
        (venv_bin / command).write_text(f'#!/bin/sh\necho "{command} $*"\n')
        (venv_bin / command).chmod(0o755)
    (tmp_path / "path").mkdir()
    (tmp_path / "path" / "kubectl-foo").symlink_to(tmp_path / "store" / "kubectl-foo")  # as krew links it
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    result = subprocess.run(
        [str(tmp_path / "path" / "kubectl-foo"), "health", "-A"], capture_output=True, text=True, env=env, timeout=30
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "kubectl-foo health -A\n"


def test_the_release_command_makes_the_manifest_from_its_own_wheel_and_ships_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def pip_wheel(argv: list[str], **_: object) -> str:  # `pip wheel` without building one
        wheel_dir = Path(argv[argv.index("--wheel-dir") + 1])
        (wheel_dir / f"foo_operator-{VERSION}-py3-none-any.whl").write_bytes(b"PK\x05\x06" + bytes(18))
        return ""

    monkeypatch.setattr(release, "run", pip_wheel)
    made = release.Release(version=VERSION, source=tmp_path, dist=tmp_path / "dist", revision="r", epoch=0)
    made.dist.mkdir()
    assert release.build_plugin in release.ARTIFACTS
    release.build_plugin(made)
    archive, manifest = made.files  # both listed: release.json and SHA256SUMS name them
    platform = yaml.safe_load(manifest.read_text())["spec"]["platforms"][0]
    assert platform["sha256"] == hashlib.sha256(archive.read_bytes()).hexdigest()
    assert platform["uri"].endswith(f"/releases/download/v{VERSION}/kubectl-foo-{VERSION}.tar.gz")
