"""The kubectl plugin as krew ships plugins: a tar.gz archive and a Plugin manifest naming its sha256.

``release_plugin(wheel, version=..., out_dir=..., uri=...)`` is what a release calls: it writes
``kubectl-foo-<version>.tar.gz`` and ``foo.yaml`` (the manifest for a krew index) into
``out_dir`` and returns both paths. The plugin is Python, so one archive serves every platform
krew lists: it holds the foo-operator wheel and two small launchers (``kubectl-foo``, which krew
links onto PATH, and ``kubectl_complete-foo`` for kubectl's completion); the first run makes a
virtualenv for the wheel in the user's cache, later runs start it directly.

    python -m hack.krew --wheel dist/foo_operator-0.1.0-py3-none-any.whl --version 0.1.0 \\
        --out dist --uri https://example.org/releases/v0.1.0/kubectl-foo-0.1.0.tar.gz
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import sys
import tarfile
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
PLUGIN = "foo"  # `kubectl krew install foo`, `kubectl foo`
HOMEPAGE = "https://github.com/foo-operator/foo-operator"
PLATFORMS = [("linux", "amd64"), ("linux", "arm64"), ("darwin", "amd64"), ("darwin", "arm64")]
MTIME = 0  # every member's time: the same inputs make the same archive, byte for byte

_LAUNCHER = """#!/bin/sh
# {command}, from the foo-operator wheel beside this script (krew links the script onto PATH).
# The first run makes a virtualenv for the wheel (python3 >= 3.11 on PATH; its dependencies
# come from the package index pip uses); later runs start it directly. The marker is written
# last, so an interrupted first run is redone rather than half used.
set -e
self=$(python3 -c 'import os, sys; print(os.path.realpath(sys.argv[1]))' "$0")
venv="${{XDG_CACHE_HOME:-$HOME/.cache}}/kubectl-foo/{version}"
if [ ! -f "$venv/.installed" ]; then
  rm -rf "$venv"
  python3 -m venv "$venv" >&2
  "$venv/bin/python" -m pip install --quiet "$(dirname "$self")/{wheel}" >&2
  touch "$venv/.installed"
fi
exec "$venv/bin/{command}" "$@"
"""


def launcher(command: str, *, version: str, wheel: str) -> str:
    """The shell script krew links as ``command``; it runs the same command from the wheel."""
    return _LAUNCHER.format(command=command, version=version, wheel=wheel)


def _member(tar: tarfile.TarFile, name: str, data: bytes, mode: int) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, MTIME
    info.uname = info.gname = ""
    tar.addfile(info, io.BytesIO(data))


def plugin_archive(wheel: Path, *, version: str, out_dir: Path) -> Path:
    """``kubectl-foo-<version>.tar.gz``: the wheel, both launchers and the licence, reproducibly."""
    out_dir.mkdir(parents=True, exist_ok=True)
    archive = out_dir / f"kubectl-{PLUGIN}-{version}.tar.gz"
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for command in (f"kubectl-{PLUGIN}", f"kubectl_complete-{PLUGIN}"):
            script = launcher(command, version=version, wheel=wheel.name)
            _member(tar, command, script.encode(), 0o755)
        _member(tar, wheel.name, wheel.read_bytes(), 0o644)
        _member(tar, "LICENSE", (REPO_ROOT / "LICENSE").read_bytes(), 0o644)
    # gzip's header holds a time and a name too: both fixed.
    with open(archive, "wb") as out, gzip.GzipFile(fileobj=out, mode="wb", mtime=MTIME, filename="") as gz:
        gz.write(raw.getvalue())
    return archive


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def krew_manifest(archive: Path, *, version: str, uri: str) -> dict[str, Any]:
    """The krew index's Plugin for ``archive`` (published at ``uri``): one entry per platform."""
    platforms = [
        {
            "selector": {"matchLabels": {"os": os_, "arch": arch}},
            "uri": uri,
            "sha256": sha256(archive),
            "bin": f"kubectl-{PLUGIN}",
            "files": [{"from": "*", "to": "."}],
        }
        for os_, arch in PLATFORMS
    ]
    return {
        "apiVersion": "krew.googlecontainertools.github.com/v1alpha2",
        "kind": "Plugin",
        "metadata": {"name": PLUGIN},
        "spec": {
            "version": f"v{version.removeprefix('v')}",
            "homepage": HOMEPAGE,
            "shortDescription": "FooHealth, storage migration and CA expiry of foo-operator",
            "description": (
                "kubectl foo shows the FooHealth of Foos (the insights aggregated API), migrates\n"
                "stored Foos to the storage version (migrate-storage), and lists when the CA of\n"
                "every caBundle through which the apiserver trusts foo-operator expires (certs).\n"
            ),
            "caveats": (
                "Needs python3 (3.11 or later) on PATH. The first run installs the plugin's\n"
                "Python packages into ~/.cache/kubectl-foo/<version> (pip, from your package index).\n"
                "Shell completion (kubectl >= 1.26): link kubectl_complete-foo from the plugin's\n"
                "directory (kubectl krew info foo) onto your PATH.\n"
            ),
            "platforms": platforms,
        },
    }


def release_plugin(wheel: Path, *, version: str, out_dir: Path, uri: str) -> tuple[Path, Path]:
    """The archive and the manifest (``foo.yaml``) for ``version``, written into ``out_dir``."""
    archive = plugin_archive(wheel, version=version, out_dir=out_dir)
    manifest = out_dir / f"{PLUGIN}.yaml"
    manifest.write_text(yaml.safe_dump(krew_manifest(archive, version=version, uri=uri), sort_keys=False))
    return archive, manifest


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hack.krew", description=__doc__.split("\n\n")[0])
    p.add_argument("--wheel", type=Path, required=True, help="the foo-operator wheel to ship")
    p.add_argument("--version", required=True, help="the release's version, e.g. 0.1.0")
    p.add_argument("--out", type=Path, required=True, help="directory for the archive and foo.yaml")
    p.add_argument("--uri", required=True, help="where the archive will be downloaded from")
    args = p.parse_args(argv)
    if not args.wheel.is_file():
        p.error(f"--wheel {args.wheel}: no such file")
    archive, manifest = release_plugin(args.wheel, version=args.version, out_dir=args.out, uri=args.uri)
    print(f"wrote {archive} (sha256 {sha256(archive)}) and {manifest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
