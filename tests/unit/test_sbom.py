"""The image's SBOM lists what is in the rootfs: Debian packages with a file left, every dist-info."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from hack.release.sbom import cyclonedx, debian_packages, main, python_distributions

pytestmark = pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="dpkg-deb (Debian) reads the .debs")


def make_deb(into: Path, name: str, version: str, files: list[str]) -> None:
    """A real .deb (dpkg-deb --build) shipping ``files``."""
    tree = into / f"{name}-tree"
    (tree / "DEBIAN").mkdir(parents=True)
    (tree / "DEBIAN" / "control").write_text(
        f"Package: {name}\nVersion: {version}\nArchitecture: amd64\nMaintainer: t <t@example>\nDescription: t\n"
    )
    for path in files:
        (tree / path).parent.mkdir(parents=True, exist_ok=True)
        (tree / path).write_text("")
    subprocess.run(
        ["dpkg-deb", "--build", "--root-owner-group", str(tree), str(into / f"{name}.deb")],
        check=True,
        capture_output=True,
    )
    shutil.rmtree(tree)


def fake_rootfs(tmp_path: Path) -> tuple[Path, Path]:
    rootfs, debs = tmp_path / "rootfs", tmp_path / "debs"
    debs.mkdir()
    make_deb(debs, "python3.11-minimal", "3.11.2-6+deb12u6", ["usr/bin/python3.11"])
    make_deb(debs, "perl-base", "5.36.0-7+deb12u2", ["usr/bin/perl"])  # stripped from the image
    (rootfs / "usr" / "bin").mkdir(parents=True)
    (rootfs / "usr" / "bin" / "python3.11").write_text("")
    site = rootfs / "usr" / "lib" / "python3" / "dist-packages"
    for name, version in (("Foo_Operator", "0.2.0"), ("pydantic_core", "2.41.5")):
        info = site / f"{name}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nLicense: MIT\n\nbody\n"
        )
    return rootfs, debs


def test_a_debian_package_is_listed_only_while_a_file_of_it_is_in_the_image(tmp_path: Path) -> None:
    rootfs, dpkg = fake_rootfs(tmp_path)
    debs = debian_packages(rootfs, dpkg, "debian-12")
    assert [(d.name, d.version) for d in debs] == [("python3.11-minimal", "3.11.2-6+deb12u6")]
    assert debs[0].purl == "pkg:deb/debian/python3.11-minimal@3.11.2-6%2Bdeb12u6?arch=amd64&distro=debian-12"


def test_every_python_distribution_is_listed_by_its_normalized_purl(tmp_path: Path) -> None:
    rootfs, _ = fake_rootfs(tmp_path)
    purls = sorted(d.purl for d in python_distributions(rootfs))
    assert purls == ["pkg:pypi/foo-operator@0.2.0", "pkg:pypi/pydantic-core@2.41.5"]


def test_the_same_rootfs_gives_the_same_sbom_byte_for_byte(tmp_path: Path) -> None:
    rootfs, dpkg = fake_rootfs(tmp_path)
    outs = []
    for n in range(2):
        out = tmp_path / f"sbom{n}.json"
        assert main([str(rootfs), str(dpkg), str(out), "--version", "0.2.0"]) == 0
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
    bom = json.loads(outs[0])
    assert bom["bomFormat"] == "CycloneDX" and bom["specVersion"] == "1.5"
    assert bom["metadata"]["component"] == {
        "type": "container",
        "bom-ref": "pkg:oci/foo-operator@0.2.0",
        "name": "foo-operator",
        "version": "0.2.0",
    }
    assert len(bom["components"]) == 3


def test_the_serial_number_changes_with_the_content() -> None:
    one = cyclonedx([], name="x", version="1", epoch=0)
    two = cyclonedx([], name="x", version="2", epoch=0)
    assert one["serialNumber"] != two["serialNumber"]
