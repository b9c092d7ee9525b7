"""The image's SBOM (CycloneDX 1.5 JSON): every Debian package and Python distribution in its rootfs.

    python -m hack.release.sbom ROOTFS DEBS_DIR OUT --name foo-operator --version 0.2.0

hack/image.sh calls it after stripping the rootfs. DEBS_DIR holds the .deb files mmdebstrap
unpacked into it (its extract variant keeps no dpkg database); each is read with `dpkg-deb` (its
control fields and the paths it ships). A Debian package is listed when at least one file it
ships is still in the image (the strip removes perl-base, the shells and dpkg itself whole:
listing them would claim what is not there). Python distributions are the `*.dist-info`
directories under the rootfs's Python paths.

Written here rather than taken from syft or cyclonedx-py: neither is packaged by Debian, syft is a
large Go build, and cyclonedx-py reads an installed environment, not a foreign rootfs; what the SBOM
needs is a .deb's control fields and file list (dpkg-deb reads both) and the core metadata of a
dist-info, read as its spec says. The output is deterministic: sorted components, the timestamp
from SOURCE_DATE_EPOCH, the serial number a UUID derived from the content, so the same image gives
the same SBOM byte for byte.
"""

from __future__ import annotations

import argparse
import email.parser
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

PYTHON_PATHS = ("usr/lib/python3/dist-packages", "usr/local/lib/python3/dist-packages")
# The namespace the serial numbers are derived in (uuid5), fixed so the same content gives the same one.
SERIAL_NAMESPACE = uuid.UUID("6f0c7c8e-5a53-4d7e-9a4e-0f6f6f2d8a11")


@dataclass(frozen=True)
class Component:
    kind: str  # "deb" or "pypi"
    name: str
    version: str
    purl: str
    licenses: tuple[str, ...] = ()


def _deb_fields(deb: Path) -> tuple[str, str, str]:
    """A .deb's (Package, Version, Architecture)."""
    out = subprocess.run(
        ["dpkg-deb", "--show", "--showformat=${Package}\\t${Version}\\t${Architecture}", str(deb)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    name, version, arch = out.split("\t")
    return name, version, arch


def _deb_paths(deb: Path) -> list[str]:
    """The regular files and symlinks a .deb ships, relative to the root."""
    tar_bytes = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as tar:
        return [m.name.removeprefix("./") for m in tar.getmembers() if m.isfile() or m.issym()]


def debian_packages(rootfs: Path, debs_dir: Path, distro: str) -> list[Component]:
    found = []
    for deb in sorted(debs_dir.glob("*.deb")):
        name, version, arch = _deb_fields(deb)
        if not any((rootfs / path).is_symlink() or (rootfs / path).is_file() for path in _deb_paths(deb)):
            continue
        purl = f"pkg:deb/debian/{name}@{quote(version, safe='')}?arch={arch}&distro={distro}"
        found.append(Component("deb", name, version, purl))
    return found


def _normalized(name: str) -> str:
    """PEP 503's normal form, which the pypi purl type asks for."""
    return re.sub(r"[-_.]+", "-", name).lower()


def python_distributions(rootfs: Path) -> list[Component]:
    found = []
    for base in PYTHON_PATHS:
        for metadata_file in sorted((rootfs / base).glob("*.dist-info/METADATA")):
            meta = email.parser.HeaderParser().parsestr(metadata_file.read_text(errors="replace"))
            name, version = meta.get("Name", ""), meta.get("Version", "")
            if not name:
                continue
            licenses = tuple(
                v for v in (meta.get("License-Expression") or meta.get("License") or "",) if v and "\n" not in v
            )
            purl = f"pkg:pypi/{_normalized(name)}@{quote(version, safe='')}"
            found.append(Component("pypi", name, version, purl, licenses[:1]))
    return found


def cyclonedx(
    components: list[Component],
    *,
    name: str,
    version: str,
    epoch: int,
    extra_properties: dict[str, str] | None = None,
    kind: str = "container",
) -> dict[str, Any]:
    """The BOM of `components`, describing a `kind` ("container": the image; "application": the
    kubectl plugin's archives) named `name`."""
    ordered = sorted(set(components), key=lambda c: (c.kind, c.name.lower(), c.version))
    entries = []
    for c in ordered:
        entry: dict[str, Any] = {
            "type": "library",
            "bom-ref": c.purl,
            "name": c.name,
            "version": c.version,
            "purl": c.purl,
        }
        if c.licenses:
            entry["licenses"] = [{"license": {"name": lic}} for lic in c.licenses]
        entries.append(entry)
    serial = uuid.uuid5(SERIAL_NAMESPACE, json.dumps([name, version, [c.purl for c in ordered]]))
    properties = [{"name": k, "value": v} for k, v in sorted((extra_properties or {}).items())]
    return {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "serialNumber": f"urn:uuid:{serial}",
        "version": 1,
        "metadata": {
            "timestamp": datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "tools": {"components": [{"type": "application", "name": "foo-operator hack/release/sbom.py"}]},
            "component": {
                "type": kind,
                "bom-ref": f"pkg:oci/{name}@{version}" if kind == "container" else f"pkg:generic/{name}@{version}",
                "name": name,
                "version": version,
            },
            "properties": properties,
        },
        "components": entries,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hack.release.sbom", description=__doc__.split("\n")[0])
    parser.add_argument("rootfs", type=Path)
    parser.add_argument("debs_dir", type=Path, help="the .deb files unpacked into the rootfs")
    parser.add_argument("out", type=Path)
    parser.add_argument("--name", default="foo-operator")
    parser.add_argument("--version", required=True)
    parser.add_argument("--distro", default="debian-12")
    args = parser.parse_args(argv)
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
    debs = debian_packages(args.rootfs, args.debs_dir, args.distro)
    dists = python_distributions(args.rootfs)
    if not debs or not dists:
        print(
            f"hack.release.sbom: error: found {len(debs)} Debian packages and {len(dists)} Python distributions",
            file=sys.stderr,
        )
        return 1
    bom = cyclonedx([*debs, *dists], name=args.name, version=args.version, epoch=epoch)
    args.out.write_text(json.dumps(bom, indent=1, sort_keys=False) + "\n")
    print(f"==> SBOM: {len(debs)} Debian packages, {len(dists)} Python distributions → {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
